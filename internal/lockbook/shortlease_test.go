package lockbook

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockedjob/lockedjob/internal/locks"
	"github.com/lockedjob/lockedjob/internal/redislock"
)

// TestShortLeaseIsToldLikeARenewalThatMayNotComeBack (#23): the keeper's report of a lease too short
// for its round trip reaches the user through the book's OnRenewFailed (the reconciler turns it into
// a TTLBelowRoundTrip Warning), for the LockedJob that holds the lock, and only while the book leads;
// before the keeper measured a round trip, no lease counts as short.
func TestShortLeaseIsToldLikeARenewalThatMayNotComeBack(t *testing.T) {
	book, c, _ := unitLocks(t)
	var told []Workload
	var errs []error
	book.SetHandlers(locks.KindLockedJob, Handlers{OnRenewFailed: func(w Workload, err error) { told, errs = append(told, w), append(errs, err) }})
	if short, _, _ := book.ShortLease(time.Millisecond); short {
		t.Fatal("a lease counted as short before any round trip was measured")
	}
	lock := trackedLock(t, book, c, time.Minute)
	report := fmt.Errorf("lease of 3s, round trip 700ms: %w", redislock.ErrLeaseTooShort)
	book.onShortLease(lock, report)
	if len(told) != 1 || told[0].Object.Name != "n" || told[0].UID != "u" || !errors.Is(errs[0], redislock.ErrLeaseTooShort) {
		t.Fatalf("told %v with %v, want LockedJob ns/n once with ErrLeaseTooShort", told, errs)
	}
	book.mu.Lock()
	book.term = 0 // not leading: an Event is a write, the leader's
	book.mu.Unlock()
	book.onShortLease(lock, report)
	if len(told) != 1 {
		t.Fatalf("told %d times, want once: a book that does not lead tells nobody", len(told))
	}
}
