-- renew.lua: extend the lock only if we still hold it (compare-and-PEXPIRE). holder.lua comes
-- first.
-- KEYS[1] lock key   KEYS[2] meta key
-- ARGV[1] token      ARGV[2] ttl in ms
-- Returns 1 when extended, 0 when the lock is gone or held by another token.
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
