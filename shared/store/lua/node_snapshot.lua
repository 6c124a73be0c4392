-- One node's inventory, usage counters and generation, read atomically, and how many binds are in flight on it:
-- the pods holding a reservation there not yet confirmed by their annotations (reserved, claimed by a bind, or
-- bound but not yet seen), at least 1 while its bind lock is held.
-- KEYS: 1 inventory, 2 usage, 3 generation, 4 pod charges, 5 node lock
-- Returns {inventory or '', flat usage hash, generation, binds in flight}
local inflight = 0
for _, rec in ipairs(redis.call('HVALS', KEYS[4])) do
  if string.sub(rec, 1, 10) ~= 'confirmed|' then
    inflight = inflight + 1
  end
end
if inflight == 0 then
  inflight = redis.call('EXISTS', KEYS[5])
end
return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2]), num(redis.call('GET', KEYS[3])), inflight}
