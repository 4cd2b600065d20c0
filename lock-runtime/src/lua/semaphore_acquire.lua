-- Takes one of a semaphore's permits (semaphore_permits.lua has the layout), served in
-- arrival order across processes: a permit goes to a newcomer only when more are free than
-- waiters queued ahead of it.
--
-- KEYS[1] the semaphore's key (its holders), KEYS[2] wait queue, KEYS[3] queue deadlines,
-- KEYS[4] queue ttls (the mutex's queue keys, all in the key's cluster slot)
-- ARGV[1] token (also the waiter's id in the queue), ARGV[2] lease in milliseconds,
-- ARGV[3] the number of permits, ARGV[4] 1 to join the queue when no permit is free for us
-- now, 0 to try once, ARGV[5] queue lease (ms), as in acquire.lua
--
-- Returns {1, 0} when a permit was taken, {0, wait_ms} when not now (how long the caller
-- may sleep before trying again if no release wakes it), {-1, N} when the key's holders
-- count with N permits, not ARGV[3], and {-2, 0} when the key is not a semaphore's.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return {-2, 0}
end
local token, permits = ARGV[1], tonumber(ARGV[3])
local now_ms, now_us = server_time()
local recorded = recorded_permits(KEYS[1])
local held = purge_holders(KEYS[1], now_ms)
if held > 0 and recorded ~= permits then
  return {-1, recorded or 0}
end

local function take()
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], 0, PERMITS_RECORD .. permits)
  redis.call('ZADD', KEYS[1], now_ms + ttl, token)
  keep_alive(KEYS[1], ttl)
  return {1, 0}
end

-- Ours already: an earlier try of this acquisition took it but its reply was lost.
if redis.call('ZSCORE', KEYS[1], token) then
  forget(KEYS[2], KEYS[3], KEYS[4], token)
  return take()
end

purge(KEYS[2], KEYS[3], KEYS[4], now_ms)
local rank = redis.call('ZRANK', KEYS[2], token)
local ahead = rank or redis.call('ZCARD', KEYS[2])
if held + ahead < permits then
  if rank then
    forget(KEYS[2], KEYS[3], KEYS[4], token)
  end
  return take()
end

-- Not now: until the first lease ends (its holder may have crashed), or, with a permit
-- free but owed to waiters ahead, until the first of their places would lapse.
local wait_ms
if held >= permits then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  wait_ms = math.max(0, (tonumber(first[2]) or now_ms) - now_ms)
else
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  wait_ms = math.max(0, (tonumber(first[2]) or now_ms) - now_ms)
end
if ARGV[4] == '1' then
  join(KEYS[2], KEYS[3], KEYS[4], token, '0', tonumber(ARGV[5]), now_ms, now_us)
end
return {0, wait_ms}
