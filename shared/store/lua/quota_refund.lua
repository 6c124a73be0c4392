-- Take a pod's charge off its namespace quota. No-op if absent.
-- KEYS: 1 quota, 2 quota pods, [3 lease]   ARGV: 1 fence token, 2 pod uid
-- Returns {'fenced'} | {'absent'} | {'ok', mem, cores}
if not fence_ok() then
  return {'fenced'}
end
local old = redis.call('HGET', KEYS[2], ARGV[2])
if not old then
  return {'absent'}
end
local om, oc = string.match(old, '^(-?%d+),(-?%d+)$')
om, oc = tonumber(om), tonumber(oc)
local um, uc = num(redis.call('HGET', KEYS[1], 'um')), num(redis.call('HGET', KEYS[1], 'uc'))
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'um', fmt(um - om), 'uc', fmt(uc - oc))
return {'ok', fmt(om), fmt(oc)}
