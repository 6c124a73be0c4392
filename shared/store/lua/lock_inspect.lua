-- A node lock's value and the server time, atomically.   KEYS: 1 lock   Returns {value or '', now_ms}
return {redis.call('GET', KEYS[1]) or '', fmt(now_ms())}
