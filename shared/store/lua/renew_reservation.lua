-- Renew a plain reservation's time (a re-filter kept the pod's node): the informer's expiry of unconfirmed
-- reservations counts from the last decision that answered it, so a reservation just answered again is never
-- collected before its bind (docs/gangs.md). Records a bind claimed, bound or the informer confirmed are left.
-- KEYS: 1 pod charges
-- ARGV: 1 fence token (unused: ''), 2 pod uid
-- Returns 1 when renewed, 0 otherwise
local rec = redis.call('HGET', KEYS[1], ARGV[2])
if not rec then
  return 0
end
local state, _, cjs = parse_record(rec)
if state ~= 'reserved' then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[2], 'reserved|' .. string.format('%d', now_ms()) .. '|' .. cjs)
return 1
