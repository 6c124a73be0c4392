-- One node's inventory, usage counters and generation, read atomically, and how many binds are in flight on it
-- (binds_in_flight in the prelude).
-- KEYS: 1 inventory, 2 usage, 3 generation, 4 pod charges, 5 node lock
-- Returns {inventory or '', flat usage hash, generation, binds in flight}
return {
  redis.call('GET', KEYS[1]) or '',
  redis.call('HGETALL', KEYS[2]),
  num(redis.call('GET', KEYS[3])),
  binds_in_flight(KEYS[4], KEYS[5]),
}
