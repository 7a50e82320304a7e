-- inspect.lua: read a lock's state in one atomic step, without revealing the holder's token.
-- KEYS[1] lock key   KEYS[2] meta key   KEYS[3] fence key
-- Returns {pttl, metadata or false, last fencing token or false}; pttl is -2 when the lock is free.
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3])}
