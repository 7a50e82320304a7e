-- acquire.lua: acquire the lock if it is free (or already ours) and hand out a fencing token; with a
-- queue, only the waiter at the head of the queue may take a free lock. holder.lua and clock.lua
-- come first, and queue.lua too when queued.
-- KEYS[1] lock key     (string: the holder's token, marked by the attempt on a fresh grant (see
--                      holder.lua), with a TTL)
-- KEYS[2] meta key     (string: holder metadata, same TTL as the lock)
-- KEYS[3] fence key    (integer: the last fencing token handed out; no TTL)
-- KEYS[4..6] queue, waiters, tickets (optional; see queue.lua)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] metadata ("" = none)   ARGV[4] attempt id
-- ARGV[5] waiter  ARGV[6] score       ARGV[7] waiter liveness in ms (with a queue)
-- Returns {1, fence, 0} for a fresh grant, {1, fence, 1} for a re-adoption (the lock already held
-- our token: a restarted holder, an earlier attempt applied late, or a handoff), and
-- {0, position, holder} when not acquired: position is 0 without a queue; holder is the holder's
-- metadata, or false when the holder stored none or the lock is free but another waiter is ahead.
-- Waiters learn who blocks them without a second call.
local queued = #KEYS == 6

local function setMeta()
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  end
end

local function dequeue()
  if queued then
    forget(ARGV[5])
  end
end

-- take finishes a fresh grant. The lock value carries this attempt's mark (token NUL attempt id,
-- see holder.lua), so undoing a failed attempt removes only what it created (undo.lua).
local function take()
  setMeta()
  local fence = nextFence(KEYS[3])
  dequeue()
  return {1, fence, 0}
end

-- The common case first: a free lock and no queue.
if not queued and redis.call('SET', KEYS[1], ARGV[1] .. '\0' .. ARGV[4], 'NX', 'PX', ARGV[2]) then
  return take()
end

local current = redis.call('GET', KEYS[1])
if holds(current, ARGV[1]) then
  -- Re-adoption. Nobody else can have taken a token since, so the counter holds ours. Writing the
  -- bare token drops any grant mark, which makes the lock nobody's to undo: an earlier attempt that
  -- failed cannot take it away from the caller that now holds it.
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  setMeta()
  dequeue()
  return {1, tonumber(redis.call('GET', KEYS[3]) or '0'), 1}
end

local position = 0
if queued then
  if not current then
    -- Only a free lock needs an exact head; a held one is pruned when it is released.
    prune()
  end
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[5])
  redis.call('ZADD', KEYS[5], nowMs() + tonumber(ARGV[7]), ARGV[5])
  writeTicket(ARGV[5], {ttl = ARGV[2], attempt = ARGV[4], token = ARGV[1], metadata = ARGV[3], liveness = ARGV[7]})
  position = redis.call('ZRANK', KEYS[4], ARGV[5]) + 1
end
if current then
  return {0, position, redis.call('GET', KEYS[2])}
end
if position > 1 then
  return {0, position}
end

redis.call('SET', KEYS[1], ARGV[1] .. '\0' .. ARGV[4], 'PX', ARGV[2])
return take()
