-- A new primary starts a new store epoch (docs/store.md, failover): the writes a failover lost are rebuilt from
-- the API server, as after a flush.
-- KEYS: 1 meta, 2 the set of nodes holding allocations (unused), then per lease: its key and its fencing counter
-- ARGV: 1 the primary's replication id, 2 candidate epoch, 3 key prefix (unused)
-- Bind claims are kept: a claim is taken over only once its holder has given up (docs/extender-bind.md), and
-- the claim a bind re-checks before writing the pod was acknowledged by a replica (WAIT), so it survived.
-- Returns {rotated (0/1), epoch or false}
local known = redis.call('HGET', KEYS[1], 'primary')
if known == ARGV[1] then
  return {0, redis.call('HGET', KEYS[1], 'epoch')}
end
redis.call('HSET', KEYS[1], 'primary', ARGV[1])
if not known or not redis.call('HGET', KEYS[1], 'epoch') then
  -- first sight of a primary (or a flushed store: ensure_epoch creates the epoch): nothing to rotate
  return {0, redis.call('HGET', KEYS[1], 'epoch')}
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[2])
-- every lease ends: its holder steps down and a new term rebuilds; the counters jump past any token the old
-- primary handed out after its last replicated write
for i = 3, #KEYS, 2 do
  redis.call('DEL', KEYS[i])
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    redis.call('INCRBY', KEYS[i + 1], 1000000)
  end
end
return {1, ARGV[2]}
