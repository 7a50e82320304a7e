-- release.lua: delete the lock only if we still hold it (compare-and-DEL), hand it to the head of
-- its queue if asked to, then tell waiters. holder.lua comes first; with six keys (a handoff)
-- clock.lua and queue.lua too.
-- KEYS[1] lock key   KEYS[2] meta key
-- KEYS[3..6] fence, queue, waiters, tickets (optional: hand off)
-- ARGV[1] token      ARGV[2] channel to publish on after a release ("" = none)
-- Publishes the lock key, or handoff's message when the lock went to a waiter.
-- Returns 1 when released, 0 when the lock was gone or held by another token (nothing is touched).
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
if #KEYS == 6 then
  handOn()
  return 1
end
redis.call('DEL', KEYS[1], KEYS[2])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
end
return 1
