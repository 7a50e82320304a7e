// Package lockbook is the operator's record of the locks it holds and its one door to Redis: it
// acquires, re-adopts, releases and reads locks through the lock library (redislock), renews the
// held ones with the library's keeper on its own schedule, stops the Job of a lost lock outside the
// reconcile queue, and acts on a loss only while its manager leads. Beside the book: the readiness
// check on Redis and the metrics of held, renewed and lost locks.
//
// It tracks the workloads of every kind that asks for a lock (a locks.Claimant: LockedJobs today)
// and wakes each kind's reconciler on a channel of its own (Events), but imports no reconciler: the
// reconcilers (controllers) hold a *Book and name their locks with a Claim; cmd/manager builds the
// lock client and the book.
package lockbook
