-- acquirequeued.lua: acquire.lua for a waiter in the lock's queue: only the waiter at the head of
-- the queue may acquire a free lock, and a waiter that is not acquired stands in line. holder.lua,
-- clock.lua, queue.lua and grant.lua come first.
-- KEYS[1..3] lock, meta, fence (see acquire.lua)   KEYS[4..6] queue, waiters, tickets (see queue.lua)
-- ARGV[1..4] as in acquire.lua
-- ARGV[5] waiter  ARGV[6] score       ARGV[7] waiter liveness in ms
-- ARGV[8] "1": join only (Client.Join): stand in line, but take nothing, not even a free lock
-- ARGV[9] (Redlock only) the least fencing token to hand out, as in acquire.lua
-- Returns {1, fence, 0} for a fresh grant, {1, fence, 1} for a re-adoption (as acquire.lua; a
-- lock a release handed to this waiter is one), and {0, position, holder} when not acquired:
-- position is the waiter's place in the queue; holder is the holder's metadata, or false when the
-- holder stored none or the lock is free but another waiter is ahead. Joining, a free lock whose next
-- grant is this waiter's, or one that holds our token (handed to this waiter), answers {0, 1, false,
-- 1}: the waiter stays at the head for its next attempt, which takes the lock (no release will hand
-- over a lock nobody holds) or re-adopts it. Returns the status SEMAPHORE,
-- having changed nothing, when the lock is a semaphore (see acquire.lua).
if redis.call('EXISTS', KEYS[1] .. ':permits') == 1 then
  return redis.status_reply('SEMAPHORE')
end
local current = redis.call('GET', KEYS[1])
if holds(current, ARGV[1]) then
  if ARGV[8] == '1' then
    return {0, 1, false, 1} -- ours already (handed to this waiter): the next attempt re-adopts it
  end
  forget(ARGV[5])
  return readopt()
end

if not current then
  -- Only a free lock needs an exact head; a held one is pruned when it is released.
  prune()
end
redis.call('ZADD', KEYS[4], ARGV[6], ARGV[5])
redis.call('ZADD', KEYS[5], nowMs() + tonumber(ARGV[7]), ARGV[5])
writeTicket(ARGV[5], {ttl = ARGV[2], attempt = ARGV[4], token = ARGV[1], metadata = ARGV[3], liveness = ARGV[7]})
local position = redis.call('ZRANK', KEYS[4], ARGV[5]) + 1
if current then
  return {0, position, redis.call('GET', KEYS[2])}
end
if position > 1 then
  return {0, position}
end
if ARGV[8] == '1' then
  return {0, 1, false, 1}
end

redis.call('SET', KEYS[1], ARGV[1] .. '\0' .. ARGV[4], 'PX', ARGV[2])
forget(ARGV[5])
return grantFresh(ARGV[9])
