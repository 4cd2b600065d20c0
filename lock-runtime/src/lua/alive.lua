-- A process keeps its liveness key, which every kept queue entry of its (prelude.lua)
-- names, and asks which of the processes its waiters wait for are gone. One call per
-- period, whatever number of keys the process waits on or holds.
-- KEYS[1] the process's liveness key, KEYS[2..] the liveness keys of processes it waits for
-- ARGV[1] the liveness lease in milliseconds
-- Returns {1 when the process's key was still there (0: it had lapsed, so other processes
-- may have dropped this one's entries), the watched keys that are gone}.
local kept = redis.call('SET', KEYS[1], '1', 'PX', ARGV[1], 'GET')
local gone = {}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    gone[#gone + 1] = KEYS[i]
  end
end
if kept then
  return {1, gone}
end
return {0, gone}
