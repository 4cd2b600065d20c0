-- A reader gives its share back (compare-and-delete) and leaves the set of readers; when it
-- was the last reader and a writer holds the lock key (waiting for the readers to leave),
-- the writer is woken: the message is its token and '/drained' (the bare token may still
-- name its process's waiter in the key's queue, whose place became the lock).
--
-- KEYS[1] lock key, KEYS[2] the set of readers, KEYS[3] this reader's share key
-- ARGV[1] the reader's token, ARGV[2] the key's release channel, ARGV[3] PUBLISH or
-- SPUBLISH, ARGV[4], ARGV[5] a share key's name around its token
-- Returns 1 released, 0 the share was gone (its lease had expired), -1 another token held
-- the share key (never deleted).
local current = redis.call('GET', KEYS[3])
local outcome = 0
if current == ARGV[1] then
  redis.call('DEL', KEYS[3])
  outcome = 1
elseif current then
  outcome = -1
end
redis.call('SREM', KEYS[2], ARGV[1])
local writer = redis.call('GET', KEYS[1])
if writer and writer ~= '~handover' and live_readers(KEYS[2], ARGV[4], ARGV[5]) == 0 then
  redis.call(ARGV[3], ARGV[2], writer .. '/drained')
else
  tidy_readers(KEYS[2], ARGV[4], ARGV[5])
end
return outcome
