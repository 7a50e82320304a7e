-- releasemark.lua: the release mark, for the scripts that release a lock by its token (release.lua,
-- releasehandoff.lua, releaseslot.lua); scripts.go puts it after holder.lua.
--
-- A release that deletes a lock (a semaphore's slot) by its token leaves
-- <lock key>:released:<sha1 of the token> holding the fence it released, for a retention. A holder
-- that released and lost its memory of it (a crash before it recorded the release, a reply lost on
-- the way back) asks again and finds the lock not its own; the mark tells that from a lease that ran
-- out, since only the token's holder can have written it. The key shares the lock's hash tag.

-- markRelease leaves the mark of token's release of lockKey, whose fence key is fenceKey: call it
-- before anything hands the lock on (a handoff writes the next fence there). retention is in ms as
-- a decimal string; '0' leaves no mark (Redlock: a node's counter is not the quorum's fence).
local function markRelease(lockKey, fenceKey, token, retention)
  if retention == '0' then
    return
  end
  local fence = redis.call('GET', fenceKey)
  if fence then
    redis.call('SET', lockKey .. ':released:' .. redis.sha1hex(token), fence, 'PX', retention)
  end
end

-- releasedBefore reports whether token released lockKey while it held fence (a decimal string; '0'
-- when the caller does not know its fence, which matches nothing).
local function releasedBefore(lockKey, token, fence)
  return fence ~= '0' and redis.call('GET', lockKey .. ':released:' .. redis.sha1hex(token)) == fence
end
