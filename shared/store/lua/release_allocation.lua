-- Release one pod's charges on one node. No-op if the pod holds nothing there.
-- KEYS: 1 usage, 2 pod charges, 3 allocations, 4 generation, 5 change stream, 6 allocation-nodes set,
--       7 pod index, [8 lease]
-- ARGV: 1 fence token, 2 pod uid, 3 node, 4 stream maxlen
-- Returns {'fenced'} | {'absent'} | {'ok', generation, released record, allocation envelope}
if not fence_ok() then
  return {'fenced'}
end
local uid, node, maxlen = ARGV[2], ARGV[3], ARGV[4]
local rec = redis.call('HGET', KEYS[2], uid)
if not rec then
  if redis.call('HGET', KEYS[7], uid) == node then
    redis.call('HDEL', KEYS[7], uid)
  end
  return {'absent'}
end
local blob = redis.call('HGET', KEYS[3], uid) or ''
local _, _, cjs = parse_record(rec)
local u = load_usage(KEYS[1])
apply(u, cjson.decode(cjs), -1)
store_usage(KEYS[1], u)
redis.call('HDEL', KEYS[2], uid)
redis.call('HDEL', KEYS[3], uid)
if redis.call('HGET', KEYS[7], uid) == node then
  redis.call('HDEL', KEYS[7], uid)
end
if redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[6], node)
end
local gen = redis.call('INCR', KEYS[4])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage')
return {'ok', gen, rec, blob}
