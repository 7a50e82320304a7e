// Package locks holds the rules of a lock that the operator and the kubectl plugin share, for any
// workload that asks for one (a Claimant: a LockedJob today, a labelled Job or Pod to come): its
// name for the lock library, the holder name and token (Identity), the order in which
// waiters are served (QueueScore, QueueCompare), and how many may hold it at once, as its Lock or
// ClusterLock declares (Declaration, Permits, PermitReader). The operator's Identity is loaded at
// start from its token-key Secret (LoadIdentity, beside the Secret's RBAC markers).
//
// It reads only the Kubernetes API: it imports neither the reconcilers nor the lock library, so
// the plugin imports it instead of restating the rules.
package locks
