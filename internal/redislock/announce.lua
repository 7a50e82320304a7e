-- announce.lua: record one client of this Redis and the lock protocol it speaks, and report the
-- live ones that speak an older protocol (see Client.Announce). clock.lua comes first.
-- KEYS[1] the announcements (hash: field member, value "<protocol> <expiry in ms, server clock>")
-- ARGV[1] member   ARGV[2] protocol   ARGV[3] lease in ms
-- Returns a flat list {member, protocol, ...} of the live announcements below ARGV[2]; a value that
-- does not parse counts as protocol 0 (someone else wrote it: trust it least). Expired ones are
-- deleted.
local now = nowMs()
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[3])))
local mine = tonumber(ARGV[2])
local behind = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local protocol, expiry = string.match(all[i + 1], '^(%d+) (%d+)$')
  protocol, expiry = tonumber(protocol), tonumber(expiry)
  if expiry and expiry <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif not protocol or protocol < mine then
    behind[#behind + 1] = all[i]
    behind[#behind + 1] = protocol or 0
  end
end
return behind
