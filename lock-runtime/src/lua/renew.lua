-- Extends a lease only if this owner still holds it (renew_lease.lua has the rules).
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- KEYS[2] wait queue, KEYS[3] queue ttls, ARGV[3] the holder's process's liveness key
--         (all three optional): notes the holder for queued waiters
-- ARGV[4] (optional) '1': never shorten the key (ARGV[3] is then '' when no liveness key
--         is named)
-- Returns 1 renewed, 2 renewed and noted for queued waiters, 0 the token is gone.
return renew_lease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1')
