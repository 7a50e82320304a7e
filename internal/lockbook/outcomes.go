package lockbook

import (
	"fmt"
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
)

// The lock library's outcomes and the values it reports, under the names the reconcilers use, so
// that they need no import of the library itself. They are the library's own (aliases, not
// copies): errors.Is and errors.As match what the library returns, and its documentation holds.

var (
	// ErrNotAcquired: another holder has the lock (a *QueuedError says who, and the place in line).
	ErrNotAcquired = redislock.ErrNotAcquired
	// ErrNotHeld: a release with the claim's token found the lock not held with it.
	ErrNotHeld = redislock.ErrNotHeld
	// ErrLockLost: a held lease ended under its holder.
	ErrLockLost = redislock.ErrLockLost
	// ErrLeaseTooShort: the lease is too short for the round trips the keeper measures.
	ErrLeaseTooShort = redislock.ErrLeaseTooShort
	// ErrReleasedBefore: a re-adoption found, from the release mark, that the claim's own token
	// released the acquisition the claim records (Book.Readopt): it is over, and nothing was taken.
	ErrReleasedBefore = redislock.ErrReleasedBefore

	// ErrLapsedUntaken: a release found the lock not ours because its lease ran out, and nobody
	// was granted it since the claim's fence (Book.Release). The lock's own, unlike ErrNotHeld's
	// other causes: the claimant held it alone until the release. It wraps ErrNotHeld, so a
	// caller that does not look for it treats the lock as not ours.
	ErrLapsedUntaken = fmt.Errorf("lease lapsed, no holder since: %w", ErrNotHeld)
)

type (
	// QueuedError is a waiter's answer: its place in line and who holds the lock.
	QueuedError = redislock.QueuedError
	// State is one lock (or slot) as Redis has it, read without acquiring it.
	State = redislock.State
	// QueueState is a lock's queue as Redis has it.
	QueueState = redislock.QueueState
	// Announced is one operator's announcement of the lock protocol it speaks.
	Announced = redislock.Announced
	// Released is one message of the release channel.
	Released = redislock.Released
)

const (
	// Protocol is the lock protocol this build speaks.
	Protocol = redislock.Protocol
	// SemaphoreProtocol is the oldest protocol under which more than one permit is safe.
	SemaphoreProtocol = redislock.SemaphoreProtocol
)

// ReleaseMarkRetention is how long the operator's releases leave their mark in Redis
// (redislock.WithReleaseMarkRetention): well past the time an operator takes to restart, or a
// Sentinel to fail over, and ask again; a few keys a second at the operator's release rate.
const ReleaseMarkRetention = 10 * time.Minute

// IsReleaseMark reports whether key, a Redis key of the lock library's, is a release mark, which a
// lock keeps after its last holder and waiter until its retention ends (redislock.IsReleaseMark).
func IsReleaseMark(key string) bool { return redislock.IsReleaseMark(key) }
