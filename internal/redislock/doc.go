// Package redislock is a Redis distributed lock with fencing tokens, re-adoption, a batched
// renewal keeper and a Redlock (quorum) mode. It has no Kubernetes dependencies.
//
// # Model
//
// A lock is one Redis key holding the holder's token (SET key token NX PX ttl semantics, done in a
// Lua script; a fresh grant appends a mark naming the acquisition attempt that created it), a
// metadata key beside it with the same TTL, and a fence counter that never expires. All share one hash tag
// ("{key}"), so they live in one Redis Cluster slot and every script runs on one node. Renew and
// Release compare the token before they act, so a stale holder can never extend or delete a lock
// that someone else holds.
//
// # Re-adoption and undo
//
// Acquire with the token a lock already holds succeeds without a new grant: a re-adoption (see
// Lock.Readopted), which keeps the lock's fence. An attempt that fails after Redis granted it (no
// quorum, a WAIT shortfall, a reply that came too late, a node that did not answer and may apply it
// later) undoes its grant, but only a grant it made itself: each attempt has a random id that a
// fresh grant stores after its token (token, NUL byte, id; tokens may not contain NUL) and a
// re-adoption or handoff removes by writing the bare token, and the undo compares token and id. A failed attempt can therefore never delete a lock that a retry with the same token
// re-adopted, and a re-adoption is never undone (a re-adopted lock stays held until its lease ends
// if its caller gave up). Undos on nodes that did not answer run in the background until the lease
// would have ended, one per lock, token and node, at most 256 per Client.
//
// # Fencing tokens
//
// Every fresh acquisition returns a fencing token: max(previous token + 1, Redis server clock in
// microseconds), a hybrid logical clock. Successive holders of one lock on one Redis get strictly
// increasing tokens, and the clock term keeps them increasing when the counter went back: a Redis
// restart that lost its data, or a failover to a replica that missed the last grant. That holds
// under one assumption: the clock of the Redis host that takes over is not behind the old one by
// more than the time the failover took (hosts synchronised by NTP easily meet it). Tokens are not
// consecutive. Re-adopting a lock you still hold (Acquire with WithToken) returns the same token. A protected resource that remembers the highest token it has seen and refuses
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
// NewRedlock builds a Client over N independent Redis nodes (N odd, at least 3). Acquire asks all
// nodes at once, each bounded by a per-node timeout, and succeeds only when a majority (N/2+1)
// granted the lock and the remaining validity ttl - elapsed - drift (drift = ttl*0.01 + 2ms) is
// still positive; otherwise it releases on every node. Renew and Release act on all nodes and
// need a majority.
//
// Under Redlock every node keeps its own fence counter. After a quorum grant, the lock's token is
// the highest counter among the granting nodes, and Acquire writes that value back to a majority
// before it returns. Any later quorum shares at least one node with that majority, so it hands out
// a higher token. This holds under Redlock's own assumptions: bounded clock drift between the
// client and the nodes, no process pause longer than the validity, and nodes that do not lose
// writes (or that restart later than one TTL after a crash, as the Redlock paper asks) — a node
// that loses its data is covered by the clock term above. A re-adoption needs a quorum of nodes that
// still hold the token and keeps their fence; nodes that granted afresh (one that lost its data)
// keep the lock and are raised to that fence. Where those assumptions fail, two
// holders can overlap in time; the fencing token still orders them, so a resource that checks it
// stays consistent.
//
// # Queues and handoff
//
// WithQueue makes waiters take turns: they join a queue in Redis (by score, then name), a free lock
// goes only to the head, and a waiter that stops asking drops out after its liveness. On a single
// deployment, releasing a queued lock hands it straight to the live head in the same script (its
// token, metadata and the next fencing token, for its ttl but at most the rest of its liveness),
// so nobody can acquire it in between; the head claims it with its next attempt, which comes at once
// when it waits inside Acquire and the client has a release channel (WithReleaseNotifications). A
// release message only wakes the waiter: anyone who can publish can forge one, so the lock is
// confirmed by that attempt in Redis, which also dates the lease and returns the true fence.
// Attempt ids are 96 random bits. Redlock clients queue but do not hand off.
//
// # Semaphores
//
// WithPermits(n) makes a lock a semaphore: up to n holders at once (at most MaxPermits), each in a
// slot of its own (Lock.Slot). Slot 0 is the plain lock's keys; slot i is the lock key with ":s<i>"
// appended, with its own metadata and fence counter, and all slots share the lock's queue. A fence
// orders a holder against the earlier holders of its slot: a store partitioned by slot can fence
// each partition, a store shared by all slots cannot (n holders may write at once; that is what a
// semaphore is). The n is stored with the lock by SetPermits, its one writer, and ruled by the
// acquire and release scripts; an acquisition's own n only lowers it for that call and is never
// stored. Lowering it preempts nobody, and nobody acquires until fewer than the new n are held.
// A lock with a stored n is a semaphore for every caller:
// Acquire, ReleaseToken, Dequeue and the Release of a lock acquired WithQueue find that out in
// their first script, which then changes nothing, and make the same call with the semaphore's
// script (under the stored n; a plain holder holds slot 0). Renew, TTL and the Keeper work on a
// slot as on a plain lock; ReleaseSlotToken, DequeueSlots and InspectSlots are ReleaseToken,
// Dequeue and Inspect for a semaphore. A semaphore needs one
// deployment: Redlock refuses n > 1.
//
// # What Redis must not do
//
// A lock lives only as long as its key: a Redis that evicts keys under memory pressure (any
// maxmemory-policy but noeviction; see Client.CheckEvictionPolicy) or whose host clock steps
// forward (Redis expires keys by wall clock) can end a lease early, while its holder still
// trusts it, and let a second holder in. The fencing token still orders the two.
//
// # Renewal
//
// Keeper renews many locks from one goroutine: locks that are due together go to Redis in one
// pipeline per node, so 10,000 locks cost a few round trips, not 10,000. A renewal that finds the
// lock gone or held by another reports ErrLockLost at once; one that failed in transport is retried until the
// lock's validity runs out, and only then counts as lost. The loss is reported at the lock's
// ValidUntil even while a renewal is still waiting for Redis, and KeeperOptions.OnAtRisk warns a
// margin before it, so the holder can stop its work before Redis may expire the key. Renewals are
// scheduled from the lease's end by the round trips the keeper measures (Keeper.RoundTrip), so a
// lock whose Redis answers in time is never at risk, provided its lease is above the floor those
// round trips allow (Client.MinTTL; KeeperOptions.OnShortLease reports a lease below it).
package redislock
