-- holder.lua: who holds a lock, for every script that acts only for the holder; scripts.go puts
-- this file in front of them.
--
-- The lock key holds the holder's token. A fresh grant appends a NUL byte and the id of the attempt
-- that made it (the grant mark, see undo.lua); a re-adoption or a handoff writes the bare token, so
-- the mark is gone. Tokens cannot contain NUL (see validateToken), so everything before the first
-- NUL is the token. Keeping the mark in the lock's own value costs no key and no call of its own.

-- holds reports whether value (a GET of the lock key: false when free) is held by token.
local function holds(value, token)
  if value == token then
    return true
  end
  if not value then
    return false
  end
  local n = #token
  -- string.sub yields a string equal to token, which Lua has interned already: no new string.
  return string.byte(value, n + 1) == 0 and string.sub(value, 1, n) == token
end
