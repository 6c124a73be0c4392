-- Mark a pod's reservation confirmed (its annotations were observed). Usage is unchanged. When that ends the
-- node's binds in flight (no lock held, no other reservation unconfirmed: binds_in_flight in the prelude), the
-- node's generation moves and the change feed says so (no bind in flight any more), for the extenders' snapshots.
-- KEYS: 1 pod charges, 2 generation, 3 change stream, 4 node lock, [5 lease]
-- ARGV: 1 fence token, 2 pod uid, 3 stream maxlen, 4 node
-- Returns {'fenced'} | {'absent'} | {'ok', changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local rec = redis.call('HGET', KEYS[1], ARGV[2])
if not rec then
  return {'absent'}
end
local state, t, cjs = parse_record(rec)
if state == 'confirmed' then
  return {'ok', 0}
end
redis.call('HSET', KEYS[1], ARGV[2], 'confirmed|' .. t .. '|' .. cjs)
if binds_in_flight(KEYS[1], KEYS[4]) == 0 then
  publish_inflight(KEYS[2], KEYS[3], ARGV[3], ARGV[4], 0)
end
return {'ok', 1}
