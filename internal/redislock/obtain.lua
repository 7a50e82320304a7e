-- obtain.lua: take the lock if it is free (or already ours) and hand out a fencing token; with a
-- queue, only the waiter at the head of the queue may take a free lock.
-- KEYS[1] lock key     (string: the holder's token, with a TTL)
-- KEYS[2] fence key    (integer: the last fencing token handed out; no TTL)
-- KEYS[3] meta key     (string: holder metadata, same TTL as the lock)
-- KEYS[4] queue        (optional sorted set: waiter -> score; served lowest score, then name)
-- KEYS[5] liveness     (optional sorted set: waiter -> ms deadline; a waiter that stops asking drops out)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] metadata ("" = none)
-- ARGV[4] waiter  ARGV[5] score       ARGV[6] waiter liveness in ms   (with a queue)
-- Returns {1, fence, 0} when obtained (fresh or re-adopted), {0, pttl, position, holder} when not
-- (position 0 without a queue; holder is the holder's metadata or false; pttl -2 and no holder when
-- the lock is free but another waiter is ahead). Waiters learn who blocks them without a second call.
--
-- The fencing token is previous + 1 (INCR). A counter that does not exist yet starts from the server
-- clock in microseconds, so tokens keep increasing across a Redis that lost its data (restart
-- without persistence, failover to a lagging replica) as long as the server clock did not step
-- backwards. The clock is read only then, or for the queue, which keeps the common path cheap.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local queued = #KEYS == 5
local clock
local function now()
  clock = clock or redis.call('TIME')
  return clock
end

local function dequeue()
  if queued then
    redis.call('ZREM', KEYS[4], ARGV[4])
    redis.call('ZREM', KEYS[5], ARGV[4])
  end
end

local function setMeta()
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  end
end

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Re-adoption: the caller already holds the lock (e.g. an operator that restarted). Nobody else can
  -- have taken a token since, so the counter still holds ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  setMeta()
  dequeue()
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
end

local position = 0
if queued then
  local t = now()
  local nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- Waiters that stopped asking (deleted, or their operator died) must not block the queue.
  local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', nowMs)
  for _, m in ipairs(dead) do
    redis.call('ZREM', KEYS[4], m)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', nowMs)
  end
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
  redis.call('ZADD', KEYS[5], nowMs + tonumber(ARGV[6]), ARGV[4])
  position = redis.call('ZRANK', KEYS[4], ARGV[4]) + 1
end
if current then
  return {0, redis.call('PTTL', KEYS[1]), position, redis.call('GET', KEYS[3])}
end
if position > 1 then
  return {0, -2, position}
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
setMeta()
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  -- A new counter (first use, or Redis lost its data): start from the server clock.
  local t = now()
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
dequeue()
return {1, fence, 0}
