-- release.lua: delete the lock only if we still hold it (compare-and-DEL), then tell waiters.
-- holder.lua comes first. releasehandoff.lua does it for a lock with a queue.
-- KEYS[1] lock key   KEYS[2] meta key
-- ARGV[1] token      ARGV[2] channel to publish the lock key on after a release ("" = none)
-- Returns 1 when released, 0 when the lock was gone or held by another token (nothing is touched).
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
