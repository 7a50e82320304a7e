-- slotrelease.lua: what a semaphore does with a freed slot, for releaseslot.lua and dequeueslots.lua;
-- scripts.go puts it after holder.lua, clock.lua, queue.lua and slots.lua.
-- KEYS[1..6] as in queue.lua   KEYS[7] permits (see acquireslots.lua; absent = 1)

-- handoffSlot hands a free slot to the head of the queue, as handoff does for a plain lock, but only
-- while fewer than the stored permits are held: after N was lowered, releases drain the slots
-- down to the new N before anyone else gets one, and nobody is preempted. The slot handed off is
-- prefer (the slot just freed) when it is below the permits, else the lowest free slot below them.
-- Returns handoff's message, or nil when nobody waits or no slot may be handed off.
local function handoffSlot(prefer)
  local permits = storedPermits()
  local values = slotValues()
  if heldCount(values) >= permits then
    return nil
  end
  local slot = prefer
  if not slot or slot >= permits then
    slot = lowestFree(values, permits)
  end
  local key = slotKey(slot)
  return handoff(key, key .. ':meta', key .. ':fence', slot)
end

-- freeSlot releases slot, hands a slot off when handsOff is true, and tells the release channel
-- (ARGV[2]): handoff's message, or the lock's name when nothing was handed off.
local function freeSlot(slot, handsOff)
  local key = slotKey(slot)
  redis.call('DEL', key, key .. ':meta')
  local message
  if handsOff then
    message = handoffSlot(slot)
  end
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], message or KEYS[1])
  end
end
