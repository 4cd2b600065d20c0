-- A semaphore's permits (semaphore.rs), shared by its acquire script and by renew.lua,
-- release.lua and leave.lua, which serve a permit's token (`is_permit`) with these:
-- so the watchdog's batched renewals, a guard's release and the shutdown's give-backs take
-- one path for every kind of lease. Prepended after prelude.lua.
--
-- A semaphore's key is a sorted set: each holder's token -> the end of its lease (server
-- time in ms), plus one record '~permits=N' with score 0 that says how many permits the
-- key has, so that every holder counts with the same N. Lease ends are far above 0, so the
-- record sorts first and a purge of ended leases (scores above 0 up to now) never takes
-- it. The key expires with its longest lease and is deleted when its last holder leaves;
-- its waiters use the mutex's queue keys (wait queue, deadlines, ttls) and channel.

local PERMITS_RECORD = '~permits='

-- The permit count recorded with the key, or nil (no holder).
local function recorded_permits(holders)
  local record = redis.call('ZRANGEBYSCORE', holders, 0, 0, 'LIMIT', 0, 1)[1]
  if record then
    return tonumber(string.sub(record, #PERMITS_RECORD + 1))
  end
  return nil
end

-- Drops the holders whose lease ended (crashed or paused past their ttl); a key left with
-- only its record is deleted. Returns how many holders are left.
local function purge_holders(holders, now_ms)
  redis.call('ZREMRANGEBYSCORE', holders, '(0', now_ms)
  local left = redis.call('ZCARD', holders)
  if left == 1 then
    redis.call('DEL', holders)
  end
  return math.max(left - 1, 0)
end

-- Wakes the waiters the free permits are for: the first (permits - held) of the queue, FIFO,
-- each by its token on the key's channel (a waiter woken twice just tries again). Entries
-- of processes that are gone are dropped from among them first, so that a free permit goes
-- to a live waiter behind a dead one.
local function wake_permit_waiters(holders, queue, deadlines, ttls, channel, publish, permits, held, now_ms)
  if not permits or redis.call('EXISTS', queue) == 0 then
    return
  end
  local free = permits - held
  purge(queue, deadlines, ttls, now_ms, math.max(free, 1))
  if free <= 0 then
    return
  end
  for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, free - 1)) do
    redis.call(publish, channel, waiter)
  end
end

-- Gives back the permit `token` holds, if any, and its place in the queue, if any (a
-- release, or a waiter leaving: an earlier try's reply may have been lost with its permit),
-- and wakes the waiters a freed permit is for. Returns 1 when the token held a live
-- permit, 0 when it held none (its lease had ended).
local function give_back_permit(holders, queue, deadlines, ttls, token, channel, publish)
  local now_ms = server_time()
  local permits = recorded_permits(holders)
  local ends = tonumber(redis.call('ZSCORE', holders, token))
  forget(queue, deadlines, ttls, token)
  redis.call('ZREM', holders, token)
  local held = purge_holders(holders, now_ms)
  wake_permit_waiters(holders, queue, deadlines, ttls, channel, publish, permits, held, now_ms)
  if ends and ends > now_ms then
    return 1
  end
  return 0
end

-- Extends the lease of the permit `token` holds to `ttl_ms` from now: 1, or 0 when it
-- holds none (its lease ended, or the key was deleted).
local function renew_permit(holders, token, ttl_ms, grow_only)
  local now_ms = server_time()
  local ends = tonumber(redis.call('ZSCORE', holders, token))
  if not ends or ends <= now_ms then
    return 0
  end
  if not grow_only or ends < now_ms + ttl_ms then
    redis.call('ZADD', holders, 'XX', now_ms + ttl_ms, token)
  end
  keep_alive(holders, ttl_ms)
  return 1
end

-- Whether `token` is a semaphore permit's (semaphore.rs starts each with 'permit:'; a lock's
-- token is bare hex): the scripts shared with locks turn to the permits by the token, not by
-- the key's type, as a semaphore's key is absent while nobody holds a permit (and a waiter
-- leaving then must not take the mutex's path, which would write a hand-over there).
local PERMIT_TOKEN = 'permit:'
local function is_permit(token)
  return string.sub(token, 1, #PERMIT_TOKEN) == PERMIT_TOKEN
end
