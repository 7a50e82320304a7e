-- setpermits.lua: write a semaphore's N without acquiring it (see Client.SetPermits).
-- KEYS[1] permits (see acquireslots.lua)
-- ARGV[1] N (1..64)
-- Returns 1 when written, 0 when N is 1 and the lock is not a semaphore: writing it would make the
-- lock one, and every later acquisition would pay for the semaphore's scripts to get what the plain
-- lock gives.
if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
