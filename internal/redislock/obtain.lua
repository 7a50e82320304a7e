-- obtain.lua: take the lock if it is free (or already ours) and hand out a fencing token.
-- KEYS[1] lock key     (string: the holder's token, with a TTL)
-- KEYS[2] fence key    (integer: the last fencing token handed out; no TTL)
-- KEYS[3] meta key     (string: holder metadata, same TTL as the lock)
-- ARGV[1] token        ARGV[2] ttl in ms        ARGV[3] metadata
-- Returns {1, fence} when obtained (fresh or re-adopted), {0, pttl} when another token holds it.
--
-- The fencing token is previous + 1 (INCR). A counter that does not exist yet starts from the server
-- clock in microseconds, so tokens keep increasing across a Redis that lost its data (restart
-- without persistence, failover to a lagging replica) as long as the server clock did not step
-- backwards. The clock is read only then, which keeps the common path cheap.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Re-adoption: the caller already holds the lock (e.g. an operator that restarted). Nobody else can
  -- have taken a token since, so the counter still holds ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  end
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  -- A new counter (first use, or Redis lost its data): start from the server clock.
  local t = redis.call('TIME')
  fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
return {1, fence}
