-- grant.lua: how an acquisition ends when this node gives the lock to the caller, for acquire.lua
-- and acquirequeued.lua; scripts.go puts it after holder.lua and clock.lua (and queue.lua).
-- KEYS and ARGV as in acquire.lua.

local function setMeta()
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  end
end

-- grantFresh finishes a fresh grant, once the caller wrote the lock with this attempt's mark (token
-- NUL attempt id, see holder.lua), so undoing a failed attempt removes only what it created
-- (undo.lua). floor is the token the caller proposed, or nil (see nextFence).
local function grantFresh(floor)
  setMeta()
  return {1, nextFence(KEYS[3], floor), 0}
end

-- readopt renews a lock that already holds the caller's token. Nobody else can have been handed a
-- token since, so the counter holds ours. Writing the bare token drops any grant mark, which makes
-- the lock nobody's to undo: an earlier attempt that failed cannot remove it from under the caller
-- that now holds it.
local function readopt()
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  setMeta()
  return {1, tonumber(redis.call('GET', KEYS[3]) or '0'), 1}
end
