-- Extend a lease only if this owner still holds it (compare-and-PEXPIRE).
-- KEYS[1] lock key
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- KEYS[2] wait queue, KEYS[3] queue ttls, ARGV[3] the holder's process's liveness key
--         (all three optional): while waiters are queued, notes that this process holds
--         the key, so that they wait for its release or its end instead of asking again
--         (as prelude.lua's note_holder does)
--         The liveness key is created (for a second) if missing: its process keeps it
--         from now on, told by the reply.
-- ARGV[4] (optional) '1': never shorten the key. A watchdog's renewal and an owner's
--         extension may reach the server in either order (they go over different
--         connections): the key keeps the later expiry, so the holder, which counts its
--         lease from the longest of them, never believes in more than the key has.
--         (ARGV[3] is then '' when no liveness key is named.)
-- Returns 1 renewed, 2 renewed and noted for queued waiters, 0 the token is gone (the lease
-- was lost).
-- A semaphore permit's token (KEYS[1] is its semaphore's key) renews the permit instead
-- (semaphore_permits.lua, prepended with prelude.lua by scripts.rs).
if is_permit(ARGV[1]) then
  return renew_permit(KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[4] == '1')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[4] ~= '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  -- In cluster mode a liveness key this node cannot read (a stale slot map) notes nothing.
  if ARGV[3] and ARGV[3] ~= '' and redis.call('EXISTS', KEYS[2]) == 1
    and not failed(redis.pcall('SET', ARGV[3], '1', 'PX', 1000, 'NX')) then
    redis.call('HSET', KEYS[3], '~holder', ARGV[1] .. ' ' .. ARGV[3])
    if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[3], ARGV[2])
    end
    return 2
  end
  return 1
end
return 0
