-- releasehandoff.lua: release.lua for a lock with a queue: delete the lock only if we still hold
-- it, hand it off to the head of its queue, then tell waiters (see queue.lua, releaseToHead). holder.lua,
-- clock.lua and queue.lua come first.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3..6] fence, queue, waiters, tickets
-- ARGV[1] token      ARGV[2] channel to publish on after a release ("" = none)
-- Publishes handoff's message when the lock went to a waiter, else the lock key.
-- Returns 1 when released, 0 when the lock was gone or held by another token (nothing is touched).
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
releaseToHead()
return 1
