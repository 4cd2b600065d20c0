-- Release a lock only if this owner still holds it (compare-and-delete), and hand it to the
-- waiter whose turn it is. A waiter is a process: its tasks queue locally, one entry here.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines, KEYS[4] queue ttls,
-- KEYS[5] (optional) the lock's hold record: deleted when this holder's, unless it keeps the key
-- ARGV[1] token, ARGV[2] the key's release channel, ARGV[3] PUBLISH or SPUBLISH (cluster),
-- ARGV[4] the confirmation window of a direct grant (ms),
-- ARGV[5] the releasing process's next queue entry when more of its tasks wait for the key
--         ('' or absent: none), ARGV[6] that entry's ttl (ms), ARGV[7] the queue lease (ms),
-- ARGV[8] the foreign window (ms, '0' or absent: never): while the key is contended, now and
--         then a release leaves it free that long for clients that do not queue (redis-py's
--         Lock, redsync); none of our waiters takes it meanwhile. When is kept per key in the
--         queue hash (KEYS[4]: '~gap-due', '~gap-every'), so all our processes share one
--         schedule, which ends with the contention
-- ARGV[9] '1' to announce a release that found nobody queued (Redlock mode: its waiters do
--         not queue, they subscribe and wait for any release)
-- ARGV[10] (optional) the releasing process's liveness key: its next entry (ARGV[5]) is then
--         a kept one (prelude.lua)
-- Returns 1 released, 2 kept (ARGV[5] was given and no other process is queued: the holder
-- keeps the key and passes it on in its process), 3 left free for a foreign window,
-- 0 the key is gone (the lease had expired), -1 another owner holds it.
--
-- With waiters queued the key is not deleted. A head that left its ttl is granted the lock
-- at once: the key holds its token for the confirmation window (the grantee extends it to
-- its ttl when it confirms), it leaves the queue, and the message is
-- '=' .. token .. ' ' .. key, naming the grant's key and token so that a client takes only its
-- own grants (the grantee's confirming try dates its lease).
-- Otherwise (a fenced waiter) the key holds '~handover' until the head's queue deadline and
-- the message is its token: it takes the key through acquire.lua. The waiter next after the
-- head gets '=' .. its token (no key): look later, see below. Either way a newcomer's
-- plain `SET NX` fails and it queues behind. The releasing process's next entry, if any,
-- joins the tail in the same call.
-- A semaphore permit's token (KEYS[1] is its semaphore's key): the permit is given back
-- instead, and the waiters it is for are woken.
if is_permit(ARGV[1]) then
  return give_back_permit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
end
-- Read by the uncontended release's lines before this (release_uncontended.lua) when they
-- ran, else here.
local current = head_current
if not head_read then
  current = redis.call('GET', KEYS[1])
end
if current ~= ARGV[1] then
  if current and current ~= '~handover' then
    return -1
  end
  if not current then
    -- The lease had ended (expired, deleted): the head may be parked until this release
    -- (its holder's process is alive), so wake it to take the free key.
    local waiting = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if waiting then
      redis.call(ARGV[3], ARGV[2], waiting)
    end
  end
  return 0
end
-- Deletes the lock's hold record (KEYS[5], when named) if it is this holder's: its take
-- after a wait wrote it, or its renewals kept it. Not when the holder keeps the key for its
-- process's next task: the tenure, and its record, go on.
local function forget_hold()
  local noted = KEYS[5] and redis.call('GET', KEYS[5])
  if noted and string.sub(noted, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
    redis.call('DEL', KEYS[5])
  end
end
local alive = ARGV[10]
if alive == '' then
  alive = nil
end
local requeue = ARGV[5] or ''
local window = tonumber(ARGV[8] or '0') or 0
local queued = head_queued
if queued == nil then
  queued = redis.call('EXISTS', KEYS[2]) == 1
end
local now_ms, now_us, head
if queued then
  now_ms, now_us = server_time()
  purge(KEYS[2], KEYS[3], KEYS[4], now_ms, 1)
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
end
if not head and requeue == '' then
  -- Nobody waits: contention is over, and the foreign-window schedule goes with it. Nobody
  -- queued means nobody to wake: no message on the uncontended path (but in Redlock mode,
  -- whose waiters do not queue).
  redis.call('DEL', KEYS[1])
  forget_hold()
  if queued or ARGV[9] == '1' then
    redis.call(ARGV[3], ARGV[2], '')
  end
  if queued or window > 0 then
    redis.call('HDEL', KEYS[4], '~gap-due', '~gap-every')
  end
  return 1
end
if window > 0 then
  if not now_ms then
    now_ms, now_us = server_time()
  end
  local due = tonumber(redis.call('HGET', KEYS[4], '~gap-due'))
  if not due then
    -- Contention begins: the first foreign window comes after FIRST_WINDOW_MS of it.
    redis.call('HSET', KEYS[4], '~gap-due', now_ms + FIRST_WINDOW_MS, '~gap-every', FIRST_WINDOW_MS)
    keep_alive(KEYS[4], FIRST_WINDOW_MS + tonumber(ARGV[7]))
  elseif now_ms >= due then
    -- A foreign window: the key is free until its end for anyone's SET NX, and
    -- acquire.lua makes our waiters (the head, woken now, and the releasing process's next
    -- entry) wait for the end; the first of ours to take the key after it closes the
    -- window and sets when the next is due.
    redis.call('DEL', KEYS[1])
    forget_hold()
    redis.call('HSET', KEYS[4], '~gap', now_ms + window)
    redis.call('HDEL', KEYS[4], '~gap-due')
    if head then
      redis.call(ARGV[3], ARGV[2], head)
    end
    if requeue ~= '' then
      join(KEYS[2], KEYS[3], KEYS[4], requeue, ARGV[6], tonumber(ARGV[7]), now_ms, now_us, alive)
    end
    keep_queue(KEYS[2], KEYS[3], KEYS[4], window + tonumber(ARGV[7]))
    return 3
  end
end
if not head then
  -- Only the releasing process waits: it keeps the key.
  return 2
end
grant_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, ARGV[2], ARGV[3], tonumber(ARGV[4]), now_ms)
forget_hold()
if requeue ~= '' then
  join(KEYS[2], KEYS[3], KEYS[4], requeue, ARGV[6], tonumber(ARGV[7]), now_ms, now_us, alive)
end
return 1
