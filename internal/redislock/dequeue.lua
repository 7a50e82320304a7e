-- dequeue.lua: take a waiter out of a lock's queue (it gave up or was deleted).
-- KEYS[1] queue   KEYS[2] liveness
-- ARGV[1] member
-- Returns the number of entries removed.
return redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[2], ARGV[1])
