-- An operator takes a lock away from whoever holds it (a stuck or forgotten holder), and
-- wakes the queue as a release does: the head waiter is granted the lock (or handed it
-- over) at once, instead of finding it free at its next park. The old holder's next
-- renewal finds its token gone and reports the lease lost.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines, KEYS[4] queue ttls
-- ARGV[1] the key's release channel, ARGV[2] PUBLISH or SPUBLISH (cluster),
-- ARGV[3] the confirmation window of a direct grant (ms)
-- KEYS[5] a read-write lock's set of readers, ARGV[4] and ARGV[5] a reader's share key's
-- name around its token
-- Returns {removed, pttl, woken, granted, others}: what the key held (false: nothing, or a
-- key of another type, which is left alone), the PTTL it had, the waiter woken (false:
-- none), 1 when that waiter was granted the lock outright (0: handed over, or none), and
-- the other holders removed ({token, 'reader' or 'permit', ms of lease left}): a read-write
-- lock's readers (their shares are deleted) or a semaphore's permits (the key is deleted,
-- and the first waiters woken for the permits freed).
local others = {}
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'zset' and recorded_permits(KEYS[1]) then
  local now_ms = server_time()
  local permits = recorded_permits(KEYS[1])
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES')
  for i = 1, #members, 2 do
    local score = tonumber(members[i + 1])
    if score > now_ms then
      table.insert(others, {members[i], 'permit', score - now_ms})
    end
  end
  redis.call('DEL', KEYS[1])
  wake_permit_waiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], permits, 0, now_ms)
  return {false, -2, false, 0, others}
end
if kind ~= 'string' and kind ~= 'none' then
  return {false, -3, false, 0, others}
end
if redis.call('TYPE', KEYS[5])['ok'] == 'set' then
  for _, reader in ipairs(redis.call('SMEMBERS', KEYS[5])) do
    local share = ARGV[4] .. reader .. ARGV[5]
    local left = redis.call('PTTL', share)
    if left > 0 then
      table.insert(others, {reader, 'reader', left})
    end
    redis.call('DEL', share)
  end
  redis.call('DEL', KEYS[5])
end
local removed = redis.call('GET', KEYS[1]) or false
local pttl = redis.call('PTTL', KEYS[1])
if removed then
  redis.call('DEL', KEYS[1])
end
local head = false
if redis.call('EXISTS', KEYS[2]) == 1 then
  local now_ms = server_time()
  purge(KEYS[2], KEYS[3], KEYS[4], now_ms, 1)
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or false
  if not head then
    redis.call('HDEL', KEYS[4], '~gap-due', '~gap-every')
  end
end
if not head then
  if removed then
    -- Nobody queued, but a waiter that does not queue (Redlock mode) may listen.
    redis.call(ARGV[2], ARGV[1], '')
  end
  return {removed, pttl, false, 0, others}
end
-- As release.lua grants the head: outright (a waiter that left its ttl) for the
-- confirmation window, or by a hand-over (a fenced waiter) until its queue deadline.
local ttl = redis.call('HGET', KEYS[4], head)
if ttl then
  redis.call('SET', KEYS[1], head, 'PX', math.min(tonumber(ttl), tonumber(ARGV[3])))
  forget(KEYS[2], KEYS[3], KEYS[4], head)
  redis.call(ARGV[2], ARGV[1], '=' .. head .. ' ' .. KEYS[1])
  -- As release.lua: the waiter now next may be parked watching the holder just removed;
  -- it looks again later (the grantee's confirmation does not wake it).
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next and alive_key(KEYS[4], next) then
    redis.call(ARGV[2], ARGV[1], '=' .. next)
  end
  return {removed, pttl, head, 1, others}
end
local now_ms = server_time()
local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], head)) or now_ms
redis.call('SET', KEYS[1], '~handover', 'PX', math.max(1, until_ms - now_ms))
redis.call(ARGV[2], ARGV[1], head)
return {removed, pttl, head, 0, others}
