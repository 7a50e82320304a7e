package redislock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// defaultLateReleaseLimit caps the late releases one Client runs at once. A stalled Redis makes
	// every attempt start one; past the cap a failed attempt's key is left to expire with its lease.
	defaultLateReleaseLimit = 256
	// lateAttemptsKept is how many failed attempts one late release undoes at most (the latest):
	// only the grant of one of them can be in Redis at a time, and retries rarely pile up further.
	lateAttemptsKept = 16
)

// lateKey names one late release: one lock, one token, one node.
type lateKey struct {
	key, token string
	node       int
}

// lateRelease is what one late release must undo: the failed attempts' ids, until deadline.
type lateRelease struct {
	attempts []string
	deadline time.Time
	gen      int // bumped by every failed attempt that joins, so the goroutine sees late joiners
}

// lateReleases runs the undos of failed attempts on nodes that did not answer in time, one
// goroutine per (lock, token, node) however many attempts failed, and at most limit at once.
type lateReleases struct {
	mu     sync.Mutex
	active map[lateKey]*lateRelease
	limit  int

	started, running atomic.Int64                  // for tests
	gate             atomic.Pointer[chan struct{}] // for tests: holds back every undo while set
}

// join adds a failed attempt to the late release of lk and reports whether a new one must start.
func (lr *lateReleases) join(lk lateKey, attempt string, deadline time.Time) (start bool) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if p := lr.active[lk]; p != nil {
		p.attempts = append(p.attempts, attempt)
		if len(p.attempts) > lateAttemptsKept {
			p.attempts = p.attempts[len(p.attempts)-lateAttemptsKept:]
		}
		p.deadline = later(p.deadline, deadline)
		p.gen++
		return false
	}
	if len(lr.active) >= lr.limit {
		return false
	}
	if lr.active == nil {
		lr.active = make(map[lateKey]*lateRelease)
	}
	lr.active[lk] = &lateRelease{attempts: []string{attempt}, deadline: deadline}
	lr.started.Add(1)
	lr.running.Add(1)
	return true
}

// next returns what the late release of lk must undo now.
func (lr *lateReleases) next(lk lateKey) (attempts []string, deadline time.Time, gen int) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	p := lr.active[lk]
	return p.attempts, p.deadline, p.gen
}

// done ends the late release of lk unless an attempt joined since gen, or it is past its deadline.
func (lr *lateReleases) done(lk lateKey, gen int, expired bool) bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if !expired && lr.active[lk].gen != gen {
		return false
	}
	delete(lr.active, lk)
	lr.running.Add(-1)
	return true
}

func (lr *lateReleases) hold() {
	if g := lr.gate.Load(); g != nil {
		<-*g
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// releaseLate undoes a failed acquisition on nodes that did not answer in time. Such a node may
// apply the acquisition whenever it gets to it (a stall, a pause); then our key would block every
// other holder for a whole lease. A node that does not answer now cannot apply an undo now either,
// so this keeps trying in the background until it gets an answer or the lease has run out anyway.
// The undo removes only a grant of these very attempts (undo.lua), never a lock that a later
// attempt re-adopted.
func (c *Client) releaseLate(k keys, token, attempt string, nodes []int, ttl time.Duration) {
	deadline := time.Now().Add(ttl)
	for _, i := range nodes {
		lk := lateKey{key: k.lock(), token: token, node: i}
		if c.late.join(lk, attempt, deadline) {
			go c.runLateRelease(k, lk)
		}
	}
}

func (c *Client) runLateRelease(k keys, lk lateKey) {
	wait := c.nodeTimeout
	for {
		attempts, deadline, gen := c.late.next(lk)
		if !time.Now().Before(deadline) {
			c.late.done(lk, gen, true)
			return
		}
		c.late.hold()
		args := make([]any, 0, 1+len(attempts))
		args = append(args, lk.token)
		for _, a := range attempts {
			args = append(args, a)
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(c.nodeTimeout, 500*time.Millisecond))
		undo, undoKeys := k.undoCall()
		err := runScript(ctx, c.nodes[lk.node], undo, undoKeys, args...).Err()
		cancel()
		if err == nil {
			// Undone, or the node never applied these attempts (or a later one re-adopted).
			if c.late.done(lk, gen, false) {
				return
			}
			continue
		}
		time.Sleep(wait) // backoff between retries, bounded by the lease
		wait = min(2*wait, time.Second)
	}
}
