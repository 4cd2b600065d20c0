-- Extend a lease only if this owner still holds it (compare-and-PEXPIRE).
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- Returns 1 renewed, 0 the token is gone (the lease was lost).
-- A semaphore permit's token (KEYS[1] is its semaphore's key) renews the permit instead.
if is_permit(ARGV[1]) then
  return renew_permit(KEYS[1], ARGV[1], tonumber(ARGV[2]))
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
