-- Recompute a node's usage counters from its stored per-pod charges and repair any difference.
-- KEYS: 1 usage, 2 pod charges, 3 generation, 4 change stream, [5 lease]
-- ARGV: 1 fence token, 2 node, 3 stream maxlen
-- Returns {'fenced'} | {'ok', differing fields, generation}
if not fence_ok() then
  return {'fenced'}
end
local node, maxlen = ARGV[2], ARGV[3]
local flat = redis.call('HGETALL', KEYS[1])
local cur = {}
for i = 1, #flat, 2 do
  cur[flat[i]] = flat[i + 1]
end
local u = {}
local recs = redis.call('HVALS', KEYS[2])
for _, rec in ipairs(recs) do
  local _, _, cjs = parse_record(rec)
  apply(u, cjson.decode(cjs), 1)
end
local want = usage_fields(u)
local diff = 0
for f, v in pairs(cur) do
  if want[f] ~= v then
    diff = diff + 1
  end
end
for f in pairs(want) do
  if cur[f] == nil then
    diff = diff + 1
  end
end
local gen = num(redis.call('GET', KEYS[3]))
if diff > 0 then
  redis.call('DEL', KEYS[1])
  for f, v in pairs(want) do
    redis.call('HSET', KEYS[1], f, v)
  end
  gen = redis.call('INCR', KEYS[3])
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage')
end
return {'ok', diff, gen}
