-- Replace every per-pod charge of a namespace (reconcile from the API) and recompute the sums.
-- KEYS: 1 quota, 2 quota pods, 3 namespaces set, [4 lease]
-- ARGV: 1 fence token, 2 namespace, 3.. pod uid, charge ('mem,cores[;W=mem,cores…]') pairs
-- Returns {'fenced'} | {'ok', number of per-pod entries that differed}
if not fence_ok() then
  return {'fenced'}
end
local flat = redis.call('HGETALL', KEYS[2])
local cur = {}
for i = 1, #flat, 2 do
  cur[flat[i]] = flat[i + 1]
end
local diff = 0
local um, uc, uo = 0, 0, {}
local want = {}
for i = 3, #ARGV, 2 do
  local uid, value = ARGV[i], ARGV[i + 1]
  want[uid] = true
  if cur[uid] ~= value then
    diff = diff + 1
  end
  local m, c, o = quota_charge_parse(value)
  um, uc = um + m, uc + c
  quota_add(uo, o, 1)
end
for uid in pairs(cur) do
  if not want[uid] then
    diff = diff + 1
  end
end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'um', fmt(um), 'uc', fmt(uc))
quota_store_others(KEYS[1], uo)
redis.call('SADD', KEYS[3], ARGV[2])
return {'ok', diff}
