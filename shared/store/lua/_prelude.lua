-- Helpers prepended to every script. Lua 5.1 as in Redis 7 and fakeredis: locals only (no globals),
-- only the cjson library (fakeredis has no cmsgpack/struct/bit), integers formatted with %d.
-- Fencing convention: ARGV[1] is the fencing token ('' = not fenced); when set, the lease key is KEYS[#KEYS].

local function fmt(n)
  return string.format('%d', n)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A fencing counter that does not go back across a FLUSHALL: a missing counter is seeded from the server
-- clock in microseconds. Every acquisition costs at least one round trip (well over a microsecond), so the
-- seed after a flush exceeds every token handed out before it, unless the server clock stepped back.
local function fencing_incr(key)
  if redis.call('EXISTS', key) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', key, fmt(tonumber(t[1]) * 1000000 + tonumber(t[2])))
  end
  return redis.call('INCR', key)
end

local function fence_ok()
  local token = ARGV[1]
  if token == nil or token == '' then
    return true
  end
  local v = redis.call('GET', KEYS[#KEYS])
  if not v then
    return false
  end
  return string.match(v, '^(%d+)|') == token
end

local function num(v)
  if not v then
    return 0
  end
  return tonumber(v)
end

local function parse_record(rec)
  -- '<state>|<reserved_at_ms>|<charges json>'
  return string.match(rec, '^(%a+)|(%d+)|(.*)$')
end

-- How many binds are in flight on a node: the pods holding a reservation there not yet confirmed by their
-- annotations (reserved, claimed by a bind, or bound but not yet seen), at least 1 while its bind lock is held.
-- The one definition: node_snapshot.lua reads it, and the changes that move only this count publish it.
local function binds_in_flight(charges_key, lock_key)
  local inflight = 0
  for _, rec in ipairs(redis.call('HVALS', charges_key)) do
    if string.sub(rec, 1, 10) ~= 'confirmed|' then
      inflight = inflight + 1
    end
  end
  if inflight == 0 then
    inflight = redis.call('EXISTS', lock_key)
  end
  return inflight
end

-- Bump a node's generation and publish a change that moved only its binds in flight (a lock taken or released, a
-- reservation confirmed): its inventory and usage are as at the generation before. The entry carries the new
-- count ('inflight'), so a reader holding that generation applies it without reading the node again (readers that
-- do not know the field read the node). ... are further field-value pairs ('lock', 'released').
local function publish_inflight(generation_key, stream_key, maxlen, node, inflight, ...)
  local gen = redis.call('INCR', generation_key)
  redis.call('XADD', stream_key, 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage',
    'inflight', fmt(inflight), ...)
  return gen
end

-- Delete a node's bind lock, bump the node's generation and publish the change marked 'lock' 'released': the one
-- change that wakes the binds waiting for that lock (readers that do not know the field ignore it). Every script
-- that releases a node lock goes through here.
local function release_node_lock(lock_key, generation_key, stream_key, maxlen, node, charges_key)
  redis.call('DEL', lock_key)
  publish_inflight(generation_key, stream_key, maxlen, node, binds_in_flight(charges_key, lock_key), 'lock', 'released')
end
