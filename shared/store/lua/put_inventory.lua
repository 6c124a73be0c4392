-- Store a node's inventory and its capacity numbers; bump the generation only when the bytes changed.
-- KEYS: 1 inventory, 2 capacity, 3 generation, 4 change stream, 5 inventory-nodes set, [6 lease]
-- ARGV: 1 fence token, 2 node, 3 envelope, 4 stream maxlen, 5.. uuid, capacity pairs
-- Returns {'fenced'} | {'ok', generation, changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local node, blob, maxlen = ARGV[2], ARGV[3], ARGV[4]
redis.call('SADD', KEYS[5], node)
if redis.call('GET', KEYS[1]) == blob then
  return {'ok', num(redis.call('GET', KEYS[3])), 0}
end
redis.call('SET', KEYS[1], blob)
redis.call('DEL', KEYS[2])
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
local gen = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'inventory')
return {'ok', gen, 1}
