-- lineup.lua: who stands at the given places of a lock's queue, so one call tells whose place a
-- handoff changed (see Client.Lineup). Places count as acquirequeued.lua's positions do: waiters that
-- stopped asking count until a free lock prunes them.
-- KEYS[1] queue
-- ARGV: positions (1 = head), ascending
-- Returns the members at those positions; the list ends before the first position past the end.
local lineup = {}
for i = 1, #ARGV do
  local member = redis.call('ZRANGE', KEYS[1], ARGV[i] - 1, ARGV[i] - 1)[1]
  if not member then
    break
  end
  lineup[#lineup + 1] = member
end
return lineup
