-- The uncontended release, run before the helpers that follow are defined (defining them
-- costs the server more than the release itself): a lock's token (not a semaphore
-- permit's), this owner's key, nobody queued, and no entry of the releasing process to
-- join the queue. It does what release.lua does in that case; any other case goes on to
-- release.lua, which reads the key again. KEYS and ARGV are release.lua's.
if string.sub(ARGV[1], 1, 7) ~= 'permit:' and (ARGV[5] or '') == ''
    and redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  if ARGV[9] == '1' then
    redis.call(ARGV[3], ARGV[2], '')
  end
  if (tonumber(ARGV[8] or '0') or 0) > 0 then
    redis.call('HDEL', KEYS[4], '~gap-due', '~gap-every')
  end
  return 1
end
