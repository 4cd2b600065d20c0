-- A read-write lock's reader takes its share: a key of its own holding its token with a PX
-- expiry (renewed by the watchdog like any lease, so a crashed reader's share lapses at its
-- ttl), listed in the lock's set of readers. The writer is the lock key itself (a mutex),
-- which a writer holds while it waits for the readers to leave and while it writes.
--
-- KEYS[1] lock key (the writer's)
-- KEYS[2] its wait queue
-- KEYS[3] the set of readers (their tokens)
-- KEYS[4] this reader's share key
-- ARGV[1] the reader's token, ARGV[2] its lease (ms)
-- ARGV[3] '' for the quick path: a share only when the lock key is free and nobody queues
--         for it (a reader never passes a queued writer); otherwise the token with which
--         the caller holds the lock key (it waited its turn in the queue, and takes its
--         share before it lets the next waiter in)
-- ARGV[4], ARGV[5] a share key's name around its token (to tidy lapsed readers' entries)
-- Returns 1 with the share taken, 0 when the quick path is closed (the caller queues),
-- -1 when the caller no longer holds the lock key.
if ARGV[3] == '' then
  if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
    return 0
  end
elseif redis.call('GET', KEYS[1]) ~= ARGV[3] then
  return -1
end
tidy_readers(KEYS[3], ARGV[4], ARGV[5])
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
