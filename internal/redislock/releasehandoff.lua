-- releasehandoff.lua: release.lua for a lock with a queue: delete the lock only if we still hold
-- it, hand it off to the head of its queue, then tell waiters (see queue.lua, releaseToHead). holder.lua,
-- releasemark.lua, clock.lua and queue.lua come first.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3..6] fence, queue, waiters, tickets
-- ARGV[1] token      ARGV[2] channel to publish on after a release ("" = none)
-- ARGV[3] the release mark's retention in ms   ARGV[4] the caller's fence ('0' = unknown)
-- Publishes handoff's message when the lock went to a waiter, else the lock key.
-- Returns 1 when released, 2 when token had released it under that fence already (the release mark,
-- see holder.lua), 0 when the lock was gone or held by another token (nothing is touched),
-- and the status SEMAPHORE, having changed nothing, when the lock is a semaphore (see acquire.lua):
-- handing slot 0 off here would ignore the other slots and the permits, so the caller asks
-- releaseslot.lua instead (a plain holder holds slot 0). release.lua needs no such check: it hands
-- nothing off, and deletes slot 0 only if it is ours.
if redis.call('EXISTS', KEYS[1] .. ':permits') == 1 then
  return redis.status_reply('SEMAPHORE')
end
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  if releasedBefore(KEYS[1], ARGV[1], ARGV[4]) then
    return 2
  end
  return 0
end
markRelease(KEYS[1], KEYS[3], ARGV[1], ARGV[3])
releaseToHead()
return 1
