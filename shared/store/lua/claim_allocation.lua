-- A bind's ownership of one pod's record on one node (the reservation state machine:
-- reserved -> binding (claimed by one bind's token) -> bound (that bind created the Binding) -> confirmed
-- (the informer saw the annotations)). Usage is never changed here.
-- KEYS: 1 pod charges, 2 allocations, 3 bind claims, 4 pod index, 5 bind hints
-- ARGV: 1 fence token (always ''), 2 op, 3 pod uid, 4 node, 5 claim token, 6 ttl ms,
--       7 (claim) 'reserved': only a plain reservation, else {'owned', state} and nothing written
-- op 'claim':  take the record for <token>. A live claim of another token refuses; an expired one is taken over.
--   Returns {'absent'} | {'elsewhere', node} | {'busy', remaining ms} | {'owned', state} (ARGV[7] only)
--         | {'ok', state before, allocation envelope, 1 if an expired claim was taken over else 0, bind hint or ''}
-- op 'check':  is the record still <token>'s? Extends the claim by ttl.  Returns {'ok'} | {'lost'}
-- op 'finish': the Binding exists: drop the claim (and the hint), binding -> bound.   Returns {'ok'} | {'lost'}
local op, uid, node, token, ttl = ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local rec = redis.call('HGET', KEYS[1], uid)
local claim = redis.call('HGET', KEYS[3], uid)
local ctok, cexp
if claim then
  ctok, cexp = string.match(claim, '^([^|]*)|(%d+)$')
  cexp = tonumber(cexp)
end
local now = now_ms()
if op == 'claim' then
  if not rec then
    local indexed = redis.call('HGET', KEYS[4], uid)
    if indexed and indexed ~= node then
      return {'elsewhere', indexed}
    end
    return {'absent'}
  end
  if claim and ctok ~= token and cexp > now then
    return {'busy', fmt(cexp - now)}
  end
  local state, t, cjs = parse_record(rec)
  if ARGV[7] == 'reserved' and state ~= 'reserved' then
    return {'owned', state}
  end
  redis.call('HSET', KEYS[3], uid, token .. '|' .. fmt(now + ttl))
  if state == 'reserved' then
    redis.call('HSET', KEYS[1], uid, 'binding|' .. t .. '|' .. cjs)
  end
  local took = 0
  if claim and ctok ~= token then
    took = 1
  end
  return {'ok', state, redis.call('HGET', KEYS[2], uid) or '', took, redis.call('HGET', KEYS[5], uid) or ''}
end
if not rec or not claim or ctok ~= token then
  return {'lost'}
end
if op == 'check' then
  redis.call('HSET', KEYS[3], uid, token .. '|' .. fmt(now + ttl))
  return {'ok'}
end
if op == 'finish' then
  local state, t, cjs = parse_record(rec)
  redis.call('HDEL', KEYS[3], uid)
  redis.call('HDEL', KEYS[5], uid)
  if state == 'binding' then
    redis.call('HSET', KEYS[1], uid, 'bound|' .. t .. '|' .. cjs)
  end
  return {'ok'}
end
return redis.error_reply('unknown claim op ' .. op)
