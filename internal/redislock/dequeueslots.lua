-- dequeueslots.lua: dequeue.lua for a semaphore: remove a waiter from the queue; if a release had
-- handed it a slot already, release that slot and hand it on. If a slot is free (a lease ran out)
-- and others still wait, hand it to the new head too: nobody announces an expiry. holder.lua,
-- clock.lua, queue.lua, slots.lua and slotrelease.lua come first.
-- KEYS[1..7] as in acquireslots.lua
-- ARGV[1] waiter   ARGV[2] channel to publish on if a slot is released or handed off ("" = none)
-- Returns 1 if the waiter held a handed-off slot and gave it back, else 0.
local ticket = readTicket(ARGV[1])
forget(ARGV[1])
if ticket then
  local values = slotValues()
  for i = 0, MAX_SLOTS - 1 do
    if holds(values[i + 1], ticket.token) then
      freeSlot(i, true)
      return 1
    end
  end
end
if redis.call('ZCARD', KEYS[4]) > 0 then
  local message = handoffSlot(nil)
  if message and ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], message)
  end
end
return 0
