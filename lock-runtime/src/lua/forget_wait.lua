-- Removes a holding task's deadlock record of one wait (deadlock/chain.rs), only while it
-- is that wait's: a later wait of the same task writes the same field (the token that
-- holds the key), and this removal, sent in the background when the earlier wait ended,
-- may reach the server after that write.
-- KEYS[1] the hash `~lock/waits{KEY}`
-- ARGV[1] the field (the token that holds KEY), ARGV[2] the record the ended wait wrote
-- Returns 1 when the record was removed, 0 when the field holds another wait's (or none).
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
