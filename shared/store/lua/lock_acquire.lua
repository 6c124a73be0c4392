-- Take a node's bind lock for an owner ('<ns>/<name>'). The logical expiry lives in the value (server clock):
-- an expired lock is reported, never silently handed on (difference 5). Re-entrant per owner.
-- Value: '<token>|<expires_ms>|<acquired_ms>|<owner>'.
-- A fresh acquisition bumps the node's generation and publishes a change (kind 'usage', which readers of earlier
-- releases know) with the node's binds in flight, so every extender replica's snapshot learns that the node has a
-- bind in flight (filters prefer nodes without one) without reading the node again. The entry is marked 'lock'
-- 'taken': with the release's 'lock' 'released', every replica times the node's lock cycles (the bind limit).
-- KEYS: 1 lock, 2 epoch, 3 generation, 4 change stream, 5 pod charges
-- ARGV: 1 owner, 2 ttl ms, 3 hard ttl ms (0 = key never expires by itself), 4 stream maxlen, 5 node
-- Returns {'acquired', token, expires_ms, acquired_ms, reentered 0/1, now_ms}
--       | {'held', token, expires_ms, acquired_ms, owner, now_ms}
local now = now_ms()
local v = redis.call('GET', KEYS[1])
if v then
  local tok, exp, acq, owner = string.match(v, '^(%d+)|(%d+)|(%d+)|(.*)$')
  if owner == ARGV[1] then
    return {'acquired', tok, exp, acq, '1', fmt(now)}
  end
  return {'held', tok, exp, acq, owner, fmt(now)}
end
local tok = fmt(fencing_incr(KEYS[2]))
local exp = fmt(now + tonumber(ARGV[2]))
local value = tok .. '|' .. exp .. '|' .. fmt(now) .. '|' .. ARGV[1]
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], value, 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], value)
end
publish_inflight(KEYS[3], KEYS[4], ARGV[4], ARGV[5], binds_in_flight(KEYS[5], KEYS[1]), 'lock', 'taken')
return {'acquired', tok, exp, fmt(now), '0', fmt(now)}
