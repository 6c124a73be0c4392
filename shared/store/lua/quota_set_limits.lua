-- Replace a namespace's quota limits (absent = no limit; 0 blocks every positive charge).
-- KEYS: 1 quota, 2 namespaces set, [3 lease]   ARGV: 1 fence token, 2 namespace, 3 envelope, 4 mem ('' = none), 5 cores
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
redis.call('SADD', KEYS[2], ARGV[2])
return {'ok'}
