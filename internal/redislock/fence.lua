-- fence.lua: raise the fence counter to at least ARGV[2] while we still hold the lock. holder.lua
-- comes first.
-- Redlock uses it after a quorum acquire: each node hands out its own counter, the lock's token is the
-- highest of them, and writing it back to a majority makes every later quorum (which overlaps this
-- one in at least one node) hand out a higher token. A re-adoption raises the nodes that granted
-- afresh (e.g. one that lost its data) to the token the re-adopting quorum kept.
-- KEYS[1] lock key   KEYS[2] meta key (unused)   KEYS[3] fence key
-- ARGV[1] token      ARGV[2] fencing token to raise the counter to
-- Returns 1 when done, 0 when the lock is no longer ours on this node.
if not holds(redis.call('GET', KEYS[1]), ARGV[1]) then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[3]) or '0')
if tonumber(ARGV[2]) > current then
  redis.call('SET', KEYS[3], ARGV[2])
end
return 1
