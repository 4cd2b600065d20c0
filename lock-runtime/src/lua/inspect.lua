-- What a lock key holds now, for an operator (read-only: it writes nothing, so running it
-- changes no lease, no queue and no fence).
-- KEYS[1] lock key, KEYS[2] fence counter, KEYS[3] wait queue, KEYS[4] queue deadlines,
-- KEYS[5] queue ttls
-- KEYS[6] the read-write lock's set of readers, KEYS[7] what the lock's holders wait for
-- (deadlock/chain.rs: a record by holder token)
-- KEYS[8] the lock's hold record (what the renewals of a holder that reports progress
-- record, renew_many.lua)
-- KEYS[9] what the lock's holding waiters hold (deadlock/chain.rs: a held key by client id)
-- ARGV[1] how many waiters to list at most, ARGV[2] and ARGV[3] a reader's share key's name
-- around its token (rwlock.rs; the shares are in the lock key's slot)
-- Returns {type, value, pttl, fence, now_ms, now_us, waiters, queued}: the lock key's type
-- ('none', 'string', or another type for a key that is no lock), its value (false when it
-- is not a string), its PTTL, the fence counter's value (false when none), the server's
-- time, then the first ARGV[1] waiters in queue order as {token, arrival in µs, queue-lease
-- deadline in ms (false when none; for a kept entry, when its process's liveness key ends), ttl for a direct grant in ms (false: a fenced waiter,
-- handed the key over)}, how many are queued in all, then the holders that share the key
-- ({token, 'permit' or 'reader', ms of lease left}: a semaphore's permits, a read-write
-- lock's readers), a semaphore's permit count (false when none is recorded), and what the
-- holder's task waits for, as the deadlock detection recorded it (false: nothing), with
-- what the waiters that hold other keys hold (HGETALL of KEYS[9]), and the hold record
-- (false when none).
local now = redis.call('TIME')
local now_s, now_micros = tonumber(now[1]), tonumber(now[2])
local now_ms = now_s * 1000 + math.floor(now_micros / 1000)
local now_us = now_s * 1000000 + now_micros
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then
  value = redis.call('GET', KEYS[1])
end
local pttl = redis.call('PTTL', KEYS[1])
local shared = {}
local permits = false
if kind == 'zset' then
  -- A semaphore (semaphore_permits.lua): the record '~permits=N' scored 0, then each
  -- holder's token scored with the end of its lease.
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], 0, '+inf', 'WITHSCORES')
  for i = 1, #members, 2 do
    local score = tonumber(members[i + 1])
    if score == 0 then
      permits = string.match(members[i], '^~permits=(%d+)$') or permits
    elseif score > now_ms then
      table.insert(shared, {members[i], 'permit', score - now_ms})
    end
  end
end
if redis.call('TYPE', KEYS[6])['ok'] == 'set' then
  for _, reader in ipairs(redis.call('SMEMBERS', KEYS[6])) do
    local left = redis.call('PTTL', ARGV[2] .. reader .. ARGV[3])
    if left > 0 then
      table.insert(shared, {reader, 'reader', left})
    end
  end
end
local fence = false
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then
  fence = redis.call('GET', KEYS[2])
end
local waiters = {}
local queued = 0
if redis.call('TYPE', KEYS[3])['ok'] == 'zset' then
  queued = redis.call('ZCARD', KEYS[3])
  local entries = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
  local deadlines = redis.call('TYPE', KEYS[4])['ok'] == 'zset'
  local ttls = redis.call('TYPE', KEYS[5])['ok'] == 'hash'
  for i = 1, #entries, 2 do
    local token = entries[i]
    local deadline = false
    if deadlines then
      deadline = redis.call('ZSCORE', KEYS[4], token) or false
    end
    local ttl = false
    if ttls then
      ttl = redis.call('HGET', KEYS[5], token) or false
      -- A kept entry lives while its process's liveness key does (prelude.lua): its place
      -- ends when that key does, not at its (distant) deadline. In cluster mode a key
      -- this node cannot read (another master serves it) leaves the deadline.
      local alive = redis.call('HGET', KEYS[5], '~alive/' .. token)
      local pttl = alive and redis.pcall('PTTL', alive)
      if type(pttl) == 'number' then
        deadline = now_ms + math.max(0, pttl)
      end
    end
    table.insert(waiters, {token, entries[i + 1], deadline, ttl})
  end
end
local waits = false
if value and redis.call('TYPE', KEYS[7])['ok'] == 'hash' then
  waits = redis.call('HGET', KEYS[7], value) or false
end
local waiters_hold = {}
if redis.call('TYPE', KEYS[9])['ok'] == 'hash' then
  waiters_hold = redis.call('HGETALL', KEYS[9])
end
local hold = false
if redis.call('TYPE', KEYS[8])['ok'] == 'string' then
  hold = redis.call('GET', KEYS[8])
end
return {kind, value, pttl, fence, now_ms, now_us, waiters, queued, shared, permits, {waits, waiters_hold}, hold}
