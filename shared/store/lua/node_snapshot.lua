-- One node's inventory, usage counters and generation, read atomically.
-- KEYS: 1 inventory, 2 usage, 3 generation.   Returns {inventory or '', flat usage hash, generation}
return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2]), num(redis.call('GET', KEYS[3]))}
