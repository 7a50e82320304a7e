-- obtain.lua: take the lock if it is free (or already ours) and hand out a fencing token.
-- KEYS[1] lock key     (string: the holder's token, with a TTL)
-- KEYS[2] fence key    (integer: the last fencing token handed out; no TTL)
-- KEYS[3] meta key     (string: holder metadata, same TTL as the lock)
-- ARGV[1] token        ARGV[2] ttl in ms        ARGV[3] metadata
-- Returns {1, fence} when obtained (fresh or re-adopted), {0, pttl} when another token holds it.
--
-- The fencing token is max(previous + 1, server clock in microseconds). The clock term keeps tokens
-- increasing across a Redis that lost its data (restart without persistence, failover to a lagging
-- replica) as long as the server clock did not step backwards; the +1 term keeps them strictly
-- increasing within one server lifetime even if it did.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Re-adoption: the caller already holds the lock (e.g. an operator that restarted). Nobody else can
  -- have taken a token since, so the counter still holds ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = (tonumber(redis.call('GET', KEYS[2]) or '0')) + 1
if now > fence then fence = now end
-- Lua 5.1 turns numbers into strings with %.14g, which would round a 16-digit token.
redis.call('SET', KEYS[2], string.format('%.0f', fence))
return {1, fence}
