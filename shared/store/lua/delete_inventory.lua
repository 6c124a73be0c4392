-- Forget a node's inventory (its allocations stay until released). The generation survives and is bumped.
-- KEYS: 1 inventory, 2 capacity, 3 generation, 4 change stream, 5 inventory-nodes set, [6 lease]
-- ARGV: 1 fence token, 2 node, 3 stream maxlen
-- Returns {'fenced'} | {'ok', generation, changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local node, maxlen = ARGV[2], ARGV[3]
redis.call('SREM', KEYS[5], node)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'ok', num(redis.call('GET', KEYS[3])), 0}
end
redis.call('DEL', KEYS[1], KEYS[2])
local gen = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'deleted')
return {'ok', gen, 1}
