-- Shared by the queue's scripts (scripts.rs puts it before each of them; the release's
-- uncontended lines come before it): the server's clock, the fence counter and the
-- book-keeping of the wait queue. Keys are passed in, as each script numbers them its own way.

-- The server's time in milliseconds and in microseconds.
local function server_time()
  local now = redis.call('TIME')
  local seconds, micros = tonumber(now[1]), tonumber(now[2])
  return seconds * 1000 + math.floor(micros / 1000), seconds * 1000000 + micros
end

-- A queue holds two kinds of entries. A kept entry (the kind clients that count their
-- requests per process write; in cluster mode the key is the one on this master) names its process's liveness key in the
-- ttls hash ('~alive/' .. waiter): the entry lives while that key does, and its process
-- refreshes that one key for all its places with one request per period. An entry without
-- that field (a cluster client before it read the slot map, and older clients) lives until its deadline, which its process
-- renews per key (keepalive.lua). A kept entry's deadline is ENTRY_BOUND_MS away: the bound
-- under which older clients' scripts, which know only deadlines, keep it; its process's
-- waiter tries again (and so renews it) well within that (LONG_PARK, redis_queue.rs).
local ENTRY_BOUND_MS = 3600000

-- How long a hand-over to a kept entry holds the key for it: its process's liveness, not
-- its deadline, says whether it still comes (a waiter's park behind it ends when its
-- process's liveness key vanishes).
local KEPT_HANDOVER_MS = 1000

-- The liveness key of a waiter's process (a kept entry), or false.
local function alive_key(ttls, waiter)
  return redis.call('HGET', ttls, '~alive/' .. waiter)
end

-- Whether a reply of `redis.pcall` is an error.
local function failed(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- Whether a process's liveness key exists: true or false, or nil when this node cannot read
-- it (cluster mode: the key's slot is served by another master, after a reshard or when
-- the process's slot map was stale). Liveness keys are never declared: in cluster mode
-- they live in another slot of the same master, which a script without flags may read.
local function alive_exists(alive)
  local found = redis.pcall('EXISTS', alive)
  if type(found) ~= 'number' then
    return nil
  end
  return found == 1
end

-- Takes one waiter out of the queue: its place, its deadline, its ttl, its process. The
-- last one out takes the holder's note (and the head's last sighting, acquire.lua) with it,
-- and lets the ttls hash (kept as long as kept entries, ENTRY_BOUND_MS) end as it did when
-- every entry had a one-second lease: a second from now, or after the foreign-window period
-- it keeps (release.lua).
local function forget(queue, deadlines, ttls, waiter)
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', deadlines, waiter)
  redis.call('HDEL', ttls, waiter, '~alive/' .. waiter)
  if redis.call('EXISTS', queue) == 0 then
    redis.call('HDEL', ttls, '~holder', '~seen')
    local keep = (tonumber(redis.call('HGET', ttls, '~gap-every')) or 0) + 1000
    if redis.call('PTTL', ttls) > keep then
      redis.call('PEXPIRE', ttls, keep)
    end
  end
end

-- How many entries one purge looks at, at most (the ones past its deadline not counted):
-- a purge that stops there leaves the rest to the next call.
local PURGE_LOOKS = 100

-- Waiters whose process stopped keeping their place (crashed, paused, gone) lose it: an
-- entry past its deadline, and a kept entry among the first `width` of the queue whose
-- process's liveness key is gone (the ones behind are looked at when they come that far).
-- A lock passes 1 (only the head's turn can come); a semaphore the number of free permits,
-- which are owed to that many entries. A kept entry whose liveness key this node cannot
-- read stays: if its process is gone, the grant a release gives it lapses unconfirmed, and
-- the next try lowers its deadline (acquire.lua, semaphore_acquire.lua).
local function purge(queue, deadlines, ttls, now_ms, width)
  local expired = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, 100)
  for _, waiter in ipairs(expired) do
    forget(queue, deadlines, ttls, waiter)
  end
  -- `kept`: the entries found alive so far, which stay ahead of the ones still to look at.
  local looks, kept = 0, 0
  while kept < width and looks < PURGE_LOOKS do
    local last = math.min(width, kept + PURGE_LOOKS - looks) - 1
    local batch = redis.call('ZRANGE', queue, kept, last)
    if #batch == 0 then
      return
    end
    for _, waiter in ipairs(batch) do
      looks = looks + 1
      local alive = alive_key(ttls, waiter)
      if alive and alive_exists(alive) == false then
        forget(queue, deadlines, ttls, waiter)
      else
        kept = kept + 1
      end
    end
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
-- direct grant by a release. A waiter already queued keeps its place in the order. With
-- `alive` (its process's liveness key) the entry is a kept one: it lives while that key
-- does (created here for `lease` ms if missing, refreshed by its process afterwards).
local function join(queue, deadlines, ttls, waiter, ttl, lease, now_ms, now_us, alive)
  redis.call('ZADD', queue, 'NX', now_us, waiter)
  if ttl ~= '0' then
    redis.call('HSET', ttls, waiter, ttl)
  end
  if alive then
    -- A key this node cannot read (cluster mode) is named all the same: see purge.
    redis.pcall('SET', alive, '1', 'PX', lease, 'NX')
    redis.call('ZADD', deadlines, now_ms + ENTRY_BOUND_MS, waiter)
    redis.call('HSET', ttls, '~alive/' .. waiter, alive)
    keep_queue(queue, deadlines, ttls, ENTRY_BOUND_MS)
  else
    redis.call('ZADD', deadlines, now_ms + lease, waiter)
    keep_queue(queue, deadlines, ttls, lease)
  end
end

-- Every token this crate makes starts with OUR_TOKEN (lease.rs): a holder of ours that
-- notes nothing (a task alone on its key takes it with a plain SET NX) gives the key back
-- through release.lua, which grants it to the queue's head and wakes it. Such a holder is
-- waited out as any noted one, never taken for a client that does not queue.
local OUR_TOKEN = 'lr-'
local function is_ours(token)
  return string.sub(token, 1, #OUR_TOKEN) == OUR_TOKEN
end

-- Notes who holds the lock key, for the waiters: `holder`'s process has the liveness key
-- `alive`, so a waiter may park until a release wakes it or that key vanishes, instead of
-- asking again and again. Kept in the ttls hash (at least `ms` more), read by
-- `watched_holder` only while the lock key holds that same token.
local function note_holder(ttls, holder, alive, ms)
  redis.call('HSET', ttls, '~holder', holder .. ' ' .. alive)
  keep_alive(ttls, ms)
end

-- The liveness key of the process that holds the lock key with `holder`, if one was noted
-- and still exists; false otherwise (a foreign holder, or one not noted yet).
local function watched_holder(ttls, holder)
  local noted = redis.call('HGET', ttls, '~holder')
  if not noted then
    return false
  end
  local space = string.find(noted, ' ', 1, true)
  if not space or string.sub(noted, 1, space - 1) ~= holder then
    return false
  end
  local alive = string.sub(noted, space + 1)
  if alive_exists(alive) then
    return alive
  end
  return false
end

-- How long a hand-over holds the key for `head` (deadline `until_ms`): its deadline, or
-- for a kept entry KEPT_HANDOVER_MS.
local function handover_ms(ttls, head, until_ms, now_ms)
  if alive_key(ttls, head) then
    return KEPT_HANDOVER_MS
  end
  return math.max(1, until_ms - now_ms)
end

-- Gives the lock `lock` to the head waiter `head` of its queue, as a release (and an
-- operator's forced release) does: a head that left its ttl is granted the lock outright,
-- the key holding its token for the confirmation window `window_ms` (the grantee extends
-- it to its ttl; one whose process died holds it no longer), and the message is
-- '=' .. head .. ' ' .. lock; a fenced head is handed the key over ('~handover' until its
-- queue deadline, or a kept place's short bound) and the message is its token. Then the
-- waiter next in line, which may be parked watching the holder just gone, gets
-- '=' .. its token (no key: look again later). Returns 1 granted outright, 0 handed over.
local function grant_head(lock, queue, deadlines, ttls, head, channel, publish, window_ms, now_ms)
  local granted = 0
  local ttl = redis.call('HGET', ttls, head)
  if ttl then
    redis.call('SET', lock, head, 'PX', math.min(tonumber(ttl), window_ms))
    forget(queue, deadlines, ttls, head)
    redis.call(publish, channel, '=' .. head .. ' ' .. lock)
    granted = 1
  else
    local until_ms = tonumber(redis.call('ZSCORE', deadlines, head)) or now_ms
    redis.call('SET', lock, '~handover', 'PX', handover_ms(ttls, head, until_ms, now_ms))
    redis.call(publish, channel, head)
  end
  for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, 1)) do
    if waiter ~= head then
      if alive_key(ttls, waiter) then
        redis.call(publish, channel, '=' .. waiter)
      end
      break
    end
  end
  return granted
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
