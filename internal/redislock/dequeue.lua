-- dequeue.lua: remove a waiter from a lock's queue (it gave up or was deleted). If a release had
-- handed it the lock already, release the lock and hand it off to the next waiter: nobody will use it. If the lock is
-- free (its lease ran out) and others still wait, hand it to the new head too: the head would
-- otherwise learn of it only at its next attempt, and nobody announces an expiry. holder.lua,
-- clock.lua and queue.lua come first.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3..6] fence, queue, waiters, tickets
-- ARGV[1] waiter     ARGV[2] channel to publish on if the lock is released ("" = none)
-- ARGV[3] "1" when this deployment hands locks off (one queue; not Redlock)
-- Returns 1 if the waiter held a handed-off lock and gave it back, else 0; the status SEMAPHORE,
-- having changed nothing, when the lock is a semaphore (see acquire.lua): a waiter may hold any
-- slot, and a free slot 0 may not be handed off while the permits are held, so the caller asks
-- dequeueslots.lua instead.
if redis.call('EXISTS', KEYS[1] .. ':permits') == 1 then
  return redis.status_reply('SEMAPHORE')
end
local ticket = readTicket(ARGV[1])
forget(ARGV[1])
local current = redis.call('GET', KEYS[1])
if not current then
  if ARGV[3] == '1' and redis.call('ZCARD', KEYS[4]) > 0 then
    releaseToHead()
  end
  return 0
end
if not ticket or not holds(current, ticket.token) then
  return 0
end
releaseToHead()
return 1
