-- undo.lua: remove a lock that a failed acquisition attempt granted afresh, and nothing else.
-- A lock that was re-adopted since (by a retry with the same token, or handed over by a release)
-- has lost its grant mark, so an attempt that gave up cannot take it from the caller that holds it.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3] grant key
-- ARGV[1] token      ARGV[2..] ids of the failed attempts
-- Returns 1 when removed, 0 when the lock is not one of those attempts' grants (nothing is touched).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local grant = redis.call('GET', KEYS[3])
if not grant then
  return 0
end
for i = 2, #ARGV do
  if ARGV[i] == grant then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    return 1
  end
end
return 0
