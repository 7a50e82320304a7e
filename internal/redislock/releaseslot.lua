-- releaseslot.lua: release.lua and releasehandoff.lua for one slot of a semaphore: delete the slot
-- only if we still hold it, hand a slot off to the head of the queue (see slotrelease.lua), then
-- tell waiters. holder.lua, clock.lua, queue.lua, slots.lua and slotrelease.lua come first.
-- KEYS[1..7] as in acquireslots.lua
-- ARGV[1] token   ARGV[2] channel to publish on after a release ("" = none)   ARGV[3] slot
-- ARGV[4] "1" when the release hands off (the lock was acquired with a queue, on one deployment)
-- Returns 1 when released, 0 when the slot was gone or held by another token (nothing is touched).
local slot = tonumber(ARGV[3])
if not holds(redis.call('GET', slotKey(slot)), ARGV[1]) then
  return 0
end
freeSlot(slot, ARGV[4] == '1')
return 1
