-- undo.lua: remove a lock that a failed acquisition attempt granted afresh, and nothing else.
-- A fresh grant stores the token with its attempt's mark (see holder.lua); a lock that was re-adopted
-- since (by a retry with the same token, or handed off by a release) holds the bare token, so an
-- attempt that gave up cannot remove it from under the caller that holds it.
-- KEYS[1] lock key   KEYS[2] meta key
-- ARGV[1] token      ARGV[2..] ids of the failed attempts
-- Returns 1 when removed, 0 when the lock is not one of those attempts' grants (nothing is touched).
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
for i = 2, #ARGV do
  if value == ARGV[1] .. '\0' .. ARGV[i] then
    redis.call('DEL', KEYS[1], KEYS[2])
    return 1
  end
end
return 0
