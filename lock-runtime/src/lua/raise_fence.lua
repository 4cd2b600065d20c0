-- Redlock with fencing: raises a master's fence counter to the token the holder took (the
-- largest fence of the masters that granted it), while the holder's token still holds the
-- key there. Any later grant on this master then issues a greater fence; as the holder
-- raises a majority and any later holder is granted by a majority, which share a master,
-- the next holder's token is greater.
-- KEYS[1] lock key, KEYS[2] fence counter
-- ARGV[1] the holder's token, ARGV[2] its fencing token, ARGV[3] the counter's lifetime (ms)
-- Returns 1 when raised (or already as high), 0 when the token no longer holds the key.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = tonumber(ARGV[2])
redis.call('SET', KEYS[2], string.format('%.0f', math.max(last, fence)), 'PX', ARGV[3])
return 1
