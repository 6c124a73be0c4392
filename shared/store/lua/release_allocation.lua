-- Release one pod's charges on one node. No-op if the pod holds nothing there.
-- KEYS: 1 usage, 2 pod charges, 3 allocations, 4 generation, 5 change stream, 6 allocation-nodes set,
--       7 pod index, 8 bind claims, 9 bind hints, [10 lease]
-- ARGV: 1 fence token, 2 pod uid, 3 node, 4 stream maxlen, 5 condition:
--       ''               unconditional (the pod ended, the API says otherwise);
--       'reserved'       only a plain reservation (a re-filter): never a record a bind claimed, bound or the
--                        informer confirmed;
--       'unclaimed'      only while no bind holds a live claim on it (the informer's expiry of unconfirmed records);
--       'claim:<token>'  only while the bind holding <token> owns it (that bind's undo).
-- Returns {'fenced'} | {'absent'} | {'owned', state} (the condition refused; nothing written)
--       | {'ok', generation, released record, allocation envelope}
if not fence_ok() then
  return {'fenced'}
end
local uid, node, maxlen, cond = ARGV[2], ARGV[3], ARGV[4], ARGV[5] or ''
local rec = redis.call('HGET', KEYS[2], uid)
if not rec then
  if redis.call('HGET', KEYS[7], uid) == node then
    redis.call('HDEL', KEYS[7], uid)
  end
  redis.call('HDEL', KEYS[8], uid)
  redis.call('HDEL', KEYS[9], uid, 'w|' .. uid)
  return {'absent'}
end
local state, _, cjs = parse_record(rec)
if cond ~= '' then
  local claim = redis.call('HGET', KEYS[8], uid)
  local ctok, cexp
  if claim then
    ctok, cexp = string.match(claim, '^([^|]*)|(%d+)$')
  end
  if cond == 'reserved' then
    if state ~= 'reserved' or claim then
      return {'owned', state}
    end
  elseif cond == 'unclaimed' then
    if claim and tonumber(cexp) > now_ms() then
      return {'owned', state}
    end
  elseif string.sub(cond, 1, 6) == 'claim:' then
    if ctok ~= string.sub(cond, 7) then
      return {'owned', state}
    end
  else
    return redis.error_reply('unknown release condition ' .. cond)
  end
end
local blob = redis.call('HGET', KEYS[3], uid) or ''
local u = load_usage(KEYS[1])
apply(u, cjson.decode(cjs), -1)
store_usage(KEYS[1], u)
redis.call('HDEL', KEYS[2], uid)
redis.call('HDEL', KEYS[3], uid)
redis.call('HDEL', KEYS[8], uid)
redis.call('HDEL', KEYS[9], uid, 'w|' .. uid)
if redis.call('HGET', KEYS[7], uid) == node then
  redis.call('HDEL', KEYS[7], uid)
end
if redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('SREM', KEYS[6], node)
end
local gen = redis.call('INCR', KEYS[4])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', maxlen, '*', 'node', node, 'gen', gen, 'kind', 'usage')
return {'ok', gen, rec, blob}
