-- Extends many leases in one call, each only if its owner still holds it (renew_lease.lua
-- has the rules): the watchdog's batches, which would otherwise pay a script call per lease.
-- Every key of the call must be on this server (in a cluster, in one slot).
--
-- ARGV[1] '1': never shorten a key, ARGV[2] the holder's process's liveness key ('' for none)
-- then per lease three arguments: its token, its lease in milliseconds, and how many keys it
-- names in KEYS, in order: 1 (its lock key) or 3 (lock key, wait queue, queue ttls: the
-- holder is noted for queued waiters).
-- Returns one reply per lease, in order, as renew.lua's: 1, 2 or 0.
local grow_only, alive = ARGV[1] == '1', ARGV[2]
local replies, key = {}, 1
for arg = 3, #ARGV, 3 do
  local lock, queue, ttls = KEYS[key], nil, nil
  if ARGV[arg + 2] == '3' then
    queue, ttls = KEYS[key + 1], KEYS[key + 2]
    key = key + 3
  else
    key = key + 1
  end
  replies[#replies + 1] = renew_lease(lock, queue, ttls, ARGV[arg], ARGV[arg + 1], alive, grow_only)
end
return replies
