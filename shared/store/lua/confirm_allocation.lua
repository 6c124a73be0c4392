-- Mark a pod's reservation confirmed (its annotations were observed). Usage is unchanged.
-- KEYS: 1 pod charges, [2 lease]   ARGV: 1 fence token, 2 pod uid
-- Returns {'fenced'} | {'absent'} | {'ok', changed 0/1}
if not fence_ok() then
  return {'fenced'}
end
local rec = redis.call('HGET', KEYS[1], ARGV[2])
if not rec then
  return {'absent'}
end
local state, t, cjs = parse_record(rec)
if state == 'confirmed' then
  return {'ok', 0}
end
redis.call('HSET', KEYS[1], ARGV[2], 'confirmed|' .. t .. '|' .. cjs)
return {'ok', 1}
