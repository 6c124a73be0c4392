-- The store epoch: created on first use, gone when Redis is flushed (which is how readers notice).
-- KEYS: 1 meta   ARGV: 1 candidate epoch   Returns the current epoch
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[1])
return redis.call('HGET', KEYS[1], 'epoch')
