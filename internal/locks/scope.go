package locks

import (
	"slices"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// ScopeGate lists the namespaces that may use locks of spec.lock.scope Cluster; "*" allows every
// namespace. A Cluster lock is one key shared by every namespace and every cluster on the Redis,
// so what a namespace may not acquire it must not read either: whether the lock is held, and by
// which namespace and LockedJob, is another tenant's business. Every reconciler that touches a
// claimant's lock on behalf of a namespace asks Allows before its first Redis call, and one that
// is refused neither reads Redis nor names a holder.
type ScopeGate []string

// Allows reports whether c's namespace may use c's lock, whatever c's kind. Namespace scope is
// always allowed: its key carries the namespace, so nobody else shares it.
func (g ScopeGate) Allows(c Claimant) bool {
	if c.Lock.ScopeOrDefault() != batchv1alpha1.LockScopeCluster {
		return true
	}
	return slices.Contains(g, "*") || slices.Contains(g, c.Namespace)
}
