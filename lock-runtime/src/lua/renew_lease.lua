-- Extends one lease only if its owner still holds it (compare-and-PEXPIRE): the body of
-- renew.lua (one lease) and renew_many.lua (many in one call). Prepended after prelude.lua
-- and semaphore_permits.lua.
--
-- `lock` the lock key, `token` and `ttl_ms` the owner's token and lease. `queue`, `ttls` and
-- `alive` (the holder's process's liveness key; all three optional): while waiters are
-- queued, notes that this process holds the key, so that they wait for its release or its end
-- instead of asking again (as prelude.lua's note_holder does). The liveness key is created
-- (for a second) if missing: its process keeps it from now on, told by the reply.
-- `grow_only`: never shorten the key. A watchdog's renewal and an owner's extension may reach
-- the server in either order (they go over different connections): the key keeps the later
-- expiry, so the holder, which counts its lease from the longest of them, never believes in
-- more than the key has.
-- Returns 1 renewed, 2 renewed and noted for queued waiters, 0 the token is gone (the lease
-- was lost). A semaphore permit's token (`lock` is then its semaphore's key) renews the
-- permit instead (semaphore_permits.lua).
local function renew_lease(lock, queue, ttls, token, ttl_ms, alive, grow_only)
  if is_permit(token) then
    return renew_permit(lock, token, tonumber(ttl_ms), grow_only)
  end
  if redis.call('GET', lock) ~= token then
    return 0
  end
  if not grow_only or redis.call('PTTL', lock) < tonumber(ttl_ms) then
    redis.call('PEXPIRE', lock, ttl_ms)
  end
  -- In cluster mode a liveness key this node cannot read (a stale slot map) notes nothing.
  if queue and alive and alive ~= '' and redis.call('EXISTS', queue) == 1
    and not failed(redis.pcall('SET', alive, '1', 'PX', 1000, 'NX')) then
    redis.call('HSET', ttls, '~holder', token .. ' ' .. alive)
    if redis.call('PTTL', ttls) < tonumber(ttl_ms) then
      redis.call('PEXPIRE', ttls, ttl_ms)
    end
    return 2
  end
  return 1
end

-- Records a renewal of `lock` by `token` with a `ttl_ms` lease at the server's `now_ms` in
-- `hold` (the lock's hold record, in its slot), for an operator's inspect.lua: the token,
-- when it was renewed, when its holder last reported progress (`progress_ago` ms before
-- now; '' when it has not during this hold), and when it took the key (kept from the
-- record its take wrote after a wait, acquire.lua; '-' when none did): one string,
-- '<token> <renewed ms> <progress ms or -> <took ms or ->', kept as long as the lease. Only
-- the renewals of a holder that reported progress or took the key after a wait write it
-- (the watchdog names the record then): an uncontended acquire and its release cost
-- nothing more, and a stale record (another token's) is not shown.
local function note_renewal(hold, token, ttl_ms, now_ms, progress_ago)
  local progress = '-'
  if progress_ago ~= '' then
    progress = tostring(now_ms - tonumber(progress_ago))
  end
  local took = '-'
  local noted = redis.call('GET', hold)
  if noted and string.sub(noted, 1, #token + 1) == token .. ' ' then
    took = string.match(string.sub(noted, #token + 2), '^%S+ %S+ (%S+)$') or '-'
  end
  redis.call('SET', hold, token .. ' ' .. now_ms .. ' ' .. progress .. ' ' .. took, 'PX', ttl_ms)
end
