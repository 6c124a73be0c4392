-- Release a node lock only if the given owner holds it (and, if a token is given, only that acquisition).
-- A release bumps the node's generation and publishes a change (see lock_acquire.lua) marked 'lock' 'released',
-- which wakes the binds waiting for the lock (readers that do not know the field ignore it).
-- KEYS: 1 lock, 2 generation, 3 change stream, 4 pod charges
-- ARGV: 1 owner ('' = any owner), 2 token ('' = any token), 3 stream maxlen, 4 node   Returns 1 if released, else 0
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local tok, _, _, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
if (ARGV[1] == '' or owner == ARGV[1]) and (ARGV[2] == '' or tok == ARGV[2]) then
  release_node_lock(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], KEYS[4])
  return 1
end
return 0
