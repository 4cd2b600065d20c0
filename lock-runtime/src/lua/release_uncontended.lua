-- The uncontended release, run before the helpers that follow are defined (defining them
-- costs the server more than the release itself): a lock's token (not a semaphore
-- permit's), this owner's key, nobody queued, and no entry of the releasing process to
-- join the queue. It does what release.lua does in that case; any other case goes on to
-- release.lua, which reads the key again. KEYS and ARGV are release.lua's, or the short
-- form: KEYS[1], KEYS[2] and ARGV[1] only, which a client sends when it knows of no waiter
-- (the fewer names cost the server less); another owner's key answers -1 as release.lua
-- does, and any other case returns -2: the client then sends the full form.
-- What these lines read of the key and its queue, which release.lua takes from here
-- instead of reading them again (the rest of the script is the same chunk).
local head_read, head_current, head_queued = false, false, nil
if string.sub(ARGV[1], 1, 7) ~= 'permit:' and (ARGV[5] or '') == '' then
  head_read = true
  head_current = redis.call('GET', KEYS[1])
  if head_current == ARGV[1] then
    head_queued = redis.call('EXISTS', KEYS[2]) == 1
    if not head_queued then
      redis.call('DEL', KEYS[1])
      -- The full form may name the lock's hold record (KEYS[5]): deleted when this
      -- holder's (its take after a wait wrote it, or its renewals kept it).
      local noted = KEYS[5] and redis.call('GET', KEYS[5])
      if noted and string.sub(noted, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
        redis.call('DEL', KEYS[5])
      end
      if ARGV[9] == '1' then
        redis.call(ARGV[3], ARGV[2], '')
      end
      if (tonumber(ARGV[8] or '0') or 0) > 0 then
        redis.call('HDEL', KEYS[4], '~gap-due', '~gap-every')
      end
      return 1
    end
  elseif head_current and head_current ~= '~handover' then
    -- Another owner's key (release.lua answers the same).
    return -1
  end
end
if #KEYS < 4 then
  return -2
end
