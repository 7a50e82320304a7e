-- clock.lua: the server clock and the fence counter, for every script that may hand out a fencing
-- token (acquire.lua, acquirequeued.lua, and through queue.lua's handoff releasehandoff.lua and
-- dequeue.lua); scripts.go puts this file in front of them.

-- Effects replication (the default since Redis 5) lets scripts read TIME before they write.
if redis.replicate_commands then pcall(redis.replicate_commands) end

-- The server clock, read at most once per script.
local clock
local function now()
  clock = clock or redis.call('TIME')
  return clock
end

local function nowMs()
  local t = now()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- nextFence hands out the next fencing token: max(previous + 1, server clock in microseconds), a
-- hybrid logical clock. The counter alone would repeat a token after a failover to a replica that
-- missed the last write, or after a restart that lost the data; the clock term makes the token rise
-- anyway, as long as the new server's clock is not behind the old one by more than the time the
-- failover took. Lua numbers are doubles, exact for integers below 2^53 (µs until the year 2255).
--
-- floor, when given, is a token the caller proposes (a canonical decimal string, see
-- Client.proposeFence): the token is at least that. A Redlock client proposes the same floor to
-- every node, so that nodes whose clocks and counters are behind it hand out the same token and
-- the client need not write the highest one back to them (see settleFence).
local function nextFence(fenceKey, floor)
  local t = now()
  -- The clock in µs as a decimal string: seconds, then the µs zero-padded to six digits. Joining
  -- strings costs a fraction of string.format, and the number is exact (below 2^53).
  local value = t[1] .. string.sub('00000' .. t[2], -6)
  local fence = tonumber(value)
  local proposed = floor and tonumber(floor)
  if proposed and proposed > fence then
    fence, value = proposed, floor
  end
  -- Write the larger of clock and floor and read the counter in one call, then correct the rare
  -- case where the counter is ahead (more than one token per µs, or a clock that went back): the
  -- script is atomic, so nobody sees the value in between. GETSET rather than SET ... GET, which a
  -- Redis before 6.2 would refuse after the lock was already written.
  local previous = redis.call('GETSET', fenceKey, value)
  if previous then
    local counter = tonumber(previous) + 1
    if counter > fence then
      -- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
      redis.call('SET', fenceKey, string.format('%.0f', counter))
      return counter
    end
  end
  return fence
end
