-- A task takes over the lock its process holds, from the task before it (a local pass), when
-- its options need Redis: the key's expiry set to its own ttl (a lease without watchdog
-- ends a ttl after this), and with fencing a fresh fence.
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] the process's token, ARGV[2] lease in milliseconds, ARGV[3] fence counter
-- lifetime in milliseconds, or 0 for no fence
-- Returns {1, fence} (fence 0 without fencing), or {0, 0} when the token is gone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] == '0' then
  return {1, 0}
end
return {1, next_fence(KEYS[2], ARGV[3])}
