-- Acquire a lock: a plain string key holding a random token with a PX expiry (the layout
-- of redis-py's Lock, bsm/redislock and single-node redsync), served fairly.
--
-- KEYS[1] lock key
-- KEYS[2] fence counter   } auxiliary keys, all in the lock key's cluster slot
-- KEYS[3] wait queue      } (a sorted set: waiter token -> arrival time in microseconds)
-- KEYS[4] queue deadlines } (a sorted set: waiter token -> server time in ms it expires)
-- KEYS[5] queue ttls      } (a hash: waiter token -> its lease in ms, for a direct grant)
-- KEYS[6] (optional) the lock's hold record (renew_lease.lua's note_renewal): a take after
--         a wait records there when the hold began, which the token (made when the caller
--         asked) does not say
-- ARGV[1] token (also the waiter's id in the queue)
-- ARGV[2] lease in milliseconds
-- ARGV[3] fence counter lifetime in milliseconds, or 0 for no fence
-- ARGV[4] 1 to join the queue when the lock cannot be taken now, 0 to try once
-- ARGV[5] queue lease (ms): how long a queued waiter keeps its place unless its process
--         keeps it (each try, and the watchdog's keep-alive, start a new lease)
--
-- ARGV[6] the period of foreign windows while a foreign client uses them (ms): one of our
--         tenures (Config::local_pass_time)
-- ARGV[7], ARGV[8] (with ARGV[10]) the key's release channel, and PUBLISH
-- ARGV[9] (with ARGV[10]) '1' when the caller's watchdog renews its lease: waiters may then
--         wait for its release (or its process's end) instead of asking again
-- ARGV[10] (optional) the caller's process's liveness key: the caller's entry is then a
--         kept one (prelude.lua), and the reply has a third element, see below. Not a
--         declared key: in cluster mode it is the process's key on this master, in another
--         slot (prelude.lua reads it with redis.pcall)
--
-- Returns {1, fence} when acquired (fence 0 without fencing), otherwise {0, wait_ms}: how
-- long the caller may sleep before trying again if no release wakes it. With ARGV[10], a
-- third element: the liveness key of the process that holds the key and renews it, '' for
-- none (a foreign holder, one not noted yet, a hand-over): until that key vanishes, the
-- holder's release (or a take that changes who the caller waits for) wakes the caller,
-- which need not ask again meanwhile.
--
-- A release that finds waiters leaves the key holding '~handover' (never a token) until
-- the head of the queue takes it: so a plain `SET NX`, which the client sends as its first
-- try when it knows of no contention, never jumps the queue. Here it counts as free.
-- A waiter that wants no fence leaves its lease in KEYS[5]: the release then grants it the
-- lock directly (the key holds its token) instead of a hand-over.

local alive = ARGV[10]

-- The reply for a grant just made (the lock key already holds the token).
local function fenced()
  local fence = 0
  if ARGV[3] ~= '0' then
    fence = next_fence(KEYS[2], ARGV[3])
  end
  if alive then
    return {1, fence, ''}
  end
  return {1, fence}
end

-- The server's time, read once per call where the script needs it (below, after the
-- common case): a take reuses it.
local now_ms, now_us

-- With `woken`, the next waiter was already told to look again: a release that granted
-- the key to this caller woke it (and its look finds this grant, which lasts only the
-- confirmation window, so it does not park past that), or an earlier try of this same
-- acquisition took the key and woke it. Waking it once more would only make it run this
-- script again on every hand-over.
local function acquire(woken)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if KEYS[6] then
    -- '<token> <renewed ms> <progress ms or -> <took ms>': taken now, no progress yet.
    local took = now_ms or server_time()
    redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. took .. ' - ' .. took, 'PX', ARGV[2])
  end
  if alive and redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HDEL', KEYS[5], '~seen')
    if ARGV[9] == '1' then
      note_holder(KEYS[5], ARGV[1], alive, tonumber(ARGV[2]))
    end
    -- The next waiter may be parked watching the process this key came from: it looks
    -- again, and from now on watches this holder.
    local next = not woken and redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if next and next ~= ARGV[1] and alive_key(KEYS[5], next) then
      redis.call(ARGV[8], ARGV[7], next)
    end
  end
  return fenced()
end

-- The reply of a try that did not acquire: how long to wait at most, and with ARGV[10]
-- whose liveness key to watch meanwhile.
local function waiting(wait_ms, watch)
  if alive then
    return {0, wait_ms, watch or ''}
  end
  return {0, wait_ms}
end

-- How long the holder may keep the key. A key without expiry (a foreign lock taken with
-- no timeout) has no end to wait for: the caller parks for its longest park and asks
-- again, rather than asking again at once. The client caps every park at its MAX_PARK
-- (1 s, lock.rs), so any value at least that long gives the same wait.
local NO_EXPIRY_WAIT_MS = 2000

-- How soon our waiters ask again while a client that does not queue holds the key it took
-- in a foreign window (its release publishes nothing). The one whose turn it is (the head:
-- one asker per process and key) asks every HEAD_POLL_MS: a foreign client that releases
-- and asks again at once (redis-py's Lock in a loop) leaves the key free for a fraction of
-- a millisecond, which a slower asker almost never sees (at 20 ms our side got 6-16 % of
-- the acquisitions against 8 redis-py threads). The others ask every FOREIGN_POLL_MS: the
-- head's take wakes the next (acquire()). redis-py's Lock asks every 100 ms.
local FOREIGN_POLL_MS = 20
local HEAD_POLL_MS = 1
-- How soon the head looks again at a holder that does not note itself, seen for the first
-- time (see below): once per such holder, so waiting behind long holds costs no more.
local UNNOTED_LOOK_MS = 50
local function held_for()
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl == -1 then
    return NO_EXPIRY_WAIT_MS
  end
  if pttl < 0 then
    return 0
  end
  return pttl
end

-- The common case: nobody is queued, so the lock is first come, first served. Two calls
-- when it is free.
local queued = redis.call('EXISTS', KEYS[3]) == 1
if not queued and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return fenced()
end

local holder = redis.call('GET', KEYS[1])
if holder == '~handover' then
  holder = false
end
-- Ours already: an earlier try of this same acquisition was granted but its reply was
-- lost (a timeout, a reset connection). Granting it again makes retries idempotent.
if holder == ARGV[1] then
  return acquire(true)
end

if not queued then
  -- A hand-over left behind by a queue that has since expired.
  if not holder then
    return acquire()
  end
  -- Held by another with nobody queued: try-once callers stop here.
  if ARGV[4] == '0' then
    return waiting(held_for())
  end
end

now_ms, now_us = server_time()
purge(KEYS[3], KEYS[4], KEYS[5], now_ms, 1)

local wait_ms
local watch
-- A foreign window left by a release (release.lua): until its end our waiters leave the
-- free key to clients that do not queue, asking every FOREIGN_POLL_MS. A foreign holder seen
-- meanwhile marks the window used, and ends it once the key is free again; the first of
-- ours to take the key closes the window.
local gap_end = tonumber(redis.call('HGET', KEYS[5], '~gap'))
local gap_used = gap_end and redis.call('HEXISTS', KEYS[5], '~gap-used') == 1
if gap_end and holder and not gap_used and not is_ours(holder) then
  -- When the foreign side was first seen holding the key.
  redis.call('HSET', KEYS[5], '~gap-used', now_ms)
  gap_used = true
end
-- How often this caller asks while the window lasts: the head (or the first to queue) at
-- once after a foreign release, the others as before.
local function foreign_poll_ms()
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil or head == ARGV[1] then
    return HEAD_POLL_MS
  end
  return FOREIGN_POLL_MS
end
-- A used window lasts at least one of our tenures (ARGV[6]) from the first foreign sighting,
-- as ours does: our head, quicker than a foreign client's retry, would otherwise take the
-- key back after a hold or two of theirs and then keep it a whole tenure.
local foreign_since = gap_used and tonumber(redis.call('HGET', KEYS[5], '~gap-used'))
local foreign_turn = foreign_since and foreign_since + tonumber(ARGV[6]) - now_ms
if gap_end and not holder and not gap_used and now_ms < gap_end then
  wait_ms = math.min(gap_end - now_ms, foreign_poll_ms())
elseif not holder and foreign_turn and foreign_turn > 0 then
  wait_ms = math.min(foreign_turn, foreign_poll_ms())
elseif not holder then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil or head == ARGV[1] then
    if head then
      forget(KEYS[3], KEYS[4], KEYS[5], head)
    end
    if gap_end then
      -- Closing the window: a foreign client that used it makes the foreign side one more
      -- process in the rotation: the next window after as long as the foreign side held
      -- the key (from when a foreign holder was first seen until now), at least one of our
      -- tenures (ARGV[6]) and at most FIRST_WINDOW_MS, so each side holds it about as long
      -- (a foreign client that releases and asks again at once keeps the key for many
      -- holds before our head finds it free); an unused window makes the next four times
      -- later.
      local every = tonumber(redis.call('HGET', KEYS[5], '~gap-every')) or FIRST_WINDOW_MS
      if gap_used then
        local seen = tonumber(redis.call('HGET', KEYS[5], '~gap-used')) or now_ms
        every = math.max(tonumber(ARGV[6]), math.min(now_ms - seen, FIRST_WINDOW_MS))
      else
        every = math.min(every * 4, MAX_WINDOW_EVERY_MS)
      end
      redis.call('HDEL', KEYS[5], '~gap', '~gap-used')
      -- Our side looks whether a window is due only when it passes the key on between its
      -- processes or ends a tenure (every ARGV[6] at most): due half a tenure early, the
      -- window comes at the look nearest to `every`, not at the first one after it.
      local due = now_ms + every
      if gap_used then
        due = due - math.floor(tonumber(ARGV[6]) / 2)
      end
      redis.call('HSET', KEYS[5], '~gap-due', due, '~gap-every', every)
      keep_alive(KEYS[5], every + tonumber(ARGV[5]))
    end
    return acquire()
  end
  -- Free, but another waiter is first in line: wait for its turn (at most its deadline).
  if alive_key(KEYS[5], head) then
    -- A kept entry: its process is alive, but the entry may be one nobody waits on any
    -- more (its leave failed), or its waiter may be parked after a grant that lapsed (its
    -- process confirmed it too late). Woken, a live waiter takes the key at once; an
    -- entry that does not within a queue lease loses its place.
    redis.call('ZADD', KEYS[4], 'XX', 'LT', now_ms + tonumber(ARGV[5]), head)
    if ARGV[8] then
      redis.call(ARGV[8], ARGV[7], head)
    end
  end
  wait_ms = math.max(0, (tonumber(redis.call('ZSCORE', KEYS[4], head)) or now_ms) - now_ms)
else
  wait_ms = held_for()
  if gap_end and not is_ours(holder) then
    -- Taken in a foreign window by a client that publishes no release: ask again soon.
    wait_ms = math.min(wait_ms, foreign_poll_ms())
  elseif alive then
    watch = watched_holder(KEYS[5], holder)
    if not watch and ARGV[4] == '1' and not is_ours(holder) and foreign_poll_ms() == HEAD_POLL_MS then
      -- A holder that does not note itself, seen by the head: a foreign client's, or one
      -- of ours not noted yet. Ours pass the key on through the queue (a grant, a
      -- hand-over, a window), so a key that changes hands between two such holders while
      -- we wait went to a client that does not queue, and that releases and asks again
      -- without ever leaving the key free for long (redis-py's Lock in a loop): that opens
      -- a window in use, and the head asks every HEAD_POLL_MS until it takes the key. A
      -- holder seen for the first time is looked at again after UNNOTED_LOOK_MS.
      local seen = redis.call('HGET', KEYS[5], '~seen')
      if seen and seen ~= holder then
        redis.call('HSET', KEYS[5], '~gap', now_ms, '~gap-used', now_ms)
        redis.call('HDEL', KEYS[5], '~seen')
        wait_ms = HEAD_POLL_MS
      else
        if not seen then
          wait_ms = math.min(wait_ms, UNNOTED_LOOK_MS)
        end
        redis.call('HSET', KEYS[5], '~seen', holder)
      end
    end
  end
end

if ARGV[4] == '1' then
  local ttl = ARGV[2]
  if ARGV[3] ~= '0' then
    ttl = '0'
  end
  join(KEYS[3], KEYS[4], KEYS[5], ARGV[1], ttl, tonumber(ARGV[5]), now_ms, now_us, alive)
end
return waiting(wait_ms, watch)
