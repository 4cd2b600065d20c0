-- Shared by the queue scripts (prepended to each of them): the server's clock and the
-- book-keeping of the wait queue. KEYS of the queue are passed in, as each script numbers
-- them its own way.

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

-- Keeps the queue's keys for at least `ms`: they vanish by themselves once every waiter
-- in them has stopped keeping its place.
local function keep_queue(queue, deadlines, ttls, ms)
  for _, key in ipairs({queue, deadlines, ttls}) do
    if redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

