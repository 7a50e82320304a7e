-- keepqueued.lua: push back the liveness deadline of waiters that still stand in a lock's queue, so
-- a waiter whose process keeps it alive (see Client.KeepQueued) stays queued without asking for the
-- lock again. clock.lua comes first.
-- KEYS[1] queue   KEYS[2] waiters   (see queue.lua)
-- ARGV[1] liveness in ms   ARGV[2..] waiters
-- Returns the waiters that are not in the queue (any more): they left, were handed the lock, or
-- dropped out because nobody kept them; only asking again puts them back.
local deadline = nowMs() + tonumber(ARGV[1])
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[2], deadline, ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
return gone
