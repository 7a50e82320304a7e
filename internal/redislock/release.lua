-- release.lua: delete the lock only if we still hold it (compare-and-DEL), then tell waiters.
-- holder.lua and releasemark.lua come first. releasehandoff.lua does it for a lock with a queue.
-- KEYS[1] lock key   KEYS[2] meta key (the fence key, which the mark reads, is derived from KEYS[1]
-- in the same hash slot, as acquire.lua derives :permits: a third key would cost every release a
-- boxed argument)
-- ARGV[1] token      ARGV[2] channel to publish the lock key on after a release ("" = none)
-- ARGV[3] the release mark's retention in ms ('0' = no mark)   ARGV[4] the caller's fence ('0' = unknown)
-- Returns 1 when released, 2 when token had released it under that fence already (the release
-- mark, see holder.lua), 0 when the lock was gone or held by another token (nothing is touched).
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  if releasedBefore(KEYS[1], ARGV[1], ARGV[4]) then
    return 2
  end
  return 0
end
markRelease(KEYS[1], KEYS[1] .. ':fence', ARGV[1], ARGV[3])
redis.call('DEL', KEYS[1], KEYS[2])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
