-- The lease's current value and remaining ttl, atomically.
-- KEYS: 1 lease   Returns {value or '', ttl ms}
return {redis.call('GET', KEYS[1]) or '', fmt(redis.call('PTTL', KEYS[1]))}
