-- Release a lock only if this owner still holds it (compare-and-delete).
-- KEYS[1] lock key
-- ARGV[1] token
-- Returns 1 released, 0 the key is gone (the lease had expired), -1 another owner holds it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if current then
  return -1
end
return 0
