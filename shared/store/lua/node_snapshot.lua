-- One node's inventory, usage counters and generation, read atomically, and whether a bind is in flight on it:
-- its bind lock is held, or a pod holds a reservation there not yet confirmed by the pod's annotations.
-- KEYS: 1 inventory, 2 usage, 3 generation, 4 pod charges, 5 node lock
-- Returns {inventory or '', flat usage hash, generation, busy 0/1}
local busy = redis.call('EXISTS', KEYS[5])
if busy == 0 then
  for _, rec in ipairs(redis.call('HVALS', KEYS[4])) do
    if string.sub(rec, 1, 10) ~= 'confirmed|' then
      busy = 1
      break
    end
  end
end
return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2]), num(redis.call('GET', KEYS[3])), busy}
