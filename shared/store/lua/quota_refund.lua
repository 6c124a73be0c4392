-- Take a pod's charge off its namespace quota. No-op if absent.
-- KEYS: 1 quota, 2 quota pods, [3 lease]   ARGV: 1 fence token, 2 pod uid
-- Returns {'fenced'} | {'absent'} | {'ok', NVIDIA mem, NVIDIA cores, other vendors' part ('W=m,c;…' or '')}
if not fence_ok() then
  return {'fenced'}
end
local old = redis.call('HGET', KEYS[2], ARGV[2])
if not old then
  return {'absent'}
end
local om, oc, oo = quota_charge_parse(old)
local um, uc = num(redis.call('HGET', KEYS[1], 'um')), num(redis.call('HGET', KEYS[1], 'uc'))
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'um', fmt(um - om), 'uc', fmt(uc - oc))
local others = quota_join(oo)
if others ~= '' then
  local uo = quota_parts(redis.call('HGET', KEYS[1], 'uv') or nil)
  quota_add(uo, oo, -1)
  quota_store_others(KEYS[1], uo)
end
return {'ok', fmt(om), fmt(oc), others}
