-- releaseslot.lua: release.lua and releasehandoff.lua for one slot of a semaphore: delete the slot
-- only if we still hold it, hand a slot off to the head of the queue (see slotrelease.lua), then
-- tell waiters. holder.lua, releasemark.lua, clock.lua, queue.lua, slots.lua and slotrelease.lua come first.
-- KEYS[1..7] as in acquireslots.lua
-- ARGV[1] token   ARGV[2] channel to publish on after a release ("" = none)   ARGV[3] slot
-- ARGV[4] "1" when the release hands off (the lock was acquired with a queue, on one deployment)
-- ARGV[5] the release mark's retention in ms   ARGV[6] the caller's fence ('0' = unknown)
-- Returns 1 when released, 2 when token had released the slot under that fence already (the
-- release mark, see holder.lua), 0 when the slot was gone or held by another token (nothing is
-- touched).
local slot = tonumber(ARGV[3])
local key = slotKey(slot)
if not holds(redis.call('GET', key), ARGV[1]) then
  if releasedBefore(key, ARGV[1], ARGV[6]) then
    return 2
  end
  return 0
end
markRelease(key, key .. ':fence', ARGV[1], ARGV[5])
freeSlot(slot, ARGV[4] == '1')
return 1
