package redislock

import (
	"strconv"
	"strings"
	"time"
)

// AcquireOption configures one Acquire call.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	token string
	// tokenArg is token as a script argument, boxed once per Acquire: the acquire script and the
	// Lock's Release pass this one rather than box it again.
	tokenArg any
	metadata string
	retry    RetryStrategy

	queueMember   string
	queueScore    float64
	queueLiveness time.Duration
	// permits is WithPermits' N; 0 without the option (a plain lock, today's scripts).
	permits int
	// diverted: a plain script found the lock to be a semaphore (see Acquire), so attempts run the
	// semaphore's script under its stored N (permits stays 0, which acquireslots.lua reads as
	// "keep it").
	diverted bool
	// join: stand in line only (Client.Join); the scripts grant nothing.
	join bool
	// attempt is this attempt's random id: the grant mark that lets a failed attempt undo only what
	// it created (undo.lua), and, queued, the id in the ticket a handoff honours.
	attempt string
	// proposal is the fencing token a Redlock attempt proposes to its nodes (see fenceLead), read
	// from the clock at proposedAt (µs); proposalArg is it as a script argument, nil when none.
	proposal, proposedAt int64
	proposalArg          any
	// recordedFence and recordedSlot are WithRecordedFence's; recordedArg is the fence as a script
	// argument, nil when the scripts are not to read the release mark (no option, no marks).
	recordedFence int64
	recordedSlot  int
	recordedArg   any
}

// WithToken acquires with the given token instead of a random one. Acquiring a lock that is held
// with this very token succeeds and extends it: that is how a restarted process re-adopts the locks
// it held. The token is the lock's only credential: derive it from a secret, never from public data.
// It must not contain a NUL byte (Acquire refuses it).
func WithToken(token string) AcquireOption { return func(o *acquireOptions) { o.token = token } }

// WithMetadata stores m beside the lock for the lock's lifetime, for others to read with Inspect
// (e.g. who holds it). Default: empty.
func WithMetadata(m string) AcquireOption { return func(o *acquireOptions) { o.metadata = m } }

// WithRetry sets how Acquire retries while the lock is held by someone else. Default: NoRetry.
// Retries always end when the context does.
func WithRetry(s RetryStrategy) AcquireOption { return func(o *acquireOptions) { o.retry = s } }

// WithQueue makes the caller wait its turn: it joins the lock's queue as member with score, and a
// free lock goes only to the waiter at the head (lowest score, then lowest member). A waiter that has
// not asked again within liveness drops out of the queue, so a waiter that vanished cannot block
// it; call Dequeue when giving up. When not acquired, the error is a *QueuedError with the position.
//
// On a single deployment, releasing a lock that was acquired with a queue (and ReleaseToken) hands
// it straight to the live waiter at the head, with the token, lease and metadata of that waiter's
// last attempt, for the waiter's ttl but no longer than what is left of its liveness: the waiter
// finds it held with its own token at its next attempt (a re-adoption, see Lock.Readopted), which
// comes at once when the client was built WithReleaseNotifications and Acquire is waiting with
// retries: the release message wakes it up, and the attempt confirms the lock in Redis. Nobody can
// slip in between holders. Without WithToken, a queued waiter's token is derived from member
// and a secret of the Client, so the next Acquire of member through the same Client claims what was
// handed to an earlier one; member therefore names one waiter, not a group.
func WithQueue(member string, score float64, liveness time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.queueMember, o.queueScore, o.queueLiveness = member, score, liveness }
}

// MaxPermits is the most holders WithPermits admits at once (and the number of slots the scripts
// look at, see slots.lua).
const MaxPermits = 64

// WithPermits acquires a slot of a semaphore of n permits (1..MaxPermits): up to n holders at once,
// each in its own slot (Lock.Slot) with its own fencing tokens, strictly increasing within the
// slot. Slot 0 is the plain lock's keys. How many the lock admits is what SetPermits stored, the
// semaphore's one writer (absent: 1); n only lowers it for this call (a free slot is granted while
// fewer than the lower of the two are held) and is never stored, so a caller that read a stale or
// deleted declaration cannot write back a number nobody declares any more. After the stored n is
// lowered, holders keep their slots and nobody acquires until fewer than the new n are held; after
// it is raised, the next acquisitions get the new slots. Once n is stored the lock stays a
// semaphore for every caller: an Acquire without the option finds that out in its first script,
// which changes nothing, and acquires a slot under the stored n with one more script call (its
// Lock is the slot's: see Lock.Semaphore); ReleaseToken, Dequeue and the Release of a plain lock
// acquired WithQueue likewise release slot 0, or dequeue, as the semaphore's scripts do. With
// WithQueue, the free slots go to the first waiters in line; without it, a caller gets a free slot
// only when more slots are free than live waiters stand in the queue. On Redlock, n > 1 is refused
// (ErrInvalidArgument): each node would choose its slot on its own, and no slot might reach a
// majority; n = 1 is the plain lock there. Default: a plain lock.
func WithPermits(n int) AcquireOption { return func(o *acquireOptions) { o.permits = n } }

// WithRecordedFence re-adopts the acquisition the caller recorded: granted under fence, in slot (0
// for a plain lock). If the caller's token released it under that fence, as the release mark says
// (WithReleaseMarkRetention), Acquire takes nothing, whoever holds the lock now, and returns
// ErrReleasedBefore: another process of the caller's, or an earlier call whose answer was lost,
// ended that acquisition, and taking a free lock afresh would start one the caller never asked
// for. The mark is read in the acquire script, so it costs no round trip. Without marks (always on
// Redlock) or with fence 0 the option changes nothing; it cannot be combined with WithQueue.
func WithRecordedFence(fence int64, slot int) AcquireOption {
	return func(o *acquireOptions) { o.recordedFence, o.recordedSlot = fence, slot }
}

// applyAcquireOptions applies opts over the defaults, checks them, and settles the token: the
// caller's, the one derived from the queue member, or a random one.
func (c *Client) applyAcquireOptions(o *acquireOptions, opts []AcquireOption) error {
	*o = acquireOptions{retry: NoRetry()}
	for _, opt := range opts {
		opt(o)
	}
	if err := validateToken(o.token); err != nil {
		return err
	}
	if o.token == "" && o.queueMember != "" {
		o.token = c.memberToken(o.queueMember)
	}
	if o.token == "" {
		t, err := newToken()
		if err != nil {
			return err
		}
		o.token = t
	}
	o.tokenArg = o.token
	if o.retry == nil {
		o.retry = NoRetry()
	}
	if err := c.settlePermits(o); err != nil {
		return err
	}
	if err := c.settleRecordedFence(o); err != nil {
		return err
	}
	if o.queueMember != "" {
		if o.queueLiveness < MinTTL {
			return invalidf("queue liveness %v: must be at least %v", o.queueLiveness, MinTTL)
		}
		if strings.ContainsRune(o.queueMember, 0) {
			return invalidf("queue member %q must not contain a NUL byte", o.queueMember)
		}
	}
	return nil
}

// settlePermits checks WithPermits' n: a semaphore needs one deployment (see WithPermits), where
// n = 1 is the plain lock.
func (c *Client) settlePermits(o *acquireOptions) error {
	switch {
	case o.permits == 0:
		return nil
	case o.permits < 1 || o.permits > MaxPermits:
		return invalidf("permits %d: must be 1..%d", o.permits, MaxPermits)
	case c.Admits(o.permits) < o.permits:
		return invalidf("permits %d: Redlock nodes would choose slots on their own; a semaphore needs one deployment", o.permits)
	case !c.handsOff():
		o.permits = 0
	}
	return nil
}

// semaphore reports whether an attempt runs the semaphore's script: WithPermits, or diverted.
func (o *acquireOptions) semaphore() bool { return o.permits > 0 || o.diverted }

// settleRecordedFence checks WithRecordedFence and decides whether the scripts read the mark.
func (c *Client) settleRecordedFence(o *acquireOptions) error {
	switch {
	case o.recordedFence == 0 && o.recordedSlot == 0:
		return nil
	case o.queueMember != "":
		return invalidf("a recorded fence re-adopts outside a queue: WithRecordedFence cannot be combined with WithQueue")
	case o.recordedFence < 0 || o.recordedSlot < 0 || o.recordedSlot >= MaxPermits:
		return invalidf("recorded fence %d in slot %d: the fence must not be negative, the slot must be 0..%d", o.recordedFence, o.recordedSlot, MaxPermits-1)
	case o.recordedFence > 0 && c.markRetention != noMarks:
		o.recordedArg = strconv.FormatInt(o.recordedFence, 10)
	}
	return nil
}
