-- inspectslots.lua: inspect.lua for every slot of a semaphore below ARGV[1], in one atomic step,
-- without revealing a holder's token. slots.lua comes first.
-- KEYS[1] lock key (slot 0)   ARGV[1] number of slots to read (1..64)
-- Returns, per slot from 0, pttl (-2 when free), metadata or false, last fencing token or false.
local reply = {}
for i = 0, tonumber(ARGV[1]) - 1 do
  local key = slotKey(i)
  reply[#reply + 1] = redis.call('PTTL', key)
  reply[#reply + 1] = redis.call('GET', key .. ':meta')
  reply[#reply + 1] = redis.call('GET', key .. ':fence')
end
return reply
