package redislock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotAcquired means the lock is held by another token (after any retries). It is the
	// normal outcome of contention, not a failure of Redis.
	ErrNotAcquired = errors.New("redislock: not acquired")

	// ErrLockLost means a renew found the lock gone or held by another token: the caller no
	// longer holds it and must stop the work it protects. Retrying cannot recover it.
	ErrLockLost = errors.New("redislock: lock lost")

	// ErrReleasedBefore means an Acquire WithRecordedFence found, from the release mark, that the
	// caller's own token had released the lock (its slot) under that fence: the acquisition the caller
	// recorded is over, whoever holds the lock now, and nothing was acquired.
	ErrReleasedBefore = errors.New("redislock: released before by this token")

	// ErrNotHeld means the operation needs a lock that this Lock does not hold: it was released
	// already, it expired, someone else holds it now, or the Lock is nil.
	ErrNotHeld = errors.New("redislock: lock not held")

	// ErrInvalidArgument wraps every rejection of bad input (empty key, bad ttl, nil client...).
	ErrInvalidArgument = errors.New("redislock: invalid argument")
)

// NodeError is a transport or server error from one node of a Redlock client (or the only node of a
// single-node client). Several are combined with errors.Join; match them with errors.As.
type NodeError struct {
	// Node is the index of the node in the slice given to NewRedlock (0 for a single node).
	Node int
	// Addr is the node's address as its client reports it, for humans.
	Addr string
	// Err is what the node call returned.
	Err error
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("redis node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap lets errors.Is see the underlying error, e.g. context.DeadlineExceeded.
func (e *NodeError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// QueuedError is ErrNotAcquired for a waiter acquired WithQueue: it says where the waiter stands.
// errors.Is(err, ErrNotAcquired) holds for it.
type QueuedError struct {
	// Position is the waiter's place in the queue: 1 means next in line. While the lock is held it
	// may count waiters that vanished recently; they are dropped when the lock is next freed.
	Position int
	// Holder is the current holder's metadata (see WithMetadata), empty if the lock is free (a
	// waiter ahead gets it first) or the holder stored none.
	Holder string
	// Free is Join's alone: the lock (a slot of a semaphore) is free and its next grant is this
	// waiter's, or it already holds this waiter's token (handed to it). Nobody hands over a lock
	// nobody releases, so the waiter must Acquire it.
	Free bool
}

func (e *QueuedError) Error() string {
	return fmt.Sprintf("%v (position %d in queue)", ErrNotAcquired, e.Position)
}

// Is makes a QueuedError match ErrNotAcquired.
func (e *QueuedError) Is(target error) bool { return target == ErrNotAcquired }

var (
	// ErrEvictionPolicy means a Redis node may evict keys under memory pressure (its
	// maxmemory-policy is not noeviction): it could drop a held lock, and a second holder would get
	// it while the first still runs.
	ErrEvictionPolicy = errors.New("redislock: redis may evict locks")

	// ErrEvictionUnknown means a node's eviction policy could not be read: CONFIG GET was refused
	// (an ACL without +config, or a renamed command). Check maxmemory-policy by other means.
	ErrEvictionUnknown = errors.New("redislock: redis eviction policy unknown")

	// ErrUnreplicatedWrites means a Redis primary accepts writes with no replica connected
	// (min-replicas-to-write is 0). Cut off from its replicas and Sentinels while a holder's
	// operator still reaches it, it keeps renewing the lock after a Sentinel promoted a replica
	// that hands the lock to someone else: two holders (docs/design.md, Sentinel split brain).
	ErrUnreplicatedWrites = errors.New("redislock: redis primary accepts writes without replicas")
)

// FoundGone reports whether err, a keeper's OnLost cause, says Redis answered a renewal that the
// lock was gone or another token's, rather than that renewals failed until the lease ran out.
func FoundGone(err error) bool {
	return err == ErrLockLost //nolint:errorlint // the renewal's own answer, not a loss wrapped with another cause
}
