-- Takes one of a semaphore's permits (semaphore_permits.lua has the layout), served in
-- arrival order across processes: a permit goes to a newcomer only when more are free than
-- waiters queued ahead of it.
--
-- KEYS[1] the semaphore's key (its holders), KEYS[2] wait queue, KEYS[3] queue deadlines,
-- KEYS[4] queue ttls (the mutex's queue keys, all in the key's cluster slot)
-- ARGV[1] token (also the waiter's id in the queue), ARGV[2] lease in milliseconds,
-- ARGV[3] the number of permits, ARGV[4] 1 to join the queue when no permit is free for us
-- now, 0 to try once, ARGV[5] queue lease (ms), as in acquire.lua, ARGV[6], ARGV[7] the
-- key's release channel and PUBLISH or SPUBLISH, ARGV[8] (optional) the caller's process's
-- liveness key: the caller's entry is then a kept one (prelude.lua; undeclared, as in
-- acquire.lua)
--
-- Returns {1, 0, 0} when a permit was taken, {0, wait_ms, heads} when not now (how long the
-- caller may sleep before trying again if no release wakes it, and 1 when its entry heads the
-- queue), {-1, N, 0} when the key's holders count with N permits, not ARGV[3], and {-2, 0, 0}
-- when the key is not a semaphore's.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  return {-2, 0, 0}
end
local token, permits = ARGV[1], tonumber(ARGV[3])
local now_ms, now_us = server_time()
local recorded = recorded_permits(KEYS[1])
local held = purge_holders(KEYS[1], now_ms)
if held > 0 and recorded ~= permits then
  return {-1, recorded or 0, 0}
end

local function take()
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[1], 0, PERMITS_RECORD .. permits)
  redis.call('ZADD', KEYS[1], now_ms + ttl, token)
  keep_alive(KEYS[1], ttl)
  return {1, 0, 0}
end

-- Ours already: an earlier try of this acquisition took it but its reply was lost.
if redis.call('ZSCORE', KEYS[1], token) then
  forget(KEYS[2], KEYS[3], KEYS[4], token)
  return take()
end

-- The free permits are owed to the first (permits - held) of the queue: the entries of
-- processes that are gone are dropped from among them.
purge(KEYS[2], KEYS[3], KEYS[4], now_ms, math.max(permits - held, 1))
local rank = redis.call('ZRANK', KEYS[2], token)
local ahead = rank or redis.call('ZCARD', KEYS[2])
if held + ahead < permits then
  if rank then
    forget(KEYS[2], KEYS[3], KEYS[4], token)
  end
  return take()
end

-- How long until one of the waiters the free permits are owed to (all ahead of the caller)
-- takes its permit or loses its place: the first of their deadlines. A kept entry's is far
-- (its process's liveness keeps it), so as for a lock's head (acquire.lua) its waiter is
-- woken, which takes the permit at once, and an entry that does not within a queue lease
-- loses its place (one nobody waits on any more, or whose waiter's grant lapsed).
local function owed_wait_ms(free)
  local lease = tonumber(ARGV[5])
  local first_ms
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[2], 0, math.min(free, PURGE_LOOKS) - 1)) do
    if alive_key(KEYS[4], waiter) then
      redis.call('ZADD', KEYS[3], 'XX', 'LT', now_ms + lease, waiter)
      redis.call(ARGV[7], ARGV[6], waiter)
    end
    local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], waiter)) or now_ms
    first_ms = math.min(first_ms or until_ms, until_ms)
  end
  return math.max(0, (first_ms or now_ms) - now_ms)
end

-- Not now: until the first lease ends (its holder may have crashed), or, with a permit
-- free but owed to waiters ahead, until one of them takes it or loses its place.
local wait_ms
if held >= permits then
  local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  wait_ms = math.max(0, (tonumber(first[2]) or now_ms) - now_ms)
else
  wait_ms = owed_wait_ms(permits - held)
end
if ARGV[4] == '1' then
  local alive = ARGV[8]
  if alive == '' then
    alive = nil
  end
  join(KEYS[2], KEYS[3], KEYS[4], token, '0', tonumber(ARGV[5]), now_ms, now_us, alive)
end
-- Whether the caller heads the queue: the next permit that frees is its, whatever happens to
-- the waiters behind it, so it may park until a release wakes it.
local heads = redis.call('ZRANGE', KEYS[2], 0, 0)[1] == token
return {0, wait_ms, heads and 1 or 0}
