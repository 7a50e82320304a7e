package redislock

import (
	"fmt"
)

// grant is one node's answer to an acquisition attempt (acquire.lua, acquirequeued.lua).
type grant struct {
	ok        bool
	fence     int64
	readopted bool   // ok, and the lock already held our token
	slot      int    // ok: the semaphore's slot (acquireslots.lua); 0 for a plain lock
	position  int    // not ok: place in the queue (0 without one)
	holder    string // not ok: the holder's metadata
	free      bool   // not ok, joining: the lock is free and its next grant is this waiter's
	// releasedBefore: not ok, nothing written; the release mark says our token released the
	// acquisition the caller recorded (WithRecordedFence), under fence.
	releasedBefore bool
}

// acquireReply parses the acquire scripts' reply: {1, fence, readopted[, slot]} when acquired,
// {0, position[, holder[, free]]} when not, {2, fence, 0[, slot]} when released before.
func acquireReply(v any) (grant, error) {
	vals, isSlice := v.([]any)
	if !isSlice || len(vals) < 2 || len(vals) > 4 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	flag, ok1 := vals[0].(int64)
	n, ok2 := vals[1].(int64)
	if !ok1 || !ok2 {
		return grant{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	if flag == 2 {
		return grant{fence: n, releasedBefore: true}, nil
	}
	if flag == 1 {
		g := grant{ok: true, fence: n}
		if len(vals) >= 3 {
			readopted, _ := vals[2].(int64)
			g.readopted = readopted == 1
		}
		if len(vals) == 4 {
			slot, _ := vals[3].(int64)
			g.slot = int(slot)
		}
		return g, nil
	}
	g := grant{position: int(n)}
	if len(vals) >= 3 {
		g.holder, _ = vals[2].(string)
	}
	if len(vals) == 4 {
		free, _ := vals[3].(int64)
		g.free = free == 1
	}
	return g, nil
}
