// Package waitbook is a reconciler's book of its waiting claimants: when each asks Redis next,
// and what release wake-ups and the queue keeper told it since (docs/design.md, "Scale").
//
// A waiter behind the head of its queue has nothing to do until its place changes, yet asking
// Redis on a timer cost every waiter a script per poll: O(depth × wait) calls, and a work queue
// full of polls that a handoff waited behind. Instead:
//   - the queue keeper keeps the book's waiters queued, one call per lock (lockbook.Book.KeepQueued);
//   - a release wakes the waiter it handed the lock to, or the lock's waiters (Wake, WakeObject),
//     and may tell waiters their new place (Tell), which they record without a Redis call;
//   - the head still asks on its backoff: a lock freed by an expiry is announced by nobody;
//   - the others ask again only after a long re-check, the safety net for what no announcement
//     tells (a waiter ahead that gave up, a lost message).
//
// A claimant the book does not know asks Redis: the book only ever spares calls, so forgetting
// (a restart, a new leader) costs one call per waiter and nothing else.
package waitbook

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// waiter is one waiting claimant, by its queue member (its holder name).
type waiter struct {
	obj types.NamespacedName
	key string // the lock's name in the lock library
	// due is when the waiter asks Redis again unless something wakes it first: a pass that runs
	// before (its own write, a resync) has nothing new to ask about. priority is the work queue's
	// for that re-check.
	due      time.Time
	priority int
	// woken: a release or the queue keeper says something changed; the next pass asks Redis.
	woken bool
	// hint: a lineup told the waiter its new place; the next pass records it without asking.
	hint *Hint
	// handedAt is when a release announced that it handed the lock to this waiter; zero if none
	// did.
	handedAt time.Time
}

// Hint is what a lineup read after a handoff told of one waiter's place, and only that: the
// release message that led to the read is a wake-up anyone who can publish on the channel could
// forge, so a hint never says who holds the lock. Who blocks a waiter is what Redis answered at its
// last attempt.
type Hint struct {
	Position int
	At       time.Time
}

// HintMaxAge bounds how old a hint a pass trusts, so a hint describes the queue as it is.
const HintMaxAge = 30 * time.Second

// Book is one reconciler's waiting claimants. The zero value is ready to use.
type Book struct {
	// Count, if set, is kept at the number of waiters.
	Count prometheus.Gauge

	mu  sync.Mutex
	set map[string]*waiter // by queue member
}

// Ask is what a waiter's pass does about Redis (see Next).
type Ask int

const (
	AskRedis   Ask = iota // acquire or learn its place: first pass, woken, or due
	AskHint               // record the place a lineup told
	AskNothing            // nothing changed since it last asked: wait on until due
)

// counted updates Count; the caller holds mu.
func (b *Book) counted() {
	if b.Count != nil {
		b.Count.Set(float64(len(b.set)))
	}
}

// Waiting records that member, of object obj, waits for lock key and asks again at due, at
// priority.
func (b *Book) Waiting(member string, obj types.NamespacedName, key string, due time.Time, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set == nil {
		b.set = map[string]*waiter{}
	}
	w := &waiter{obj: obj, key: key, due: due, priority: priority}
	if old := b.set[member]; old != nil {
		// Next consumed what the pass started with; anything here came while it ran and is news.
		w.woken, w.hint, w.handedAt = old.woken, old.hint, old.handedAt
	}
	b.set[member] = w
	b.counted()
}

// Handed notes that a release handed the lock to member at at.
func (b *Book) Handed(member string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.set[member]; w != nil {
		w.handedAt = at
	}
}

// Acquired forgets a member that now holds its lock and returns how long ago a release handed it
// the lock, if one was announced.
func (b *Book) Acquired(member string, now time.Time) (sinceHanded time.Duration, handed bool) {
	b.mu.Lock()
	w := b.set[member]
	b.mu.Unlock()
	b.Done(member)
	if w == nil || w.handedAt.IsZero() {
		return 0, false
	}
	return now.Sub(w.handedAt), true
}

// Done forgets a member that no longer waits (it holds its lock, gave up, or is gone).
func (b *Book) Done(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.set, member)
	b.counted()
}

// DoneObject forgets an object that is gone, whatever its member was.
func (b *Book) DoneObject(obj types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for m, w := range b.set {
		if w.obj == obj {
			delete(b.set, m)
		}
	}
	b.counted()
}

// Wake makes member's next pass ask Redis, and drops any hint: the lock may be its now.
func (b *Book) Wake(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.set[member]; w != nil {
		w.woken, w.hint = true, nil
	}
}

// WakeObject makes the next pass of obj's waiter ask Redis, for a caller that knows the object
// and not its member.
func (b *Book) WakeObject(obj types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.set {
		if w.obj == obj {
			w.woken, w.hint = true, nil
		}
	}
}

// WakeAll makes every waiter ask Redis at its next pass (releases went unannounced).
func (b *Book) WakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.set {
		w.woken, w.hint = true, nil
	}
}

// Tell leaves member a hint of its place; it reports false for a member the book does not know,
// whose next pass asks Redis anyway.
func (b *Book) Tell(member string, hint Hint) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	if w == nil {
		return false
	}
	w.hint = &hint
	return true
}

// Knows reports whether member waits in the book.
func (b *Book) Knows(member string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.set[member] != nil
}

// Next says what member's pass does now, and passes the hint, or the time to wait on and the
// priority of that re-check. It consumes what it returns: a wake-up or hint counts once.
func (b *Book) Next(member string, now time.Time) (what Ask, hint Hint, left time.Duration, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	switch {
	case w == nil:
		return AskRedis, Hint{}, 0, 0
	case w.woken:
		w.woken, w.hint = false, nil
		return AskRedis, Hint{}, 0, 0
	case w.hint != nil && now.Sub(w.hint.At) <= HintMaxAge:
		hint := *w.hint
		w.hint = nil
		return AskHint, hint, 0, 0
	case now.Before(w.due):
		return AskNothing, Hint{}, w.due.Sub(now), w.priority
	default:
		return AskRedis, Hint{}, 0, 0
	}
}

// ByLock groups the waiters by lock, for one KeepQueued call each.
func (b *Book) ByLock() map[string]map[string]types.NamespacedName {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]map[string]types.NamespacedName{}
	for m, w := range b.set {
		if out[w.key] == nil {
			out[w.key] = map[string]types.NamespacedName{}
		}
		out[w.key][m] = w.obj
	}
	return out
}
