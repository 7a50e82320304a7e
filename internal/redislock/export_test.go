package redislock

import (
	"maps"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LateReleasesStarted reports how many late releases c has started so far.
func LateReleasesStarted(c *Client) int64 { return c.late.started.Load() }

// LateReleasesRunning reports how many late releases of c are still trying.
func LateReleasesRunning(c *Client) int64 { return c.late.running.Load() }

// HoldLateReleases makes c's late releases wait before each attempt until the returned func is
// called, so a test can order them after other commands.
func HoldLateReleases(c *Client) (letGo func()) {
	g := make(chan struct{})
	c.late.gate.Store(&g)
	return func() { close(g) }
}

// SetLateReleaseLimit changes how many late releases c runs at once.
func SetLateReleaseLimit(c *Client, n int) {
	c.late.mu.Lock()
	defer c.late.mu.Unlock()
	c.late.limit = n
}

// KeysFor returns the Redis keys of the lock named key, in the order the scripts receive them.
func KeysFor(c *Client, key string, queued bool) []string { return c.keysFor(key, queued) }

// ReleaseListeners reports how many waiting Acquire calls and SubscribeReleases readers listen to
// node's release channel through c's one subscription there.
func ReleaseListeners(c *Client, node int) int {
	c.releases.mu.Lock()
	defer c.releases.mu.Unlock()
	if ns := c.releases.subs[node]; ns != nil {
		return ns.listeners
	}
	return 0
}

// ComposedScripts returns the source of every script the package runs, by name, as sent to Redis.
func ComposedScripts() map[string]string { return maps.Clone(composedSources) }

// ReplaceAcquireSlotsScript makes c's package acquire semaphores with the acquire script edit makes
// of the real one (its own source, after the helpers), until the test ends: the exclusion checker
// must fail on a broken script. It panics if edit changes nothing.
func ReplaceAcquireSlotsScript(t interface{ Cleanup(func()) }, edit func(string) string) {
	broken := edit(acquireSlotsSrc)
	if broken == acquireSlotsSrc {
		panic("ReplaceAcquireSlotsScript: the edit changed nothing")
	}
	saved := scriptAcquireSlots
	scriptAcquireSlots = redis.NewScript(holderSrc + clockSrc + queueSrc + slotsSrc + broken)
	t.Cleanup(func() { scriptAcquireSlots = saved })
}

// RemoveDivert makes the package's plain scripts that grant or hand off a lock (acquire, acquire
// queued, release handoff, dequeue) skip their semaphore check until the test ends, as an operator
// built before it would: the exclusion checker must fail on mixed callers then.
func RemoveDivert(t interface{ Cleanup(func()) }) {
	const check = "if redis.call('EXISTS', KEYS[1] .. ':permits') == 1 then"
	scripts := map[string]**redis.Script{
		"acquire": &scriptAcquire, "acquire queued": &scriptAcquireQueued,
		"release handoff": &scriptReleaseHandoff, "dequeue": &scriptDequeue,
	}
	for name, s := range scripts {
		src := composedSources[name]
		if !strings.Contains(src, check) {
			panic("RemoveDivert: script " + name + " has no semaphore check")
		}
		saved := *s
		*s = redis.NewScript(strings.Replace(src, check, "if false then", 1))
		t.Cleanup(func() { *s = saved })
	}
}
