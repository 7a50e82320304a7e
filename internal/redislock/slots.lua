-- slots.lua: a semaphore's slots, for the scripts of a lock acquired with permits (acquireslots.lua,
-- releaseslot.lua, dequeueslots.lua, inspectslots.lua, undoslots.lua); scripts.go puts this file
-- in front of them.
--
-- A semaphore of N is N locks that share one queue. Slot 0 is the plain lock (KEYS[1], its :meta
-- and :fence), so a lock of one permit is today's lock; slot i >= 1 is KEYS[1] .. ':s' .. i with its
-- own :meta and :fence. All of them carry the hash tag of KEYS[1], so Redis Cluster keeps them in
-- the slot of KEYS[1]: the scripts derive them instead of receiving them, because the client cannot
-- know which slots are held.
--
-- The scripts always look at all MAX_SLOTS slots (one MGET): a holder keeps its slot however often
-- N changed since it acquired, so a slot above today's N may still be held, and it counts.

local MAX_SLOTS = 64

-- storedPermits returns the semaphore's N (KEYS[7], see acquireslots.lua). Anything but a number
-- 1..MAX_SLOTS (absent, or a key someone else wrote) counts as 1: a release must not fail after it
-- freed the slot, and 1 admits and hands off least.
local function storedPermits()
  local permits = tonumber(redis.call('GET', KEYS[7]) or '1') or 1
  if permits < 1 or permits > MAX_SLOTS then
    return 1
  end
  return permits
end

local function slotKey(i)
  if i == 0 then
    return KEYS[1]
  end
  return KEYS[1] .. ':s' .. i
end

-- slotValues returns the values of all slots' lock keys (false where free), index i + 1 for slot i.
local function slotValues()
  local keys = {}
  for i = 0, MAX_SLOTS - 1 do
    keys[i + 1] = slotKey(i)
  end
  return redis.call('MGET', unpack(keys))
end

local function heldCount(values)
  local held = 0
  for i = 1, MAX_SLOTS do
    if values[i] then
      held = held + 1
    end
  end
  return held
end

-- lowestFree returns the lowest free slot below n, or nil.
local function lowestFree(values, n)
  for i = 0, n - 1 do
    if not values[i + 1] then
      return i
    end
  end
  return nil
end
