-- Extends many leases in one call, each only if its owner still holds it (renew_lease.lua
-- has the rules): the watchdog's batches, which would otherwise pay a script call per lease.
-- Every key of the call must be on this server (in a cluster, in one slot).
--
-- ARGV[1] '1': never shorten a key, ARGV[2] the holder's process's liveness key ('' for none)
-- then per lease four arguments: its token, its lease in milliseconds, how many keys it
-- names in KEYS, in order: 1 (its lock key), 2 (lock key, hold record), 3 (lock key, wait
-- queue, queue ttls: the holder is noted for queued waiters) or 4 (the three, then the hold
-- record), and how many milliseconds ago its holder last reported progress ('' for never).
-- A lease that names its hold record and is renewed records the renewal there
-- (note_renewal in renew_lease.lua).
-- Returns one reply per lease, in order, as renew.lua's: 1, 2 or 0.
local grow_only, alive = ARGV[1] == '1', ARGV[2]
local now_ms = nil
local replies, key = {}, 1
for arg = 3, #ARGV, 4 do
  local names = tonumber(ARGV[arg + 2])
  local lock, queue, ttls, hold = KEYS[key], nil, nil, nil
  if names >= 3 then
    queue, ttls = KEYS[key + 1], KEYS[key + 2]
  end
  if names == 2 or names == 4 then
    hold = KEYS[key + names - 1]
  end
  key = key + names
  local token, ttl_ms = ARGV[arg], ARGV[arg + 1]
  local reply = renew_lease(lock, queue, ttls, token, ttl_ms, alive, grow_only)
  if hold and reply ~= 0 then
    now_ms = now_ms or server_time()
    note_renewal(hold, token, ttl_ms, now_ms, ARGV[arg + 3])
  end
  replies[#replies + 1] = reply
end
return replies
