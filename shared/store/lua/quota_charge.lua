-- Charge a pod's memory/cores against its namespace quota, replacing its earlier charge (idempotent by uid).
-- Unless forced, refuse when a dimension grows beyond a set limit.
-- KEYS: 1 quota, 2 quota pods, 3 namespaces set, [4 lease]
-- ARGV: 1 fence token, 2 namespace, 3 pod uid, 4 mem MiB, 5 cores %, 6 force '0'|'1',
--       7 memory limit factor (memoryFactor: charges are scaled MiB, the limit is raw; default 1)
-- Returns {'fenced'} | {'exceeded', dimension, limit, used by others, needed} | {'ok', changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local uid, mem, cores = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local value = fmt(mem) .. ',' .. fmt(cores)
local old = redis.call('HGET', KEYS[2], uid)
if old == value then
  return {'ok', 0}
end
local om, oc = 0, 0
if old then
  om, oc = string.match(old, '^(-?%d+),(-?%d+)$')
  om, oc = tonumber(om), tonumber(oc)
end
local um, uc = num(redis.call('HGET', KEYS[1], 'um')), num(redis.call('HGET', KEYS[1], 'uc'))
if ARGV[6] ~= '1' then
  local lm, lc = redis.call('HGET', KEYS[1], 'lm'), redis.call('HGET', KEYS[1], 'lc')
  local factor = tonumber(ARGV[7] or '1') or 1
  if lm and mem > om and um - om + mem > tonumber(lm) * factor then
    return {'exceeded', 'memory', lm, fmt(um - om), fmt(mem)}
  end
  if lc and cores > oc and uc - oc + cores > tonumber(lc) then
    return {'exceeded', 'cores', lc, fmt(uc - oc), fmt(cores)}
  end
end
redis.call('HSET', KEYS[2], uid, value)
redis.call('HSET', KEYS[1], 'um', fmt(um - om + mem), 'uc', fmt(uc - oc + cores))
redis.call('SADD', KEYS[3], ARGV[2])
return {'ok', 1}
