-- Write a value under a fencing token: accepted only when the token is at least the highest the
-- store has seen, so a holder that lost its lock (and so carries a lower token than whoever holds
-- it now) can never overwrite a newer holder's data, however late its write arrives.
--
-- KEYS[1] highest token seen   KEYS[2] the value   KEYS[3] history stream
-- ARGV[1] token (canonical decimal: no sign, no leading zero)   ARGV[2] writer   ARGV[3] value
-- ARGV[4] history length kept
-- Returns {1, token} when accepted, {0, highest} when refused.

-- Decimal strings compare as numbers by length first, then digit by digit; this stays exact for
-- every int64, where Lua's doubles would not past 2^53.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local token, writer, value = ARGV[1], ARGV[2], ARGV[3]
local highest = redis.call('GET', KEYS[1])
if highest and less(token, highest) then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*',
    'result', 'refused', 'token', token, 'writer', writer, 'highest', highest)
  return {0, highest}
end
redis.call('SET', KEYS[1], token)
redis.call('SET', KEYS[2], value)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*',
  'result', 'accepted', 'token', token, 'writer', writer, 'value', value)
return {1, token}
