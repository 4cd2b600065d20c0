-- A writer that holds the lock key asks whether the readers have left. It holds the key on
-- a short lease while it waits (so that a writer that dies waiting costs the waiters behind
-- it about a second, as any waiter), each call starting a new one; once the readers have
-- left, the key gets the writer's own lease.
-- KEYS[1] lock key, KEYS[2] the set of readers
-- ARGV[1] the writer's token, ARGV[2], ARGV[3] a share key's name around its token,
-- ARGV[4] the waiting lease (ms), ARGV[5] the writer's lease (ms)
-- Returns {1, 0} when no reader holds a share (the writer may write: no reader can take a
-- share while it holds the lock key), {0, ms} while readers hold one (ms: the soonest of
-- their shares' remaining leases, the longest to wait if no release wakes the writer), or
-- {-1, 0} when the writer no longer holds the lock key.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1, 0}
end
local soonest = -1
for _, reader in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local pttl = redis.call('PTTL', ARGV[2] .. reader .. ARGV[3])
  if pttl == -2 then
    redis.call('SREM', KEYS[2], reader)
  else
    if pttl < 0 then
      pttl = 1000
    end
    if soonest < 0 or pttl < soonest then
      soonest = pttl
    end
  end
end
if soonest < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {1, 0}
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {0, soonest}
