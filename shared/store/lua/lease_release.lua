-- Give a lease up only if it is still ours (compare-and-delete).
-- KEYS: 1 lease   ARGV: 1 holder, 2 token   Returns 1 if released, 0 if it was not ours
if redis.call('GET', KEYS[1]) == ARGV[2] .. '|' .. ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
