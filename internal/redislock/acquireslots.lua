-- acquireslots.lua: acquire one slot of a semaphore (a lock acquired with permits N; see
-- slots.lua), with or without a queue. holder.lua, releasemark.lua, clock.lua, queue.lua and
-- slots.lua come first.
-- KEYS[1..6] lock, meta, fence, queue, waiters, tickets of slot 0 (see queue.lua)
-- KEYS[7] permits (string: the N that SetPermits, the semaphore's one writer, stored; no TTL; its
--         existence makes the lock a semaphore for every caller, see acquire.lua; absent = 1)
-- ARGV[1..4] token, ttl in ms, metadata, attempt id (as in acquire.lua)
-- ARGV[5] waiter ("" = not queued)   ARGV[6] score   ARGV[7] waiter liveness in ms
-- ARGV[8] the caller's N: a free slot is granted under the lower of it and the stored N, and it is
-- never stored (an acquisition that wrote it would make a second writer of N: a caller whose Lock
-- was deleted, or read from a lagging cache, would write back a number nobody declares any more);
-- "0" is the stored N alone (a plain Acquire that a plain script sent here because the lock is a
-- semaphore)
-- ARGV[9] "1": join only (Client.Join): stand in line, but take nothing, not even a free slot
-- ARGV[10], ARGV[11] (optional, not queued) the fence and slot of the acquisition the caller
-- recorded and re-adopts (as ARGV[6] of acquire.lua): {2, fence, 0, slot} when our token released it
-- Returns {1, fence, 0, slot} for a fresh grant, {1, fence, 1, slot} for a re-adoption (our token
-- in any slot: a restarted holder, a late attempt, a slot a release handed to this waiter), and
-- {0, position, holder} when not acquired: position is the waiter's place in the queue (0 when not
-- queued); holder is the metadata of the lowest held slot, or false. Joining, a free slot among
-- those this waiter is entitled to, or a slot that holds our token, answers {0, position, false, 1},
-- and the waiter stays in line.
--
-- A free slot goes to the caller when fewer than N slots are held (all slots count, also those at
-- or above N, which holders keep after N was lowered) and, queued, the caller is among the first
-- N - held live waiters; not queued, when fewer than N - held live waiters stand in the queue, so
-- a caller that does not queue never takes a slot a waiter is entitled to.

if ARGV[10] and releasedBefore(slotKey(tonumber(ARGV[11])), ARGV[1], ARGV[10]) then
  return {2, tonumber(ARGV[10]), 0, tonumber(ARGV[11])}
end

local n = storedPermits()
local asked = tonumber(ARGV[8])
if asked > 0 and asked < n then
  n = asked
end
local values = slotValues()

local function slotMeta(slot)
  if ARGV[3] ~= '' then
    redis.call('SET', slotKey(slot) .. ':meta', ARGV[3], 'PX', ARGV[2])
  end
end

for i = 0, MAX_SLOTS - 1 do
  if holds(values[i + 1], ARGV[1]) then
    if ARGV[9] == '1' then
      return {0, 1, false, 1} -- ours already: the next attempt re-adopts it
    end
    -- As readopt in grant.lua, on slot i: the bare token drops a grant mark.
    redis.call('SET', slotKey(i), ARGV[1], 'PX', ARGV[2])
    slotMeta(i)
    if ARGV[5] ~= '' then
      forget(ARGV[5])
    end
    return {1, tonumber(redis.call('GET', slotKey(i) .. ':fence') or '0'), 1, i}
  end
end

local held = heldCount(values)
local free = nil
if held < n then
  free = lowestFree(values, n) -- exists: fewer than n slots are held in all
  prune()
end

local function holderMeta()
  for i = 0, MAX_SLOTS - 1 do
    if values[i + 1] then
      return redis.call('GET', slotKey(i) .. ':meta')
    end
  end
  return false
end

if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[5])
  redis.call('ZADD', KEYS[5], nowMs() + tonumber(ARGV[7]), ARGV[5])
  writeTicket(ARGV[5], {ttl = ARGV[2], attempt = ARGV[4], token = ARGV[1], metadata = ARGV[3], liveness = ARGV[7]})
  local position = redis.call('ZRANK', KEYS[4], ARGV[5]) + 1
  if not free then
    return {0, position, holderMeta()}
  end
  if position > n - held then
    return {0, position}
  end
  if ARGV[9] == '1' then
    return {0, position, false, 1}
  end
  forget(ARGV[5])
else
  if not free then
    return {0, 0, holderMeta()}
  end
  if redis.call('ZCARD', KEYS[4]) >= n - held then
    return {0, 0}
  end
end

-- As grantFresh in grant.lua, on the free slot: the grant mark lets undoslots.lua remove it.
redis.call('SET', slotKey(free), ARGV[1] .. '\0' .. ARGV[4], 'PX', ARGV[2])
slotMeta(free)
return {1, nextFence(slotKey(free) .. ':fence'), 0, free}
