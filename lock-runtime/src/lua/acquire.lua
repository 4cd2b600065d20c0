-- Acquire a lock: a plain string key holding a random token with a PX expiry
-- (the layout of redis-py's Lock, bsm/redislock and single-node redsync).
-- KEYS[1] lock key
-- KEYS[2] optional fence counter (same cluster slot as KEYS[1])
-- ARGV[1] token, ARGV[2] lease in milliseconds, ARGV[3] fence counter lifetime in milliseconds
-- Returns {1, fence} when acquired (fence 0 without a counter key), otherwise {0, pttl}:
-- the holder's remaining lease in milliseconds (0 when it set no expiry).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if #KEYS < 2 then
    return {1, 0}
  end
  -- Strictly above every earlier fence for this key, also after a restart that lost the
  -- counter: seeded from the server clock in microseconds.
  local now = redis.call('TIME')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local fence = math.max(last + 1, now_us)
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
  return {1, fence}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  pttl = 0
end
return {0, pttl}
