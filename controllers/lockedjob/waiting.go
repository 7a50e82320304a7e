package lockedjob

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Waiting without asking (docs/design.md, "Scale"). A waiter behind the head of its queue has
// nothing to do until its place changes, yet asking Redis on a timer cost every waiter a script per
// poll: O(depth × wait) calls, and a work queue full of polls that a handoff waited behind. Instead:
//   - the queue keeper keeps this operator's waiters queued, one call per lock (KeepQueued);
//   - after a handoff the release waker reads the new lineup once (Lineup) and tells the waiters
//     whose shown place changed (placeHints), which record it without a Redis call;
//   - the head still asks on its backoff: a lock freed by an expiry is announced by nobody;
//   - the others ask again only after Config.QueueRecheck, the safety net for what no announcement
//     tells (a waiter ahead that gave up, a lost message).

// waiter is one waiting LockedJob of this operator, by its queue member (Identity.Holder).
type waiter struct {
	obj types.NamespacedName
	key string // the lock's name in the lock library
	// due is when the waiter asks Redis again unless something wakes it first: a pass that runs
	// before (its own status write, a resync) has nothing new to ask about. priority is the work
	// queue's for that re-check.
	due      time.Time
	priority int
	// woken: a release or the queue keeper says something changed; the next pass asks Redis.
	woken bool
	// hint: a lineup told the waiter its new place; the next pass records it without asking.
	hint *placeHint
	// handedAt is when a release announced that it handed the lock to this waiter, for
	// lockedjob_handoff_seconds; zero if none did.
	handedAt time.Time
}

// placeHint is what a lineup read after a handoff told of one waiter's place, and only that: the
// release message that led to the read is a wake-up anyone who can publish on the channel could
// forge, so a hint never says who holds the lock. Who blocks a waiter is what Redis answered at its
// last attempt.
type placeHint struct {
	position int
	at       time.Time
}

// hintMaxAge bounds how old a hint a pass trusts, so a hint describes the queue as it is.
const hintMaxAge = 30 * time.Second

// waitBook is this operator's waiting LockedJobs: when each asks Redis next, and what the release
// waker and the queue keeper told it since. The queue keeper keeps them queued, and
// lockedjob_lockedjobs_waiting counts them. A LockedJob the book does not know asks Redis: the book only
// ever spares calls.
type waitBook struct {
	mu  sync.Mutex
	set map[string]*waiter // by queue member
}

// ask is what a waiting LockedJob's pass does about Redis (see next).
type ask int

const (
	askRedis   ask = iota // acquire or learn its place: first pass, woken, or due
	askHint               // record the place a lineup told
	askNothing            // nothing changed since it last asked: wait on until due
)

// waiting records that member waits for lock key and asks again at due, at priority.
func (b *waitBook) waiting(member string, obj types.NamespacedName, key string, due time.Time, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.set == nil {
		b.set = map[string]*waiter{}
	}
	w := &waiter{obj: obj, key: key, due: due, priority: priority}
	if old := b.set[member]; old != nil {
		// next consumed what the pass started with; anything here came while it ran and is news.
		w.woken, w.hint, w.handedAt = old.woken, old.hint, old.handedAt
	}
	b.set[member] = w
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// handed notes that a release handed the lock to member at at.
func (b *waitBook) handed(member string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.set[member]; w != nil {
		w.handedAt = at
	}
}

// acquired forgets a member that now holds its lock and returns how long ago a release handed it
// the lock, if one was announced.
func (b *waitBook) acquired(member string, now time.Time) (sinceHanded time.Duration, handed bool) {
	b.mu.Lock()
	w := b.set[member]
	b.mu.Unlock()
	b.done(member)
	if w == nil || w.handedAt.IsZero() {
		return 0, false
	}
	return now.Sub(w.handedAt), true
}

// done forgets a member that no longer waits (it holds its lock, gave up, or is gone).
func (b *waitBook) done(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.set, member)
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// doneObject forgets a LockedJob that is gone, whatever its member was.
func (b *waitBook) doneObject(obj types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for m, w := range b.set {
		if w.obj == obj {
			delete(b.set, m)
		}
	}
	lockedJobsWaiting.Set(float64(len(b.set)))
}

// wake makes member's next pass ask Redis, and drops any hint: the lock may be its now.
func (b *waitBook) wake(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.set[member]; w != nil {
		w.woken, w.hint = true, nil
	}
}

// wakeAll makes every waiter ask Redis at its next pass (releases went unannounced).
func (b *waitBook) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.set {
		w.woken, w.hint = true, nil
	}
}

// tell leaves member a hint of its place; it reports false for a member the book does not know,
// whose next pass asks Redis anyway.
func (b *waitBook) tell(member string, hint placeHint) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	if w == nil {
		return false
	}
	w.hint = &hint
	return true
}

// next says what member's pass does now, and passes the hint, or the time to wait on and the
// priority of that re-check. It consumes what it returns: a wake-up or hint counts once.
func (b *waitBook) next(member string, now time.Time) (what ask, hint placeHint, left time.Duration, priority int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.set[member]
	switch {
	case w == nil:
		return askRedis, placeHint{}, 0, 0
	case w.woken:
		w.woken, w.hint = false, nil
		return askRedis, placeHint{}, 0, 0
	case w.hint != nil && now.Sub(w.hint.at) <= hintMaxAge:
		hint := *w.hint
		w.hint = nil
		return askHint, hint, 0, 0
	case now.Before(w.due):
		return askNothing, placeHint{}, w.due.Sub(now), w.priority
	default:
		return askRedis, placeHint{}, 0, 0
	}
}

// byLock groups the waiters by lock, for one KeepQueued call each.
func (b *waitBook) byLock() map[string]map[string]types.NamespacedName {
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
