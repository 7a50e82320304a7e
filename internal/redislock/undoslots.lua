-- undoslots.lua: undo.lua for a semaphore: remove the slot that a failed acquisition attempt
-- granted afresh, whichever it is, and nothing else (see undo.lua). slots.lua comes first.
-- KEYS[1] lock key (slot 0)
-- ARGV[1] token      ARGV[2..] ids of the failed attempts
-- Returns 1 when removed, 0 when no slot is one of those attempts' grants (nothing is touched).
local values = slotValues()
for i = 0, MAX_SLOTS - 1 do
  local value = values[i + 1]
  if value then
    for a = 2, #ARGV do
      if value == ARGV[1] .. '\0' .. ARGV[a] then
        redis.call('DEL', slotKey(i), slotKey(i) .. ':meta')
        return 1
      end
    end
  end
end
return 0
