-- Usage counters of one node (HASH): 'u|<uuid>' = 'slots,mem,cores,exclusive holders',
-- 'p|<uuid>|<start>|<size>' = holders of a MIG placement, 'l|<uuid>|<geometry>|<slot>' = holders of a legacy slot,
-- 'g|<uuid>|<tag>' = slots held by tasks carrying a tag (a charge's t, weighted by its n).
-- Charges are JSON arrays of {u, n, m, c, x, p=[[start,size]...], l=[[geometry,slot]...], [t=[tag...]]}.

local function dev(u, id)
  local d = u[id]
  if d == nil then
    d = {n = 0, m = 0, c = 0, x = 0, p = {}, l = {}, g = {}, touched = false, pt = {}, lt = {}, gt = {}}
    u[id] = d
  end
  return d
end

local function load_usage(key)
  local flat = redis.call('HGETALL', key)
  local u = {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local kind = string.sub(f, 1, 2)
    if kind == 'u|' then
      local d = dev(u, string.sub(f, 3))
      local n, m, c, x = string.match(v, '^(-?%d+),(-?%d+),(-?%d+),(-?%d+)$')
      d.n, d.m, d.c, d.x = tonumber(n), tonumber(m), tonumber(c), tonumber(x)
    elseif kind == 'p|' then
      local id, k = string.match(f, '^p|(.*)|(%d+|%d+)$')
      dev(u, id).p[k] = tonumber(v)
    elseif kind == 'l|' then
      local id, k = string.match(f, '^l|(.*)|(%d+|%d+)$')
      dev(u, id).l[k] = tonumber(v)
    elseif kind == 'g|' then
      local id, k = string.match(f, '^g|(.*)|([^|]*)$')
      dev(u, id).g[k] = tonumber(v)
    end
  end
  return u
end

-- load_usage for the devices of two charge lists only (what a reservation checks and writes back): their 'u|'
-- fields by HMGET instead of the whole hash, unless a charge carries MIG placements or legacy slots, whose
-- fields only a scan finds (then load_usage), or tags or a sharing rule (whose 'g|' fields too).
local function load_devices(key, a, b)
  local ids = {}
  for _, list in ipairs({a, b}) do
    for _, ch in ipairs(list) do
      if #ch.p > 0 or #ch.l > 0 or ch.t or ch.r or ch.q then
        return load_usage(key)
      end
      ids[#ids + 1] = ch.u
    end
  end
  local u = {}
  if #ids == 0 then
    return u
  end
  local fields = {}
  for i, id in ipairs(ids) do
    fields[i] = 'u|' .. id
  end
  local vals = redis.call('HMGET', key, unpack(fields))
  for i, id in ipairs(ids) do
    local d = dev(u, id)
    local v = vals[i]
    if v then
      local n, m, c, x = string.match(v, '^(-?%d+),(-?%d+),(-?%d+),(-?%d+)$')
      d.n, d.m, d.c, d.x = tonumber(n), tonumber(m), tonumber(c), tonumber(x)
    end
  end
  return u
end

local function apply(u, charges, sign)
  for _, ch in ipairs(charges) do
    local d = dev(u, ch.u)
    d.n = d.n + sign * ch.n
    d.m = d.m + sign * ch.m
    d.c = d.c + sign * ch.c
    d.x = d.x + sign * ch.x
    d.touched = true
    for _, p in ipairs(ch.p) do
      local k = fmt(p[1]) .. '|' .. fmt(p[2])
      d.p[k] = (d.p[k] or 0) + sign
      d.pt[k] = true
    end
    for _, l in ipairs(ch.l) do
      local k = fmt(l[1]) .. '|' .. fmt(l[2])
      d.l[k] = (d.l[k] or 0) + sign
      d.lt[k] = true
    end
    for _, t in ipairs(ch.t or {}) do
      d.g[t] = (d.g[t] or 0) + sign * ch.n
      d.gt[t] = true
    end
  end
end

local function usage_fields(u)
  -- the complete field map the counters of u amount to (zero entries omitted)
  local want = {}
  for id, d in pairs(u) do
    if d.n ~= 0 or d.m ~= 0 or d.c ~= 0 or d.x ~= 0 then
      want['u|' .. id] = fmt(d.n) .. ',' .. fmt(d.m) .. ',' .. fmt(d.c) .. ',' .. fmt(d.x)
    end
    for k, v in pairs(d.p) do
      if v ~= 0 then
        want['p|' .. id .. '|' .. k] = fmt(v)
      end
    end
    for k, v in pairs(d.l) do
      if v ~= 0 then
        want['l|' .. id .. '|' .. k] = fmt(v)
      end
    end
    for k, v in pairs(d.g) do
      if v ~= 0 then
        want['g|' .. id .. '|' .. k] = fmt(v)
      end
    end
  end
  return want
end

local function store_counts(key, prefix, id, touched, values)
  -- one '<prefix>|<id>|<k>' counter per touched k: written, or removed at 0
  for k in pairs(touched) do
    local v = values[k] or 0
    if v == 0 then
      redis.call('HDEL', key, prefix .. '|' .. id .. '|' .. k)
    else
      redis.call('HSET', key, prefix .. '|' .. id .. '|' .. k, fmt(v))
    end
  end
end

local function store_usage(key, u)
  -- write back only the devices and placements apply() touched
  for id, d in pairs(u) do
    if d.touched then
      if d.n == 0 and d.m == 0 and d.c == 0 and d.x == 0 then
        redis.call('HDEL', key, 'u|' .. id)
      else
        redis.call('HSET', key, 'u|' .. id, fmt(d.n) .. ',' .. fmt(d.m) .. ',' .. fmt(d.c) .. ',' .. fmt(d.x))
      end
      store_counts(key, 'p', id, d.pt, d.p)  -- MIG placements
      store_counts(key, 'l', id, d.lt, d.l)  -- legacy MIG slots
      store_counts(key, 'g', id, d.gt, d.g)  -- usage tags
    end
  end
end
