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

-- Delete a node's bind lock, bump the node's generation and publish the change marked 'lock' 'released': the one
-- change that wakes the binds waiting for that lock (readers that do not know the field ignore it). Every script
-- that releases a node lock goes through here.
local function release_node_lock(lock_key, generation_key, stream_key, maxlen, node)
  redis.call('DEL', lock_key)
  local gen = redis.call('INCR', generation_key)
  redis.call('XADD', stream_key, 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage', 'lock', 'released')
end
