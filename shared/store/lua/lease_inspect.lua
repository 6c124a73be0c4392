-- The lease's current value and remaining ttl, atomically.
-- KEYS: 1 lease, 2 epoch   Returns {value or '', ttl ms, epoch}
return {redis.call('GET', KEYS[1]) or '', fmt(redis.call('PTTL', KEYS[1])), num(redis.call('GET', KEYS[2]))}
