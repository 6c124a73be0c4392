-- Replace a namespace's quota limits (absent = no limit; 0 blocks every positive charge).
-- KEYS: 1 quota, 2 namespaces set, [3 lease]   ARGV: 1 fence token, 2 namespace, 3 envelope, 4 NVIDIA mem ('' = none),
--       5 NVIDIA cores, 6 every other vendor's limits 'W=mem MiB,cores;…' ('' = none; an empty figure = no limit)
-- Returns {'fenced'} | {'ok'}
if not fence_ok() then
  return {'fenced'}
end
redis.call('HSET', KEYS[1], 'env', ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'lm')
else
  redis.call('HSET', KEYS[1], 'lm', ARGV[4])
end
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[1], 'lc')
else
  redis.call('HSET', KEYS[1], 'lc', ARGV[5])
end
if ARGV[6] == nil or ARGV[6] == '' then
  redis.call('HDEL', KEYS[1], 'lv')
else
  redis.call('HSET', KEYS[1], 'lv', ARGV[6])
end
redis.call('SADD', KEYS[2], ARGV[2])
return {'ok'}
