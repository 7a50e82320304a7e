// Package redislock is a Redis distributed lock with fencing tokens, re-adoption, a batched
// renewal keeper and a Redlock (quorum) mode. It has no Kubernetes dependencies.
//
// # Model
//
// A lock is one Redis key holding the holder's token (SET key token NX PX ttl semantics, done in a
// Lua script), a metadata key beside it with the same TTL, and a fence counter that never expires.
// All three share one hash tag ("{key}"), so they live in one Redis Cluster slot and every script
// runs on one node. Refresh and Release compare the token before they act, so a stale holder can
// never extend or delete a lock that someone else holds.
//
// # Fencing tokens
//
// Every fresh acquisition returns a fencing token: the previous token + 1, where a counter that does
// not exist yet (first use, or a Redis that lost its data) starts from the Redis server clock in
// microseconds. Successive holders of one lock on one Redis therefore get strictly increasing
// tokens, also across a Redis restart that lost its data, unless the server clock stepped
// backwards across that restart. Re-adopting a lock you still hold (Obtain with WithToken) returns
// the same token. A protected resource that remembers the highest token it has seen and refuses
// lower ones cannot be corrupted by a holder that lost its lock without noticing (a process paused
// longer than the TTL, a network partition): that is the guarantee a lock with a TTL cannot give
// on its own.
//
// What the token does not do: it does not stop a stale holder from running; the resource must
// check it. Locks are leases: a holder whose validity (see Lock.ValidUntil) ran out must assume
// someone else holds the lock, whatever it believes.
//
// # Redlock
//
// NewRedlock builds a Client over N independent Redis nodes (N odd, at least 3). Obtain asks all
// nodes at once, each bounded by a per-node timeout, and succeeds only when a majority (N/2+1)
// granted the lock and the remaining validity ttl - elapsed - drift (drift = ttl*0.01 + 2ms) is
// still positive; otherwise it releases on every node. Refresh and Release act on all nodes and
// need a majority.
//
// Under Redlock every node keeps its own fence counter. After a quorum grant, the lock's token is
// the highest counter among the granting nodes, and Obtain writes that value back to a majority
// before it returns. Any later quorum shares at least one node with that majority, so it hands out
// a higher token. This holds under Redlock's own assumptions: bounded clock drift between the
// client and the nodes, no process pause longer than the validity, and nodes that do not lose
// writes (or that restart later than one TTL after a crash, as the Redlock paper asks) — a node
// that loses its data is covered by the clock term above. Where those assumptions fail, two
// holders can overlap in time; the fencing token still orders them, so a resource that checks it
// stays consistent.
//
// # Queues and handoff
//
// WithQueue makes waiters take turns: they join a queue in Redis (by score, then name), a free lock
// goes only to the head, and a waiter that stops asking drops out after its liveness. On a single
// deployment, releasing a queued lock hands it straight to the live head in the same script (its
// token, metadata and the next fencing token, for its ttl but at most its liveness), so nobody can
// take it in between; the head claims it with its next attempt, or at once when it waits inside
// Obtain and the client has a release channel (WithReleaseNotifications). The lease of a lock
// received by push is dated from the start of the attempt whose request the release granted, which
// the server answered before the release, so its validity is never overstated. Redlock clients
// queue but do not hand off.
//
// # Renewal
//
// Keeper renews many locks from one goroutine: locks that are due together go to Redis in one
// pipeline per node, so 10,000 locks cost a few round trips, not 10,000. A renewal that finds the
// lock gone or taken reports ErrLockLost at once; one that failed in transport is retried until the
// lock's validity runs out, and only then counts as lost. The loss is reported at the lock's
// ValidUntil even while a renewal is still waiting for Redis, and KeeperOptions.OnAtRisk warns a
// margin before it, so the holder can stop its work before Redis may expire the key.
package redislock
