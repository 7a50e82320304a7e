-- pttl.lua: the remaining lease of the lock, only if we still hold it. holder.lua comes first.
-- KEYS[1] lock key
-- ARGV[1] token
-- Returns the PTTL in ms, or -3 when the lock is gone or held by another token.
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return -3
end
return redis.call('PTTL', KEYS[1])
