-- obtain_queued.lua: obtain.lua with a fair queue of waiters. Only the waiter at the head of the
-- queue may take a free lock, so waiters are served by score (lower first), then by member name.
-- KEYS[1] lock key   KEYS[2] fence key   KEYS[3] meta key
-- KEYS[4] queue      (sorted set: member -> score)
-- KEYS[5] liveness   (sorted set: member -> ms deadline; a waiter that stops asking drops out)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] metadata
-- ARGV[4] member  ARGV[5] score       ARGV[6] waiter liveness in ms
-- Returns {1, fence, 0} when obtained, {0, pttl, position} when not (position 1 = next in line;
-- pttl -2 when the lock is free but another waiter is ahead).
if redis.replicate_commands then pcall(redis.replicate_commands) end

local t = redis.call('TIME')
local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped asking (deleted, or their operator died) must not block the queue.
local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', nowMs)
for _, m in ipairs(dead) do
  redis.call('ZREM', KEYS[4], m)
end
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', nowMs)
end

local function dequeue()
  redis.call('ZREM', KEYS[4], ARGV[4])
  redis.call('ZREM', KEYS[5], ARGV[4])
end

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  end
  dequeue()
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
end

redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
redis.call('ZADD', KEYS[5], nowMs + tonumber(ARGV[6]), ARGV[4])
local position = redis.call('ZRANK', KEYS[4], ARGV[4]) + 1
if current then
  return {0, redis.call('PTTL', KEYS[1]), position}
end
if position ~= 1 then
  return {0, -2, position}
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
-- Fencing token as in obtain.lua: INCR, and a new counter starts from the server clock.
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
dequeue()
return {1, fence, 0}
