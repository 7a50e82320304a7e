-- dequeue.lua: take a waiter out of a lock's queue (it gave up or was deleted). If a release had
-- handed it the lock already, give the lock back and hand it on: nobody will use it. clock.lua and
-- queue.lua come first.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3..6] fence, queue, waiters, tickets
-- ARGV[1] waiter     ARGV[2] channel to publish on if the lock is released ("" = none)
-- Returns 1 if the waiter held a handed-over lock and gave it back, else 0.
local ticket = redis.call('HGET', KEYS[6], ARGV[1])
forget(KEYS[4], KEYS[5], KEYS[6], ARGV[1])
if not ticket then
  return 0
end
local _, _, token = cmsgpack.unpack(ticket)
if redis.call('GET', KEYS[1]) ~= token then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
local message = handoff(KEYS[1], KEYS[3], KEYS[2], KEYS[4], KEYS[5], KEYS[6]) or KEYS[1]
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], message)
end
return 1
