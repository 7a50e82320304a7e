// Package reconcile holds what every reconciler of controllers/ shares in a pass: how a pass runs
// its steps (Steps), how soon a pass that lost a write race runs again, the one cut of the free
// text it writes, and the fallback for unset durations. It imports nothing of the reconcilers, so
// each can use it without reaching into another's files.
//
// Beside controller-runtime's reconcile package, import it as sreconcile (shared).
package reconcile

import "time"

// ConflictRequeue is how soon a pass whose write lost an optimistic-lock race runs again, with the
// object as the API server has it now.
const ConflictRequeue = 50 * time.Millisecond

// DurationOr returns d, or def when d is not positive.
func DurationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
