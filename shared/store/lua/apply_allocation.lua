-- Reserve (extender: capacity-checked) or record (informer: unconditional, the API is the truth) one pod's
-- charges on one node, replacing any earlier record of the same pod uid on this node atomically.
-- KEYS: 1 capacity, 2 usage, 3 pod charges, 4 allocations, 5 generation, 6 change stream,
--       7 allocation-nodes set, 8 pod index, 9 bind claims, 10 the pod namespace's quota, 11 meta, 12 bind hints,
--       [13 lease]
-- ARGV: 1 fence token, 2 'reserve'|'record', 3 pod uid, 4 charges JSON, 5 allocation envelope, 6 node, 7 stream maxlen,
--       8 '1' when the pod's policy is mutex (reserve only: every charged device must be idle),
--       9 '1' for a fresh reserve: only when the pod index holds nothing for the pod and the namespace has no
--         quota envelope (what /filter would otherwise read first), else {'unsettled', indexed node or ''},
--       10 the store epoch the caller planned in ('' = unchecked): another epoch (a flush, a new primary) refuses,
--       11 the bind hint of a reservation ('' or absent: none); a reserve that succeeds sets or clears it, a record
--          clears it
--       12 a preemption hold (reserve only; '' or absent: none): a JSON array of the victims' pod uids on this node.
--          Their charges count as freed for the capacity checks but stay in the usage until the informer releases
--          them (the victims are terminating), so the usage may pass capacity meanwhile and nobody else fits in
--          the freed room. The victims are kept in the bind hints as 'w|<uid>' (docs/preemption.md).
-- A reserve never replaces a record a bind has claimed, marked bound, or the informer confirmed: the pod's
-- devices belong to that decision ({'owned', state}). A record (the API's truth) replaces anything; when its
-- content differs, the claim on the old record goes with it.
-- Returns {'fenced'} | {'epoch'} (the store epoch is not ARGV[10]: nothing written)
--       | {'unsettled', node or ''} (fresh only)
--       | {'elsewhere', node} (the pod holds charges on another node: release them, then retry)
--       | {'owned', state}
--       | {'conflict', dimension, device, needed, free, detail}
--       | {'ok', generation, usage_changed 0/1, record_changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
if ARGV[10] ~= nil and ARGV[10] ~= '' and redis.call('HGET', KEYS[11], 'epoch') ~= ARGV[10] then
  return {'epoch'}
end
local indexed = redis.call('HGET', KEYS[8], ARGV[3])
if ARGV[9] == '1' then
  if indexed then
    return {'unsettled', indexed}
  end
  if redis.call('HEXISTS', KEYS[10], 'env') == 1 then
    return {'unsettled', ''}
  end
end
if indexed and indexed ~= ARGV[6] then
  return {'elsewhere', indexed}
end
local reserve = ARGV[2] == 'reserve'
local mutex = ARGV[8] == '1'
local uid, cjs, blob, node, maxlen = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local state = 'confirmed'
if reserve then
  state = 'reserved'
end

local function set_hint()
  local hint = ARGV[11]
  if reserve and hint ~= nil and hint ~= '' then
    redis.call('HSET', KEYS[12], uid, hint)
  else
    redis.call('HDEL', KEYS[12], uid)
  end
end

local function conflict(dim, device, needed, free, detail)
  return {'conflict', dim, device, fmt(needed), fmt(free), detail}
end

if reserve and redis.call('EXISTS', KEYS[1]) == 0 then
  return conflict('node_unknown', '', 0, 0, 'node has no inventory')
end

local old_rec = redis.call('HGET', KEYS[3], uid)
local old_state, old_t, old_cjs
if old_rec then
  old_state, old_t, old_cjs = parse_record(old_rec)
end
if reserve and old_rec and old_state ~= 'reserved' then
  return {'owned', old_state}
end
if old_rec and old_cjs == cjs and redis.call('HGET', KEYS[4], uid) == blob then
  -- same content again: a no-op, except that recording confirms a reservation (and a reserve renews its hint)
  set_hint()
  redis.call('SADD', KEYS[7], node)
  redis.call('HSET', KEYS[8], uid, node)
  local gen = num(redis.call('GET', KEYS[5]))
  if (not reserve) and old_state ~= 'confirmed' then
    redis.call('HSET', KEYS[3], uid, 'confirmed|' .. old_t .. '|' .. cjs)
    return {'ok', gen, 0, 1}
  end
  return {'ok', gen, 0, 0}
end

local new = cjson.decode(cjs)
local old_charges = old_rec and cjson.decode(old_cjs) or {}
local victims = {}
local hold = reserve and ARGV[12] ~= nil and ARGV[12] ~= ''
local u
if hold then
  u = load_usage(KEYS[2])
  for _, v in ipairs(cjson.decode(ARGV[12])) do
    local vrec = redis.call('HGET', KEYS[3], v)
    if vrec and v ~= uid then
      local _, _, vcjs = parse_record(vrec)
      local vch = cjson.decode(vcjs)
      apply(u, vch, -1)
      victims[#victims + 1] = vch
    end
  end
else
  u = load_devices(KEYS[2], new, old_charges)
end
if old_rec then
  apply(u, old_charges, -1)
end

if reserve then
  for _, ch in ipairs(new) do
    local capv = redis.call('HGET', KEYS[1], ch.u)
    if not capv then
      return conflict('device_unknown', ch.u, ch.n, 0, 'device not in the node inventory')
    end
    local cn, cm, cc, cmig, chealth, ccord = string.match(capv, '^(-?%d+),(-?%d+),(-?%d+),(%d),(%d),(%d)$')
    cn, cm, cc = tonumber(cn), tonumber(cm), tonumber(cc)
    local d = dev(u, ch.u)
    local wants_mig = #ch.p > 0 or #ch.l > 0
    if chealth ~= '1' then
      return conflict('unhealthy', ch.u, 0, 0, 'device is not healthy')
    end
    if ccord == '1' then
      return conflict('cordoned', ch.u, 0, 0, 'device is cordoned')
    end
    if wants_mig and cmig ~= '1' then
      return conflict('mig_mode', ch.u, 0, 0, 'MIG instance requested on a device not in mig mode')
    end
    if (not wants_mig) and cmig == '1' then
      return conflict('mig_mode', ch.u, 0, 0, 'a device in mig mode is only shared through MIG instances')
    end
    if d.n + ch.n > cn then
      return conflict('slots', ch.u, ch.n, math.max(cn - d.n, 0), 'not enough free task slots')
    end
    if mutex and d.n > 0 then
      return conflict('exclusive', ch.u, 1, 0, 'the mutex policy needs an idle device')
    end
    if not wants_mig then
      -- MIG charges carry profile figures whose core sum may pass 100 (ceil rounding): for them the
      -- placements below are the physical truth, as in HAMi's Fit, which checks the request, not the profile.
      -- The order and the rules are the core's Fit (hami-wire §6.4 steps 10-13); a whole-card holder needs no
      -- rule of its own: it holds every core, so steps 11 and 13 refuse any newcomer.
      if d.m + ch.m > cm then
        return conflict('memory', ch.u, ch.m, math.max(cm - d.m, 0), 'not enough free memory (MiB)')
      end
      if d.c + ch.c > cc then
        return conflict('cores', ch.u, ch.c, math.max(cc - d.c, 0), 'not enough free cores (%)')
      end
      if ch.x ~= 0 and d.n > 0 then
        return conflict('exclusive', ch.u, 1, 0, 'a whole-card request needs an idle device')
      end
      if ch.c == 0 and cc ~= 0 and d.c >= cc and ch.z ~= 1 then
        return conflict('compute_exhausted', ch.u, 0, 0, 'every core is allocated; a 0-core task may not join')
      end
      if ch.s == 1 and d.n > 0 and math.floor(d.m / d.n) ~= math.floor(ch.m / math.max(ch.n, 1)) then
        return conflict('share_size', ch.u, math.floor(ch.m / math.max(ch.n, 1)), math.floor(d.m / d.n),
          'the device is shared only by tasks of one size, and holds tasks of another')
      end
    end
    -- a vendor's sharing rule on the tasks a device in use holds (MetaX sGPU app classes and QoS policies)
    if d.n > 0 then
      for _, t in ipairs(ch.r or {}) do
        if (d.g[t] or 0) > 0 then
          return conflict('sharing', ch.u, 0, d.g[t], 'the device holds tasks tagged ' .. t .. ', which this one may not join')
        end
      end
      if ch.q and #ch.q > 0 then
        local found = false
        for _, t in ipairs(ch.q) do
          if (d.g[t] or 0) > 0 then
            found = true
          end
        end
        if not found then
          return conflict('sharing', ch.u, 1, 0, 'the device holds no task tagged ' .. table.concat(ch.q, ' or '))
        end
      end
    end
    local mine = {}
    for _, p in ipairs(ch.p) do
      local s, z = p[1], p[2]
      if s < 0 or z <= 0 then
        return conflict('mig_placement', ch.u, z, 0, 'invalid placement ' .. fmt(s) .. '+' .. fmt(z))
      end
      for k, cnt in pairs(d.p) do
        if cnt > 0 then
          local os, oz = string.match(k, '^(%d+)|(%d+)$')
          os, oz = tonumber(os), tonumber(oz)
          if s < os + oz and os < s + z then
            return conflict('mig_placement', ch.u, z, 0,
              'placement ' .. fmt(s) .. '+' .. fmt(z) .. ' overlaps occupied ' .. fmt(os) .. '+' .. fmt(oz))
          end
        end
      end
      for _, q in ipairs(mine) do
        if s < q[1] + q[2] and q[1] < s + z then
          return conflict('mig_placement', ch.u, z, 0,
            'placement ' .. fmt(s) .. '+' .. fmt(z) .. ' overlaps ' .. fmt(q[1]) .. '+' .. fmt(q[2]) .. ' of the same pod')
        end
      end
      mine[#mine + 1] = p
    end
    local seen = {}
    for _, l in ipairs(ch.l) do
      local g, sl = fmt(l[1]), fmt(l[2])
      local k = g .. '|' .. sl
      for ok, cnt in pairs(d.l) do
        if cnt > 0 then
          local og = string.match(ok, '^(%d+)|')
          if og ~= g then
            return conflict('legacy_mig', ch.u, 1, 0, 'device is partitioned with geometry ' .. og .. ', not ' .. g)
          end
        end
      end
      for sk in pairs(seen) do
        if string.match(sk, '^(%d+)|') ~= g then
          return conflict('legacy_mig', ch.u, 1, 0, 'one pod uses two geometries on one device')
        end
      end
      if (d.l[k] or 0) > 0 or seen[k] then
        return conflict('legacy_mig', ch.u, 1, 0, 'MIG slot ' .. k .. ' is in use')
      end
      seen[k] = true
    end
  end
end

for _, vch in ipairs(victims) do
  apply(u, vch, 1)
end
apply(u, new, 1)
store_usage(KEYS[2], u)
redis.call('HDEL', KEYS[9], uid)
set_hint()
if hold then
  redis.call('HSET', KEYS[12], 'w|' .. uid, ARGV[12])
end
redis.call('HSET', KEYS[3], uid, state .. '|' .. fmt(now_ms()) .. '|' .. cjs)
redis.call('HSET', KEYS[4], uid, blob)
redis.call('SADD', KEYS[7], node)
redis.call('HSET', KEYS[8], uid, node)
local gen = redis.call('INCR', KEYS[5])
redis.call('XADD', KEYS[6], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage')
return {'ok', gen, 1, 1}
