-- Record that a full load of <marker> completed in store epoch <epoch>; refused if the store was flushed since.
-- KEYS: 1 meta, [2 lease]   ARGV: 1 fence token, 2 marker, 3 epoch
-- Returns {'fenced'} | {'ok', 1 if marked / 0 if the epoch changed}
if not fence_ok() then
  return {'fenced'}
end
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[3] then
  return {'ok', 0}
end
redis.call('HSET', KEYS[1], 'synced:' .. ARGV[2], ARGV[3])
return {'ok', 1}
