-- Charge a pod's memory/cores against its namespace quota, replacing its earlier charge (idempotent by uid).
-- Unless forced, refuse when a dimension of a vendor grows beyond that vendor's set limit.
-- KEYS: 1 quota, 2 quota pods, 3 namespaces set, [4 lease]
-- ARGV: 1 fence token, 2 namespace, 3 pod uid, 4 NVIDIA mem MiB, 5 NVIDIA cores %, 6 force '0'|'1',
--       7 NVIDIA memory limit factor (memoryFactor: charges are scaled MiB, the limit is raw; default 1),
--       8.. triples for every other vendor with a non-zero charge, sorted by word: word, mem MiB, cores %
--       (their limits are stored in MiB: no factor)
-- Returns {'fenced'} | {'exceeded', dimension, limit, used by others, needed, vendor word ('' = NVIDIA)}
--       | {'ok', changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local uid, mem, cores = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local value = fmt(mem) .. ',' .. fmt(cores)
local new = {}
local words = {}
for i = 8, #ARGV, 3 do
  local w, m, c = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  new[w] = {m, c}
  words[#words + 1] = w
  value = value .. ';' .. w .. '=' .. fmt(m) .. ',' .. fmt(c)
end
local old = redis.call('HGET', KEYS[2], uid)
if old == value then
  return {'ok', 0}
end
local om, oc, oo = 0, 0, {}
if old then
  om, oc, oo = quota_charge_parse(old)
end
local um, uc = num(redis.call('HGET', KEYS[1], 'um')), num(redis.call('HGET', KEYS[1], 'uc'))
local uo = quota_parts(redis.call('HGET', KEYS[1], 'uv') or nil)
if ARGV[6] ~= '1' then
  local lm, lc = redis.call('HGET', KEYS[1], 'lm'), redis.call('HGET', KEYS[1], 'lc')
  local factor = tonumber(ARGV[7] or '1') or 1
  if lm and mem > om and um - om + mem > tonumber(lm) * factor then
    return {'exceeded', 'memory', lm, fmt(um - om), fmt(mem), ''}
  end
  if lc and cores > oc and uc - oc + cores > tonumber(lc) then
    return {'exceeded', 'cores', lc, fmt(uc - oc), fmt(cores), ''}
  end
  local lo = quota_parts(redis.call('HGET', KEYS[1], 'lv') or nil)
  for _, w in ipairs(words) do
    local lim = lo[w]
    if lim then
      local n, o, u = new[w], oo[w] or {0, 0}, uo[w] or {0, 0}
      if lim[1] and n[1] > o[1] and u[1] - o[1] + n[1] > lim[1] then
        return {'exceeded', 'memory', fmt(lim[1]), fmt(u[1] - o[1]), fmt(n[1]), w}
      end
      if lim[2] and n[2] > o[2] and u[2] - o[2] + n[2] > lim[2] then
        return {'exceeded', 'cores', fmt(lim[2]), fmt(u[2] - o[2]), fmt(n[2]), w}
      end
    end
  end
end
quota_add(uo, oo, -1)
quota_add(uo, new, 1)
redis.call('HSET', KEYS[2], uid, value)
redis.call('HSET', KEYS[1], 'um', fmt(um - om + mem), 'uc', fmt(uc - oc + cores))
if old or #words > 0 then
  quota_store_others(KEYS[1], uo)
end
redis.call('SADD', KEYS[3], ARGV[2])
return {'ok', 1}
