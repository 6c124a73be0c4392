-- Release a node lock if the given owner holds it and took it no later than a given time (a newer acquisition by
-- the same owner, a bind retried meanwhile, is kept), and answer what the lock was either way, read at the same
-- moment as lock_inspect reads it, so a caller told "not released" has what it needs without reading it again.
-- A release bumps the node's generation and publishes a change marked as a release (see lock_release.lua).
-- KEYS: 1 lock, 2 generation, 3 change stream, 4 pod charges
-- ARGV: 1 owner, 2 latest acquisition ms ('' = any), 3 stream maxlen, 4 node
-- Returns {1 if released else 0, value or '', now_ms}
local now = fmt(now_ms())
local v = redis.call('GET', KEYS[1])
if not v then
  return {0, '', now}
end
local _, _, acq, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
if owner == ARGV[1] and (ARGV[2] == '' or tonumber(acq) <= tonumber(ARGV[2])) then
  release_node_lock(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[4], KEYS[4])
  return {1, v, now}
end
return {0, v, now}
