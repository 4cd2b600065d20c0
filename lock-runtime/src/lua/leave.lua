-- A waiter gives up (its wait ran out, its future was dropped, Redis failed under it): it
-- leaves the queue, gives back a grant it may not have heard of (an earlier try whose reply
-- was lost) or a hand-over meant for it, and passes the lock on to the next waiter.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines, KEYS[4] queue ttls
-- ARGV[1] the waiter's token, ARGV[2] the key's release channel, ARGV[3] PUBLISH or SPUBLISH
-- (ARGV[4], the grant confirmation window, is release.lua's; unused here)
-- A semaphore's waiter (a permit's token): also gives back a permit an earlier try took
-- without hearing of it, and wakes whom a freed permit is for.
if is_permit(ARGV[1]) then
  give_back_permit(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3])
  return 1
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
forget(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
local current = redis.call('GET', KEYS[1])
-- Ours to pass on: a grant carrying our token, or (as the head) a hand-over or a free key.
local ours = current == ARGV[1]
  or (head == ARGV[1] and (not current or current == '~handover'))
if not ours then
  return 1
end
-- A free key in a foreign window stays free; the next waiter takes it after the window.
local gap_end = tonumber(redis.call('HGET', KEYS[4], '~gap'))
if not current and gap_end and gap_end > server_time() then
  return 1
end
local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if next then
  local now_ms = server_time()
  local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], next)) or now_ms
  redis.call('SET', KEYS[1], '~handover', 'PX', handover_ms(KEYS[4], next, until_ms, now_ms))
  redis.call(ARGV[3], ARGV[2], next)
elseif current then
  redis.call('DEL', KEYS[1])
end
return 1
