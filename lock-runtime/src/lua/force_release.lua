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
-- As a release grants the head: outright, or by a hand-over.
local now_ms = server_time()
local granted = grant_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, ARGV[1], ARGV[2], tonumber(ARGV[3]), now_ms)
return {removed, pttl, head, granted, others}
