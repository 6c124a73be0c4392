-- Quota helpers (prepended to the quota scripts). NVIDIA's figures keep their own fields ('um', 'uc', 'lm', 'lc')
-- and the head 'mem,cores' of a pod's charge; every other vendor's are 'word=mem,cores' parts joined by ';',
-- sorted by word: in a pod's charge after the head, in the quota hash's 'uv' (usage) and 'lv' (limits, where
-- an empty figure means no limit).

-- 'W=m,c;W2=m,c' (or a charge's tail ';W=m,c…') → {W = {m, c}} (nil for an empty figure)
local function quota_parts(s)
  local out = {}
  if s then
    for w, m, c in string.gmatch(s, '([^;=]+)=(%-?%d*),(%-?%d*)') do
      out[w] = {tonumber(m), tonumber(c)}
    end
  end
  return out
end

-- {W = {m, c}} → 'W=m,c;…' sorted by word, parts whose figures are both 0 left out
local function quota_join(t)
  local words = {}
  for w, v in pairs(t) do
    if v[1] ~= 0 or v[2] ~= 0 then
      words[#words + 1] = w
    end
  end
  table.sort(words)
  local parts = {}
  for _, w in ipairs(words) do
    parts[#parts + 1] = w .. '=' .. fmt(t[w][1]) .. ',' .. fmt(t[w][2])
  end
  return table.concat(parts, ';')
end

-- a pod's charge 'm,c[;W=m,c…]' → m, c, {W = {m, c}}
local function quota_charge_parse(v)
  local m, c, rest = string.match(v, '^(-?%d+),(-?%d+)(.*)$')
  return tonumber(m), tonumber(c), quota_parts(rest)
end

-- add sign × every part of b into a
local function quota_add(a, b, sign)
  for w, v in pairs(b) do
    local cur = a[w] or {0, 0}
    a[w] = {cur[1] + sign * v[1], cur[2] + sign * v[2]}
  end
end

local function quota_store_others(key, t)
  local s = quota_join(t)
  if s == '' then
    redis.call('HDEL', key, 'uv')
  else
    redis.call('HSET', key, 'uv', s)
  end
end
