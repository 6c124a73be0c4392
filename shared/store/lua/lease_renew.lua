-- Extend a lease only if it is still ours (compare-and-extend).
-- KEYS: 1 lease   ARGV: 1 holder, 2 token, 3 ttl ms   Returns 1 if extended, 0 if lost
if redis.call('GET', KEYS[1]) == ARGV[2] .. '|' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
