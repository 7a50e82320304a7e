// Package lockbook is the operator's record of the locks it holds and its one door to Redis: it
// acquires, re-adopts, releases and reads locks through the lock library (redislock), renews the
// held ones with the library's keeper on its own schedule, stops the Job of a lost lock outside the
// reconcile queue, and acts on a loss only while its manager leads. Beside the book: the readiness
// check on Redis and the metrics of held, renewed and lost locks.
//
// It tracks LockedJobs (api/v1alpha1) but imports no reconciler: the reconcilers (controllers)
// hold a *Book and name their locks with a Claim; cmd/manager builds the lock client and the book.
package lockbook
