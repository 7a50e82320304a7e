package guard

import (
	"time"

	sreconcile "github.com/lockedjob/lockedjob/controllers/internal/reconcile"
	"github.com/lockedjob/lockedjob/internal/locks"
)

// Config is the operator-wide behaviour of a guard reconciler (guarded Jobs, guarded Pods).
type Config struct {
	// Identity derives lock keys, holder names and tokens, as for every other reconciler.
	Identity locks.Identity
	// ClusterScopeNamespaces is the one scope gate of every reconciler.
	ClusterScopeNamespaces locks.ScopeGate
	// RedisTimeout bounds every Redis call of a pass (default 2s).
	RedisTimeout time.Duration
	// WaitBackoffMin and WaitBackoffMax bound the jittered re-check of a waiter, the safety net
	// behind release wake-ups and the way to notice a lock freed by an expiry; every re-check also
	// keeps the waiter queued (see WaiterLiveness). Defaults 1s and 15s; the minimum is at most
	// the maximum.
	WaitBackoffMin, WaitBackoffMax time.Duration
	// QueueRecheck is how often a waiter behind those a freed permit goes to asks Redis again
	// (jittered, default 20 × WaitBackoffMax): a handoff wakes it, the queue keeper keeps it
	// queued, so this is only the safety net for what nobody announces.
	QueueRecheck time.Duration
	// MaxConcurrentReconciles is how many objects are reconciled at once (default 1).
	MaxConcurrentReconciles int
}

// Defaults fills in what is unset.
func (c *Config) Defaults() {
	// A maximum given alone (--wait-backoff-max) bounds the default minimum too.
	c.WaitBackoffMax = sreconcile.DurationOr(c.WaitBackoffMax, max(15*time.Second, c.WaitBackoffMin))
	c.WaitBackoffMin = min(sreconcile.DurationOr(c.WaitBackoffMin, time.Second), c.WaitBackoffMax)
	c.RedisTimeout = sreconcile.DurationOr(c.RedisTimeout, 2*time.Second)
	c.QueueRecheck = sreconcile.DurationOr(c.QueueRecheck, 20*c.WaitBackoffMax)
}

// WaiterLiveness is how long a waiter stays queued in Redis without asking again: the LockedJob's
// rule. The head asks on its own backoff (at most WaitBackoffMax), well inside it, and the queue
// keeper keeps the others queued every third of it, so only a waiter whose operator stopped, or
// whose object was deleted, drops out.
func (c *Config) WaiterLiveness() time.Duration { return 4*c.WaitBackoffMax + 30*time.Second }

// WaitBackoff is when a waiter created at waited ago asks again: a quarter of its wait so far,
// within the bounds, jittered.
func (c *Config) WaitBackoff(waited time.Duration) time.Duration {
	return Jitter(min(max(waited/4, c.WaitBackoffMin), c.WaitBackoffMax))
}
