-- queuestate.lua: how many waiters stand live in a lock's queue and who is at its head, for a view
-- of the lock from outside (see Client.QueueState). clock.lua comes first. Read only: waiters whose
-- liveness ran out are skipped, not pruned.
-- KEYS[1] queue   KEYS[2] waiters   (see queue.lua)
-- Returns {live waiters, head member or false}.
local now = nowMs()
local live = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local head = false
if live > 0 then
  -- The dead sit anywhere in the queue; scan in pages until the first live one.
  local from = 0
  while not head do
    local page = redis.call('ZRANGE', KEYS[1], from, from + 31)
    if #page == 0 then
      break
    end
    for _, m in ipairs(page) do
      local deadline = redis.call('ZSCORE', KEYS[2], m)
      if deadline and tonumber(deadline) > now then
        head = m
        break
      end
    end
    from = from + 32
  end
end
return {live, head}
