-- releasedbefore.lua: whether a token released a lock, from the mark its release left.
-- releasemark.lua comes first: it is the one home of the mark's key.
-- KEYS[1] lock key (a semaphore's slot's, for its holder)
-- ARGV[1] token
-- ARGV[2] the fence the token held, decimal
-- Returns 1 when the token released the lock under that fence, else 0.
if releasedBefore(KEYS[1], ARGV[1], ARGV[2]) then
  return 1
end
return 0
