-- acquire.lua: acquire the lock if it is free (or already ours) and hand out a fencing token.
-- holder.lua, releasemark.lua, clock.lua and grant.lua come first. acquirequeued.lua does the same for a waiter in a
-- queue.
-- KEYS[1] lock key     (string: the holder's token, marked by the attempt on a fresh grant (see
--                      holder.lua), with a TTL)
-- KEYS[2] meta key     (string: holder metadata, same TTL as the lock)
-- KEYS[3] fence key    (integer: the last fencing token handed out; no TTL)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] metadata ("" = none)   ARGV[4] attempt id
-- ARGV[5] (Redlock only) the least fencing token to hand out, the client's proposal (see clock.lua)
-- ARGV[6] (optional, one deployment, then ARGV[5] is "") the fence of the acquisition the caller
-- recorded and re-adopts (Client: WithRecordedFence)
-- Returns {1, fence, 0} for a fresh grant, {1, fence, 1} for a re-adoption (the lock already held
-- our token: a restarted holder, or an earlier attempt applied late), and {0, 0, holder} when not
-- acquired: holder is the holder's metadata, or false when the holder stored none. Waiters learn
-- who blocks them without a second call. Returns the status SEMAPHORE, having changed nothing, when
-- the lock is a semaphore (its :permits key exists, see slots.lua): slot 0 is this very key, and
-- granting it here would ignore the other slots, so the caller asks acquireslots.lua instead.
-- Returns {2, fence, 0}, having changed nothing, when our token released the recorded acquisition
-- under ARGV[6] (the release mark, see releasemark.lua): it is over, whoever holds the lock now, and
-- a free lock is not taken afresh for a caller that only meant to continue it.

if redis.call('EXISTS', KEYS[1] .. ':permits') == 1 then
  return redis.status_reply('SEMAPHORE')
end
if ARGV[6] and releasedBefore(KEYS[1], ARGV[1], ARGV[6]) then
  return {2, tonumber(ARGV[6]), 0}
end
-- The common case first: a free lock.
if redis.call('SET', KEYS[1], ARGV[1] .. '\0' .. ARGV[4], 'NX', 'PX', ARGV[2]) then
  return grantFresh(ARGV[5])
end
if holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return readopt()
end
return {0, 0, redis.call('GET', KEYS[2])}
