-- queue.lua: helpers shared by acquirequeued.lua, releasehandoff.lua and dequeue.lua, the scripts
-- that touch a queue; scripts.go puts this file (after clock.lua) in front of them, so all three
-- read and write the waiter queue the same way. Scripts that never touch a queue run without it:
-- defining these helpers on every call costs measurable Redis time.
--
-- Every script that includes this file receives the lock's keys in one order (keys in keys.go):
--   KEYS[1] lock      KEYS[2] meta      KEYS[3] fence
--   KEYS[4] queue     sorted set: waiter -> score; the head is the lowest score, then the lowest name
--   KEYS[5] waiters   sorted set: waiter -> liveness deadline (ms, server clock); a waiter that stops
--                     asking drops out when its deadline passes
--   KEYS[6] tickets   hash: waiter -> what its last attempt asked for (see writeTicket), so a release
--                     can hand the lock straight to the head (see handoff)

-- forget removes one waiter from the queue entirely.
local function forget(member)
  redis.call('ZREM', KEYS[4], member)
  redis.call('ZREM', KEYS[5], member)
  redis.call('HDEL', KEYS[6], member)
end

-- prune drops the waiters that stopped asking (deleted, or their process died), so they cannot
-- block the queue or be handed a lock nobody will use.
local function prune()
  local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', nowMs())
  for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[4], m)
    redis.call('HDEL', KEYS[6], m)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', nowMs())
  end
end

-- writeTicket and readTicket are the only places that know a ticket's layout.
local function writeTicket(member, t)
  redis.call('HSET', KEYS[6], member, cmsgpack.pack(t.ttl, t.attempt, t.token, t.metadata, t.liveness))
end

local function readTicket(member)
  local packed = redis.call('HGET', KEYS[6], member)
  if not packed then
    return nil
  end
  local ttl, attempt, token, metadata, liveness = cmsgpack.unpack(packed)
  return {ttl = ttl, attempt = attempt, token = token, metadata = metadata, liveness = liveness}
end

-- handoff hands a lock that was just freed to the live waiter at the head of the queue, as if that
-- waiter's last attempt had found it free: its token, its metadata and the next fencing token. The
-- lease is the waiter's ttl, but no longer than what is left of its liveness: a waiter that vanished
-- after asking blocks the lock no longer than it would have blocked the queue. The grant carries no
-- attempt's mark (the bare token, see holder.lua): the waiter claims it as a re-adoption, which
-- nothing undoes. The waiter stays in the liveness set (so its ticket is cleaned up if it never
-- claims the lock) but leaves the queue.
-- Returns the message that tells the waiter, or nil if nobody waits.
-- Message: lock key (KEYS[1]: a semaphore's slots are announced under the lock's name), fence,
-- lease ms, attempt id and waiter, then, for a semaphore slot above 0, the slot, separated by NUL
-- bytes (keys and waiter names cannot contain NUL; see validateKey).
-- lock, meta and fence are the keys of the slot handed off (KEYS[1..3] for a plain lock), slot its
-- number (nil for a plain lock; slots.lua).
local function handoff(lock, meta, fence, slot)
  prune()
  local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if not head then
    return nil
  end
  local t = readTicket(head)
  if not t then
    return nil
  end
  -- prune kept only waiters whose deadline is still ahead, so the lease is at least 1 ms.
  local deadline = redis.call('ZSCORE', KEYS[5], head)
  local alive = deadline and (tonumber(deadline) - nowMs()) or tonumber(t.liveness)
  local lease = math.max(1, math.min(tonumber(t.ttl), tonumber(t.liveness), alive))
  redis.call('SET', lock, t.token, 'PX', lease)
  if t.metadata ~= '' then
    redis.call('SET', meta, t.metadata, 'PX', lease)
  end
  local token = nextFence(fence)
  redis.call('ZREM', KEYS[4], head)
  local message = {KEYS[1], string.format('%.0f', token), lease, t.attempt, head}
  if slot and slot > 0 then
    message[6] = slot
  end
  return table.concat(message, '\0')
end

-- releaseToHead frees the lock and hands it off to the next waiter, then tells the release channel
-- (ARGV[2] in both scripts that release a lock).
local function releaseToHead()
  redis.call('DEL', KEYS[1], KEYS[2])
  local message = handoff(KEYS[1], KEYS[2], KEYS[3]) or KEYS[1]
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], message)
  end
end
