-- A process keeps its liveness key, which every kept queue entry of its (prelude.lua)
-- names, and asks which of the processes its waiters wait for are gone. One call per
-- period (per master in cluster mode), whatever number of keys the process waits on or
-- holds.
-- KEYS[1] the process's liveness key
-- ARGV[1] the liveness lease in milliseconds, ARGV[2..] the liveness keys of processes it
--         waits for (not declared: in cluster mode another process's key on this master
--         may hash to another of its slots)
-- Returns {1 when the process's key was still there (0: it had lapsed, so other processes
-- may have dropped this one's entries), the watched keys that are gone}. A watched key this
-- node cannot read (cluster mode: another master serves it) counts as gone: its waiters
-- ask again.
local kept = redis.call('SET', KEYS[1], '1', 'PX', ARGV[1], 'GET')
local function alive_exists(key)
  local found = redis.pcall('EXISTS', key)
  return type(found) == 'number' and found == 1
end
local gone = {}
for i = 2, #ARGV do
  if not alive_exists(ARGV[i]) then
    gone[#gone + 1] = ARGV[i]
  end
end
if kept then
  return {1, gone}
end
return {0, gone}
