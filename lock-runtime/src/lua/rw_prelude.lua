-- Shared by the read-write lock's scripts (prepended to each of them): the set of readers.
-- A reader's entry names its share key (ARGV's head .. token .. tail); an entry whose share
-- lapsed (the reader crashed or stopped) is dropped by whoever finds it.

-- How many readers hold a share now (dropping the entries of lapsed ones).
local function live_readers(readers, head, tail)
  local live = 0
  for _, reader in ipairs(redis.call('SMEMBERS', readers)) do
    if redis.call('EXISTS', head .. reader .. tail) == 1 then
      live = live + 1
    else
      redis.call('SREM', readers, reader)
    end
  end
  return live
end

-- Drops the entries of a few lapsed readers, picked at random: the set stays as small as
-- the live readers, however many crashed, without a scan on every call.
local function tidy_readers(readers, head, tail)
  for _, reader in ipairs(redis.call('SRANDMEMBER', readers, 2)) do
    if redis.call('EXISTS', head .. reader .. tail) == 0 then
      redis.call('SREM', readers, reader)
    end
  end
end
