-- A waiter gives up its place in the queue (wait ran out, or its future was dropped), and
-- if that made the lock free for the next waiter, wakes it.
-- KEYS[1] lock key, KEYS[2] wait queue, KEYS[3] queue deadlines
-- ARGV[1] the waiter's token, ARGV[2] the key's release channel
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.call('PUBLISH', ARGV[2], next)
  end
end
return 1
