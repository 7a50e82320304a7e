-- setpermits.lua: write a semaphore's N without acquiring it (see Client.SetPermits). slots.lua
-- comes first.
-- KEYS[1..7] as acquireslots.lua (KEYS[7] is permits)
-- ARGV[1] N (1..64)
-- Returns 1 when N was written, 0 when the lock is a plain lock afterwards:
--   - N = 1 on a plain lock writes nothing: the lock would become a semaphore, and every later
--     acquisition would pay for the semaphore's scripts to get what the plain lock gives;
--   - N = 1 on a semaphore whose slots above 0 are all free deletes the permits: with slot 0 alone,
--     the plain scripts grant, renew, release and hand off exactly as the semaphore's would, and
--     the lock is plain again (a deleted Lock leaves no trace in Redis). While a slot above 0 is
--     held, N = 1 is written, so that holder still counts.
if ARGV[1] == '1' then
  if redis.call('EXISTS', KEYS[7]) == 0 then
    return 0
  end
  local values = slotValues()
  local above = false
  for i = 2, MAX_SLOTS do
    if values[i] then
      above = true
      break
    end
  end
  if not above then
    redis.call('DEL', KEYS[7])
    return 0
  end
end
redis.call('SET', KEYS[7], ARGV[1])
return 1
