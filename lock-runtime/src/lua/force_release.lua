-- An operator takes a lock away from whoever holds it (a stuck or forgotten holder), and
-- wakes the queue as a release does: the head waiter is granted the lock (or handed it
-- over) at once, instead of finding it free at its next park. The old holder's next
-- renewal finds its token gone and reports the lease lost.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines, KEYS[4] queue ttls
-- ARGV[1] the key's release channel, ARGV[2] PUBLISH or SPUBLISH (cluster),
-- ARGV[3] the confirmation window of a direct grant (ms)
-- Returns {removed, pttl, woken, granted}: what the key held (false: nothing, or a key of
-- another type, which is left alone), the PTTL it had, the waiter woken (false: none), and
-- 1 when that waiter was granted the lock outright (0: handed over, or none).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'string' and kind ~= 'none' then
  return {false, -3, false, 0}
end
local removed = redis.call('GET', KEYS[1]) or false
local pttl = redis.call('PTTL', KEYS[1])
if removed then
  redis.call('DEL', KEYS[1])
end
local head = false
if redis.call('EXISTS', KEYS[2]) == 1 then
  local now_ms = server_time()
  purge(KEYS[2], KEYS[3], KEYS[4], now_ms)
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
  return {removed, pttl, false, 0}
end
-- As release.lua grants the head: outright (a waiter that left its ttl) for the
-- confirmation window, or by a hand-over (a fenced waiter) until its queue deadline.
local ttl = redis.call('HGET', KEYS[4], head)
if ttl then
  redis.call('SET', KEYS[1], head, 'PX', math.min(tonumber(ttl), tonumber(ARGV[3])))
  forget(KEYS[2], KEYS[3], KEYS[4], head)
  redis.call(ARGV[2], ARGV[1], '=' .. head .. ' ' .. KEYS[1])
  return {removed, pttl, head, 1}
end
local now_ms = server_time()
local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], head)) or now_ms
redis.call('SET', KEYS[1], '~handover', 'PX', math.max(1, until_ms - now_ms))
redis.call(ARGV[2], ARGV[1], head)
return {removed, pttl, head, 0}
