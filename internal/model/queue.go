package model

import "fmt"

// The queue model: one Redis, one lock with its waiter queue, and three clients that each make one
// queued Acquire (Client.Acquire WithQueue), hold, write to a fenced store and release; a
// release hands the lock to the queue's head (queue.lua's handoff) and tells it on the release
// channel, which a client only takes as a wake-up. Its atomic steps are the scripts'
// (acquirequeued.lua, releasehandoff.lua, dequeue.lua, with queue.lua's prune and handoff),
// Redis' expiry, a waiter's liveness running out, the channel's delivery (and, with LoseMessages,
// its loss), and what a client does between two scripts: wake up and ask again, write, release,
// see its validity end, give up, crash.
//
// Time is reduced as in the single model: a holder's validity ends in a step of its own, and Redis
// may expire the lock only once the validity of the attempt that wrote it ended. A lock a release
// handed to a waiter was written for no attempt of that waiter (its lease is the waiter's ttl, at
// most what is left of its liveness), so Redis may expire it at any time until the waiter claims it
// by asking again, which re-adopts it with a lease of the claim's own.
//
// Abstracted, and why: a script's reply is read at once (replies that do not come, and the undo
// of their attempts, are the single model's); no replica and no clock term in the fence (the
// single model's too); a waiter's liveness deadline is pushed back while it lives (keepqueued.lua)
// and runs out only after it crashed; the release channel keeps at most one message per client,
// the latest (a later message makes an earlier one moot: both only wake).

// QueueMutation puts back one defect, for the mutation check.
type QueueMutation int8

const (
	// QueueAsBuilt is the protocol as built.
	QueueAsBuilt QueueMutation = iota
	// TrustHandoffMessage: a waiter told on the release channel that the lock was handed to it
	// holds it with the message's fence, without asking Redis (issue 25: anyone may publish on the
	// channel, and a message may come after the handed lease ran out).
	TrustHandoffMessage
	// ReleaseWithoutCompare: the release deletes the lock and hands it on without checking that it
	// holds the caller's token (a holder whose lease ran out releases its successor's lock).
	ReleaseWithoutCompare
	// HandoffWithoutFence: a handoff gives the lock to the head without taking the next fencing
	// token, so the head claims it with the counter its predecessor had.
	HandoffWithoutFence
	// PruneNothing: waiters have no liveness deadline, so one that crashed in line stays ahead of
	// the others for good.
	PruneNothing
)

// QueueConfig says which faults the queue model may take.
type QueueConfig struct {
	// Operator: the clients are an operator's claimants, as the fault suite's traces record them
	// (Follow; the model is not explored exhaustively so). A client's keeper may renew its lock
	// (renew.lua, which compares the token), and a client may release by its token or leave the
	// queue whatever it believes (a pass acts on what status records, which may be older than what
	// Redis did), and undo an attempt it got no answer for (undo.lua).
	Operator bool
	// Disturbed (with Operator): the clients, one bit each (client i+1 is bit i), whose operator the
	// fault hits: besides what Crash allows, such a client may crash any number of times and come
	// back (its operator killed, paused or cut off past its waiters' liveness, then back), and then
	// ask again or re-adopt with the plain acquire (acquire.lua, outside the queue), and a holder of
	// it may get no reply to the ask that granted it, and ask again.
	Disturbed uint8
	// Poll: a waiter also asks again when its backoff timer fires, not only when the channel tells
	// it (Client.awaitTurn).
	Poll bool
	// Crash lets one client crash once, at any point: it takes no more steps, its liveness runs out
	// and, if it held the lock, Redis expires it.
	Crash bool
	// LoseMessages lets the release channel drop a message (pub/sub delivers at most once).
	LoseMessages bool
	// GiveUp lets a waiter leave the queue (dequeue.lua), as a LockedJob deleted while it waits.
	GiveUp   bool
	Mutation QueueMutation
}

type queuePhase int8

const (
	qAsk     queuePhase = iota // about to ask (acquirequeued.lua)
	qWaiting                   // in line: waits for the channel or its timer
	qHolding                   // holds the lock and believes its lease valid
	qStale                     // its validity ended while it held: it stopped, and still releases by token
	qDone                      // released, or gave up
	qCrashed                   // takes no more steps (with Operator: until its operator starts again)
	qBack                      // Operator: started again after a crash; asks again or re-adopts
)

type message int8

const (
	noMessage message = iota
	freedMessage
	handoffMessage // the lock was handed to this client
)

type queueClient struct {
	pc     queuePhase
	queued bool    // in the queue (ZSET queue)
	alive  bool    // in the liveness set with a deadline ahead
	head   bool    // its last reply said it was first in line
	msg    message // the release channel's message to it, not delivered yet
	msgFnc int16   // the fence a handoff message named
	fence  int16   // the fence it holds with
	held   bool    // it held the lock at some point
}

type queueLock struct {
	owner int8 // 0: free; clients are 1..n
	// claimed: written by its owner's own ask (a fresh grant or a re-adoption), so it expires only
	// after that owner's validity ended; a lock a release handed over is not claimed yet.
	claimed bool
	// fresh (Operator only): written by a fresh grant and not re-adopted since, so it holds the
	// token marked with the attempt (holder.lua), which undo.lua removes.
	fresh bool
}

// MaxQueueClients bounds a queue model's clients (QueueInitN).
const MaxQueueClients = 7

// QueueState is one state of the queue model.
type QueueState struct {
	lock      queueLock
	counter   int16
	n         int8 // clients
	c         [MaxQueueClients]queueClient
	crashed   bool
	storeMax  int16
	storeBy   int8
	lastGrant int16
	broken    string
}

// QueueInit is the model's initial state: the lock free, every client about to ask. A client's
// score is its number: client 1 is ahead of 2, 2 of 3 (priority, then age).
func QueueInit() QueueState { return QueueInitN(3) }

// QueueInitN is the initial state with n clients (at most MaxQueueClients), numbered by score.
func QueueInitN(n int) QueueState {
	s := QueueState{n: int8(min(n, MaxQueueClients))}
	for i := range s.n {
		s.c[i].alive = true
	}
	return s
}

// QueueNext returns the model's steps from s.
func QueueNext(cfg QueueConfig) func(QueueState) []Step[QueueState] {
	return func(s QueueState) []Step[QueueState] {
		if s.broken != "" {
			return nil
		}
		var out []Step[QueueState]
		add := func(label string, n QueueState) { out = append(out, Step[QueueState]{label, n}) }
		for i := range int(s.n) {
			s.queueClientSteps(cfg, i, add)
			s.channelSteps(cfg, i, add)
		}
		s.queueRedisSteps(cfg, add)
		return out
	}
}

// queueClientSteps are what client i does between two scripts, and the scripts it calls.
func (s QueueState) queueClientSteps(cfg QueueConfig, i int, add func(string, QueueState)) {
	id := int8(i + 1)
	c := s.c[i]
	disturbed := cfg.Operator && cfg.Disturbed&(1<<i) != 0
	if (cfg.Crash && !s.crashed || disturbed) && c.pc != qDone && c.pc != qCrashed {
		n := s
		n.c[i].pc, n.crashed = qCrashed, true
		add(fmt.Sprintf("c%d crashes", id), n)
	}
	if cfg.Operator {
		s.operatorSteps(cfg, i, add)
	}
	switch c.pc {
	case qAsk:
		add(s.ask(cfg, i))
	case qWaiting:
		if cfg.Poll {
			n := s
			n.c[i].pc = qAsk
			add(fmt.Sprintf("c%d's backoff timer fires", id), n)
		}
		if cfg.GiveUp {
			add(fmt.Sprintf("c%d gives up (dequeue.lua)", id), s.dequeue(i))
		}
	case qHolding:
		if n := s.queueWrite(i); n != s {
			add(fmt.Sprintf("c%d writes to the store with fence %d", id, c.fence), n)
		}
		n := s
		n.c[i].pc = qStale
		add(fmt.Sprintf("c%d's validity ends: it stops its work", id), n)
		add(s.release(cfg, i, "releases"))
	case qStale:
		add(s.release(cfg, i, "releases late, by its token"))
	}
}

// channelSteps deliver (or lose) the release channel's message to client i. A waiter takes it as
// a wake-up (Client.awaitTurn): a handoff to it, or a lock freed while it is first in line, makes it
// ask again; any other message, or one that finds it not waiting, changes nothing.
func (s QueueState) channelSteps(cfg QueueConfig, i int, add func(string, QueueState)) {
	id := int8(i + 1)
	c := s.c[i]
	if c.msg == noMessage {
		return
	}
	n := s
	n.c[i].msg = noMessage
	if cfg.LoseMessages {
		add(fmt.Sprintf("the release channel loses c%d's message", id), n)
	}
	switch {
	case c.pc == qWaiting && c.msg == handoffMessage && cfg.Mutation == TrustHandoffMessage:
		n.c[i].pc, n.c[i].fence, n.c[i].held = qHolding, c.msgFnc, true
		add(fmt.Sprintf("c%d takes the handoff message for a grant with fence %d", id, c.msgFnc), n)
	case c.pc == qWaiting && (c.msg == handoffMessage || c.head):
		n.c[i].pc = qAsk
		add(fmt.Sprintf("c%d is told on the release channel and asks again", id), n)
	default:
		add(fmt.Sprintf("the release channel delivers c%d's message, which is not its turn", id), n)
	}
}

// operatorSteps are what an operator's claimant does besides the modelled client's steps (see
// QueueConfig.Operator).
func (s QueueState) operatorSteps(cfg QueueConfig, i int, add func(string, QueueState)) {
	id := int8(i + 1)
	c := s.c[i]
	if cfg.Disturbed&(1<<i) != 0 {
		switch c.pc {
		case qCrashed:
			n := s
			n.c[i].pc = qBack
			add(fmt.Sprintf("c%d's operator starts again", id), n)
			return
		case qBack:
			add(s.ask(cfg, i))
			n := s.readopt(i)
			add(fmt.Sprintf("c%d re-adopts (acquire.lua) → %s", id, grantOutcome(s, n, i, "is refused")), n)
		case qHolding:
			n := s
			n.c[i].pc = qAsk
			add(fmt.Sprintf("c%d gets no reply to the ask that granted it, and asks again", id), n)
		}
	}
	if c.pc == qCrashed {
		return
	}
	if c.pc != qHolding && c.pc != qStale {
		add(s.release(cfg, i, "releases"))
	}
	renewed := "not ours" // renew.lua compares the token; a keeper that still has the lock renews it
	if s.lock.owner == id {
		renewed = "renewed"
	}
	add(fmt.Sprintf("c%d renews (renew.lua) → %s", id, renewed), s)
	if c.pc != qWaiting || !cfg.GiveUp {
		add(fmt.Sprintf("c%d gives up (dequeue.lua)", id), s.dequeue(i))
	}
	n := s
	undone := "changes nothing"
	if l := s.lock; l.owner == id && l.fresh && c.pc != qHolding {
		n.lock, undone = queueLock{}, "removes the lock"
	}
	add(fmt.Sprintf("c%d undoes an attempt (undo.lua) → %s", id, undone), n)
}

// ask is client i's acquirequeued.lua, labelled with its outcome as Redis' writes show it.
func (s QueueState) ask(cfg QueueConfig, i int) (string, QueueState) {
	n := s.askQueued(cfg, i)
	return fmt.Sprintf("c%d asks (acquirequeued.lua) → %s", i+1, grantOutcome(s, n, i, "waits")), n
}

// grantOutcome names what an acquire by client i from s to n did: a re-adoption of a lock that
// held its token, a fresh grant, or none (refused).
func grantOutcome(s, n QueueState, i int, refused string) string {
	switch {
	case n.c[i].pc != qHolding:
		return refused
	case s.lock.owner == int8(i+1):
		return "re-adopts"
	}
	return "is granted"
}

// release is client i's releasehandoff.lua (how is how the client releases), labelled with whether
// it released: it deleted (and handed on) a lock, or found it not the caller's.
func (s QueueState) release(cfg QueueConfig, i int, how string) (string, QueueState) {
	n := s.releaseHandoff(cfg, i)
	released := "not ours"
	if n.lock != s.lock || n.counter != s.counter {
		released = "released"
	}
	return fmt.Sprintf("c%d %s (releasehandoff.lua) → %s", i+1, how, released), n
}

// readopt runs acquire.lua for client i with its own token, outside the queue: a lock that holds
// the token is re-adopted with the counter's fence, a free one granted afresh, another's refused.
func (s QueueState) readopt(i int) QueueState {
	id := int8(i + 1)
	n := s
	c := &n.c[i]
	switch s.lock.owner {
	case id:
		n.lock = queueLock{owner: id, claimed: true}
		c.pc, c.fence, c.held = qHolding, n.counter, true
		return n
	case 0:
		n.counter++
		n.lock = queueLock{owner: id, claimed: true, fresh: true}
		c.pc, c.fence, c.held = qHolding, n.counter, true
		return n.granted(i, n.counter)
	}
	c.pc = qDone // LockLost: it may still release by its token, or leave the queue
	return n
}

// queueRedisSteps are Redis' expiry of the lock and the end of a crashed waiter's liveness.
func (s QueueState) queueRedisSteps(cfg QueueConfig, add func(string, QueueState)) {
	if o := s.lock.owner; o != 0 && (!s.lock.claimed || s.c[o-1].pc != qHolding) {
		n := s
		n.lock = queueLock{}
		add(fmt.Sprintf("Redis expires c%d's lock", o), n)
	}
	for i, c := range s.c[:s.n] {
		if c.pc == qCrashed && c.alive && cfg.Mutation != PruneNothing {
			n := s
			n.c[i].alive = false
			add(fmt.Sprintf("c%d's liveness runs out", i+1), n)
		}
	}
}

// askQueued runs acquirequeued.lua for client i and reads its reply.
func (s QueueState) askQueued(cfg QueueConfig, i int) QueueState {
	id := int8(i + 1)
	n := s
	c := &n.c[i]
	if n.lock.owner == id {
		// Ours: handed to us by a release (or re-adopted): re-adopt, with the counter's fence.
		c.queued = false
		n.lock.claimed, n.lock.fresh = true, false
		c.pc, c.fence, c.held = qHolding, n.counter, true
		return n
	}
	if n.lock.owner == 0 {
		n.prune()
	}
	c.queued, c.alive = true, true
	if n.lock.owner != 0 || n.head() != i {
		c.pc, c.head = qWaiting, n.head() == i
		return n
	}
	c.queued = false
	n.counter++
	n.lock = queueLock{owner: id, claimed: true, fresh: cfg.Operator}
	c.pc, c.fence, c.held = qHolding, n.counter, true
	return n.granted(i, n.counter)
}

// granted checks a grant of fence f to client i against every earlier grant (property b).
func (s QueueState) granted(i int, f int16) QueueState {
	if f <= s.lastGrant && s.broken == "" {
		s.broken = fmt.Sprintf("b: c%d granted fence %d, not above the earlier grant's %d", i+1, f, s.lastGrant)
	}
	s.lastGrant = max(s.lastGrant, f)
	return s
}

// releaseHandoff runs releasehandoff.lua for client i: if the lock holds its token, delete it and
// hand it to the head (releaseToHead).
func (s QueueState) releaseHandoff(cfg QueueConfig, i int) QueueState {
	n := s
	n.c[i].pc = qDone
	if s.lock.owner != int8(i+1) && (cfg.Mutation != ReleaseWithoutCompare || s.lock.owner == 0) {
		return n
	}
	return n.releaseToHead(cfg)
}

// dequeue runs dequeue.lua for client i: leave the queue; a lock handed to it and not claimed yet
// (its ticket holds the token the lock holds), or a free lock with others in line, goes to the head.
func (s QueueState) dequeue(i int) QueueState {
	n := s
	n.c[i].pc, n.c[i].queued, n.c[i].alive = qDone, false, false
	if s.lock.owner == 0 {
		if n.anyQueued() {
			return n.releaseToHead(QueueConfig{})
		}
		return n
	}
	if s.lock.owner == int8(i+1) && !s.lock.claimed {
		return n.releaseToHead(QueueConfig{})
	}
	return n
}

// releaseToHead is queue.lua's: free the lock, hand it to the live head (the next fence, a lease of
// its own, out of the queue), and publish: to the head that it was handed the lock, to everyone
// that it was freed when nobody waits.
func (s QueueState) releaseToHead(cfg QueueConfig) QueueState {
	n := s
	n.lock = queueLock{}
	n.prune()
	h := n.head()
	if h < 0 {
		n.publishFreed()
		return n
	}
	if cfg.Mutation != HandoffWithoutFence {
		n.counter++
	}
	n.lock = queueLock{owner: int8(h + 1)}
	n.c[h].queued = false
	n.publishFreed()
	n.c[h].msg, n.c[h].msgFnc = handoffMessage, n.counter
	return n.granted(h, n.counter)
}

// publishFreed is a release's message to everyone: one that is still to be delivered a handoff is
// not overwritten, since both only wake and the handoff wakes its waiter in any case.
func (s *QueueState) publishFreed() {
	for j := range s.n {
		if s.c[j].msg == noMessage {
			s.c[j].msg = freedMessage
		}
	}
}

// prune drops the waiters whose liveness ran out.
func (s *QueueState) prune() {
	for j := range s.n {
		if !s.c[j].alive {
			s.c[j].queued = false
		}
	}
}

// head is the queued client with the lowest score (its number), or -1.
func (s QueueState) head() int {
	for j := range int(s.n) {
		if s.c[j].queued {
			return j
		}
	}
	return -1
}

func (s QueueState) anyQueued() bool { return s.head() >= 0 }

// queueWrite is client i's write to the fenced store (property c).
func (s QueueState) queueWrite(i int) QueueState {
	id, fence := int8(i+1), s.c[i].fence
	n := s
	switch {
	case fence > s.storeMax:
		n.storeMax, n.storeBy = fence, id
	case fence == s.storeMax && s.storeBy != id:
		n.broken = fmt.Sprintf("c: the store took fence %d from c%d and from c%d", fence, s.storeBy, id)
	}
	return n
}

// QueueCheck returns the property s breaks, or "": (a) no two clients hold and believe their
// leases valid at once, (b) and (c) as recorded by the steps.
func QueueCheck(s QueueState) string {
	if s.broken != "" {
		return s.broken
	}
	holding := 0
	for _, c := range s.c[:s.n] {
		if c.pc == qHolding {
			holding++
		}
	}
	if holding > 1 {
		return "a: two holders believe their leases valid at once"
	}
	return ""
}

// QueueDone is the goal of property (d): every client that did not crash is done, and every one
// that did not give up held the lock.
func QueueDone(giveUp bool) func(QueueState) bool {
	return func(s QueueState) bool {
		for _, c := range s.c[:s.n] {
			if c.pc == qCrashed {
				continue
			}
			if c.pc != qDone || (!giveUp && !c.held) {
				return false
			}
		}
		return true
	}
}
