-- clock.lua: the server clock and the fence counter, for every script that may hand out a fencing
-- token (obtain.lua, and through queue.lua's handoff, release.lua and dequeue.lua); scripts.go puts
-- this file in front of them.

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

-- nextFence hands out the next fencing token: previous + 1. A counter that does not exist yet (first
-- use, or Redis lost its data) starts from the server clock in microseconds, so tokens keep growing
-- across a Redis that lost its data as long as its clock did not step backwards.
local function nextFence(fenceKey)
  local fence = redis.call('INCR', fenceKey)
  if fence == 1 then
    local t = now()
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    -- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
    redis.call('SET', fenceKey, string.format('%.0f', fence))
  end
  return fence
end
