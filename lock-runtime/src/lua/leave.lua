-- A waiter gives up (its wait ran out, its future was dropped, Redis failed under it): it
-- leaves the queue, gives back a grant it may not have heard of (an earlier try whose reply
-- was lost), and if that made the lock free for the next waiter, wakes it.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines
-- ARGV[1] the waiter's token, ARGV[2] the key's release channel, ARGV[3] PUBLISH or SPUBLISH
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local freed = false
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed = true
end
if (freed or head == ARGV[1]) and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.call(ARGV[3], ARGV[2], next)
  end
end
return 1
