-- queue.lua: helpers shared by obtain.lua, release.lua and dequeue.lua when they touch a queue;
-- scripts.go puts this file (after clock.lua) in front of them, so all three read and write the
-- waiter queue the same way. Scripts that never touch a queue run without it: defining these
-- helpers on every call costs measurable Redis time.
--
-- A lock's queue is three keys beside it (same hash tag):
--   queue    sorted set: waiter -> score; the head is the lowest score, then the lowest name
--   waiters  sorted set: waiter -> liveness deadline (ms, server clock); a waiter that stops asking
--            drops out when its deadline passes
--   tickets  hash: waiter -> what its last attempt asked for, msgpack(ttl ms, attempt id, token,
--            metadata, liveness ms), so a release can hand the lock straight to the head (see handoff)

-- forget takes one waiter out of the queue entirely.
local function forget(queue, waiters, tickets, member)
  redis.call('ZREM', queue, member)
  redis.call('ZREM', waiters, member)
  redis.call('HDEL', tickets, member)
end

-- prune drops the waiters that stopped asking (deleted, or their process died), so they cannot
-- block the queue or be handed a lock nobody will use.
local function prune(queue, waiters, tickets)
  local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', nowMs())
  for _, m in ipairs(dead) do
    redis.call('ZREM', queue, m)
    redis.call('HDEL', tickets, m)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', nowMs())
  end
end

-- handoff gives a lock that was just freed to the live waiter at the head of the queue, as if that
-- waiter's last attempt had found it free: its token, its metadata and the next fencing token. The
-- lease is the waiter's ttl, but no longer than its liveness: a waiter that vanished right after
-- asking blocks the lock no longer than it would have blocked the queue. The waiter stays in the
-- liveness set (so its ticket is cleaned up if it never claims the lock) but leaves the queue.
-- Returns the message that tells the waiter, or nil if nobody waits.
-- Message: lock key, fence, lease ms, attempt id and waiter, separated by NUL bytes (keys and
-- waiter names cannot contain NUL; see validateKey).
local function handoff(lock, fenceKey, meta, queue, waiters, tickets)
  prune(queue, waiters, tickets)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head then
    return nil
  end
  local ticket = redis.call('HGET', tickets, head)
  if not ticket then
    return nil
  end
  local ttl, attempt, token, metadata, liveness = cmsgpack.unpack(ticket)
  local lease = math.min(tonumber(ttl), tonumber(liveness))
  redis.call('SET', lock, token, 'PX', lease)
  if metadata ~= '' then
    redis.call('SET', meta, metadata, 'PX', lease)
  end
  local fence = nextFence(fenceKey)
  redis.call('ZREM', queue, head)
  return table.concat({lock, string.format('%.0f', fence), lease, attempt, head}, '\0')
end
