-- An operator takes a lock away from whoever holds it (a stuck or forgotten holder), and
-- wakes the queue as a release does: the head waiter is granted the lock (or handed it
-- over) at once, instead of finding it free at its next park. The old holder's next
-- renewal finds its token gone and reports the lease lost.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines, KEYS[4] queue ttls
-- ARGV[1] the key's release channel, ARGV[2] PUBLISH or SPUBLISH (cluster),
-- ARGV[3] the confirmation window of a direct grant (ms)
-- KEYS[5] a read-write lock's set of readers, ARGV[4] and ARGV[5] a reader's share key's
-- name around its token
-- ARGV[6] the token that must hold the key ('': whoever holds it): the lock's holder, a
-- reader's or a permit's token; ARGV[7] '1' to take a key that is not one of our locks too
-- (a string whose value is no token of ours: another client's lock, or no lock at all)
-- ARGV[8] who releases it (`host pid service`), for the holders it tells
-- Returns {removed, pttl, woken, granted, others, verdict}: what the key held (false:
-- nothing), the PTTL it had, the waiter woken (false: none), 1 when that waiter was
-- granted the lock outright (0: handed over, or none), the other holders
-- ({token, 'reader' or 'permit', ms of lease left}): a read-write lock's readers (their
-- shares are deleted) or a semaphore's permits (the key is deleted, and the first waiters
-- woken for the permits freed); and the verdict: 0 taken away, 3 the key holds another
-- type, 4 ARGV[6] holds no part of it, 5 it is not one of our locks. Nothing changes
-- unless the verdict is 0; with 4 and 5 the first and fifth elements say what holds it.
-- Tells the process of a holder whose lock was taken away, at once: a token of ours names
-- its client's id (identity.rs), and the client listens on its notice channel once it
-- has renewed a lease (renewal/notices.rs). The message is `!TOKEN WHO`.
local function tell_holder(token)
  local bare = token
  if is_permit(bare) then
    bare = string.sub(bare, #PERMIT_TOKEN + 1)
  end
  local id = string.match(bare, '^lr%-(%x+)%.')
  -- In a cluster (SPUBLISH) the holder does not listen: see notices.rs.
  if id and ARGV[2] == 'PUBLISH' then
    redis.call('PUBLISH', '~lock/notice/' .. id, '!' .. token .. ' ' .. ARGV[8])
  end
end

local others = {}
local kind = redis.call('TYPE', KEYS[1])['ok']
local permits = kind == 'zset' and recorded_permits(KEYS[1])
if kind ~= 'string' and kind ~= 'none' and not permits then
  return {false, -3, false, 0, others, 3}
end
local value = false
if kind == 'string' then
  value = redis.call('GET', KEYS[1])
end
local pttl = redis.call('PTTL', KEYS[1])
local now_ms = server_time()
local readers = {}
if permits then
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES')
  for i = 1, #members, 2 do
    local score = tonumber(members[i + 1])
    if score > now_ms then
      table.insert(others, {members[i], 'permit', score - now_ms})
    end
  end
elseif redis.call('TYPE', KEYS[5])['ok'] == 'set' then
  readers = redis.call('SMEMBERS', KEYS[5])
  for _, reader in ipairs(readers) do
    local left = redis.call('PTTL', ARGV[4] .. reader .. ARGV[5])
    if left > 0 then
      table.insert(others, {reader, 'reader', left})
    end
  end
end

-- The checks, before anything changes.
if ARGV[7] ~= '1' then
  if value and value ~= '~handover' and not is_ours(value) then
    return {value, pttl, false, 0, others, 5}
  end
  for _, other in ipairs(others) do
    local token = other[1]
    if other[2] == 'permit' and is_permit(token) then
      token = string.sub(token, #PERMIT_TOKEN + 1)
    end
    if not is_ours(token) then
      return {value, pttl, false, 0, others, 5}
    end
  end
end
if ARGV[6] ~= '' then
  local holds = value == ARGV[6]
  for _, other in ipairs(others) do
    holds = holds or other[1] == ARGV[6]
  end
  if not holds then
    return {value, pttl, false, 0, others, 4}
  end
end

for _, other in ipairs(others) do
  tell_holder(other[1])
end
if value and value ~= '~handover' then
  tell_holder(value)
end

if permits then
  redis.call('DEL', KEYS[1])
  wake_permit_waiters(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], permits, 0, now_ms)
  return {false, -2, false, 0, others, 0}
end
for _, reader in ipairs(readers) do
  redis.call('DEL', ARGV[4] .. reader .. ARGV[5])
end
if #readers > 0 then
  redis.call('DEL', KEYS[5])
end
if value then
  redis.call('DEL', KEYS[1])
end
local head = false
if redis.call('EXISTS', KEYS[2]) == 1 then
  purge(KEYS[2], KEYS[3], KEYS[4], now_ms, 1)
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1] or false
  if not head then
    redis.call('HDEL', KEYS[4], '~gap-due', '~gap-every')
  end
end
if not head then
  if value then
    -- Nobody queued, but a waiter that does not queue (Redlock mode) may listen.
    redis.call(ARGV[2], ARGV[1], '')
  end
  return {value, pttl, false, 0, others, 0}
end
-- As a release grants the head: outright, or by a hand-over.
local granted = grant_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], head, ARGV[1], ARGV[2], tonumber(ARGV[3]), now_ms)
return {value, pttl, head, granted, others, 0}
