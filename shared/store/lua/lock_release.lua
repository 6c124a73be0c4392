-- Release a node lock only if the given owner holds it (and, if a token is given, only that acquisition).
-- KEYS: 1 lock   ARGV: 1 owner ('' = any owner), 2 token ('' = any token)   Returns 1 if released, else 0
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local tok, _, _, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
if (ARGV[1] == '' or owner == ARGV[1]) and (ARGV[2] == '' or tok == ARGV[2]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
