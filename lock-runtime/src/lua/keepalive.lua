-- A process keeps its waiters' places in a key's queue: each named waiter still queued gets
-- a new deadline, a queue lease from now. Sent by the watchdog a few times per lease, so a
-- waiter whose process dies or stops loses its place within one queue lease.
-- KEYS[1] wait queue, KEYS[2] queue deadlines, KEYS[3] queue ttls
-- ARGV[1] queue lease in milliseconds, ARGV[2..] the waiters' tokens
-- Returns how many of them were still queued.
local lease = tonumber(ARGV[1])
local now_ms = server_time()
local kept = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[2], 'XX', now_ms + lease, ARGV[i])
    kept = kept + 1
  end
end
if kept > 0 then
  keep_queue(KEYS[1], KEYS[2], KEYS[3], lease)
end
return kept
