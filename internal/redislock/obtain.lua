-- obtain.lua: take the lock if it is free (or already ours) and hand out a fencing token; with a
-- queue, only the waiter at the head of the queue may take a free lock. clock.lua comes first, and
-- queue.lua too when queued.
-- KEYS[1] lock key     (string: the holder's token, with a TTL)
-- KEYS[2] meta key     (string: holder metadata, same TTL as the lock)
-- KEYS[3] fence key    (integer: the last fencing token handed out; no TTL)
-- KEYS[4..6] queue, waiters, tickets (optional; see queue.lua)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] metadata ("" = none)
-- ARGV[4] waiter  ARGV[5] score       ARGV[6] waiter liveness in ms   ARGV[7] attempt id (with a queue)
-- Returns {1, fence} when obtained (fresh, re-adopted, or handed over by a release), and
-- {0, position, holder} when not: position is 0 without a queue; holder is the holder's metadata,
-- or false when the holder stored none or the lock is free but another waiter is ahead. Waiters
-- learn who blocks them without a second call.
local queued = #KEYS == 6

local function setMeta()
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  end
end

local function dequeue()
  if queued then
    forget(ARGV[4])
  end
end

local function take()
  setMeta()
  local fence = nextFence(KEYS[3])
  dequeue()
  return {1, fence}
end

-- The common case first: a free lock and no queue costs one SET and one INCR.
if not queued and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return take()
end

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Re-adoption: the caller already holds the lock (an operator that restarted, or a waiter that a
  -- release handed it to). Nobody else can have taken a token since, so the counter holds ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  setMeta()
  dequeue()
  return {1, tonumber(redis.call('GET', KEYS[3]) or '0')}
end

local position = 0
if queued then
  if not current then
    -- Only a free lock needs an exact head; a held one is pruned when it is released.
    prune()
  end
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
  redis.call('ZADD', KEYS[5], nowMs() + tonumber(ARGV[6]), ARGV[4])
  writeTicket(ARGV[4], {ttl = ARGV[2], attempt = ARGV[7], token = ARGV[1], metadata = ARGV[3], liveness = ARGV[6]})
  position = redis.call('ZRANK', KEYS[4], ARGV[4]) + 1
end
if current then
  return {0, position, redis.call('GET', KEYS[2])}
end
if position > 1 then
  return {0, position}
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return take()
