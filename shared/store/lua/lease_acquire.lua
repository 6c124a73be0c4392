-- Take a lease if free (SET NX PX + INCR epoch = fencing token); re-entrant for the same holder.
-- KEYS: 1 lease, 2 epoch   ARGV: 1 holder, 2 ttl ms
-- Returns {'acquired', token, ttl ms} | {'held', holder, token, ttl ms left}
local v = redis.call('GET', KEYS[1])
if v then
  local tok, holder = string.match(v, '^(%d+)|(.*)$')
  if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {'acquired', tok, ARGV[2]}
  end
  return {'held', holder, tok, fmt(redis.call('PTTL', KEYS[1]))}
end
local tok = fmt(fencing_incr(KEYS[2]))
redis.call('SET', KEYS[1], tok .. '|' .. ARGV[1], 'PX', ARGV[2])
return {'acquired', tok, ARGV[2]}
