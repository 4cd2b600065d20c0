-- Shared by the scripts (prepended to each of them but renew.lua): the server's clock, the
-- fence counter and the book-keeping of the wait queue. Keys are passed in, as each script
-- numbers them its own way.

-- The server's time in milliseconds and in microseconds.
local function server_time()
  local now = redis.call('TIME')
  local seconds, micros = tonumber(now[1]), tonumber(now[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- Takes one waiter out of the queue: its place, its deadline, its ttl.
local function forget(queue, deadlines, ttls, waiter)
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', deadlines, waiter)
  redis.call('HDEL', ttls, waiter)
end

-- Waiters whose process stopped keeping their place (crashed, paused, gone) lose it.
local function purge(queue, deadlines, ttls, now_ms)
  local expired = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, 100)
  for _, waiter in ipairs(expired) do
    forget(queue, deadlines, ttls, waiter)
  end
end

-- How long a key is contended before the first foreign window (release.lua), and the longest
-- time between two windows: each window no foreign client used makes the next four times
-- later, up to this (acquire.lua closes a window).
local FIRST_WINDOW_MS = 1000
local MAX_WINDOW_EVERY_MS = 16000

-- Keeps one key for at least `ms`.
local function keep_alive(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Keeps the queue's keys for at least `ms`: they vanish by themselves once every waiter
-- in them has stopped keeping its place.
local function keep_queue(queue, deadlines, ttls, ms)
  for _, key in ipairs({queue, deadlines, ttls}) do
    keep_alive(key, ms)
  end
end


-- Puts a waiter (a process: one entry per key) at the tail of the queue, or refreshes its
-- place: a queue lease of `lease` ms from now, and its ttl (ms, or '0' for none) for a
-- direct grant by a release. A waiter already queued keeps its place in the order.
local function join(queue, deadlines, ttls, waiter, ttl, lease, now_ms, now_us)
  redis.call('ZADD', queue, 'NX', now_us, waiter)
  redis.call('ZADD', deadlines, now_ms + lease, waiter)
  if ttl ~= '0' then
    redis.call('HSET', ttls, waiter, ttl)
  end
  keep_queue(queue, deadlines, ttls, lease)
end

-- The next fence of a lock (the key just granted): strictly above every earlier fence for
-- this key, also after a restart that lost the counter, as it is seeded from the server
-- clock in microseconds. The counter lives `lifetime` ms after its last use.
local function next_fence(counter, lifetime)
  local _, now_us = server_time()
  local last = tonumber(redis.call('GET', counter) or '0') or 0
  local fence = math.max(last + 1, now_us)
  redis.call('SET', counter, string.format('%.0f', fence), 'PX', lifetime)
  return fence
end
