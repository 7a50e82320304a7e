package model

import "fmt"

// The single-deployment model: one Redis primary with a replica it may fail over to, two clients
// that each make one Acquire of one lock (retrying its attempts), a fenced store their work writes
// to, and a clock. Its atomic steps are the scripts' (acquire.lua with holder.lua's grant mark and
// clock.lua's fence, undo.lua, release.lua), Redis' expiry, replication, the failover, a clock tick,
// and what a client does between two scripts: read a reply, give up on an attempt whose reply did
// not come (its script may still run later), write to the store, release, see its validity end.
//
// Time is abstracted to what orders leases: each attempt's validity (counted from its send, ttl less
// the drift allowance) ends in a step of its own, at any point after the send, and Redis may expire
// the lock only once the validity of every attempt whose script wrote it has ended (a script that
// runs later writes a later expiry; the drift assumption does the rest), unless a pause is allowed. A reply read after its attempt's validity ended grants
// nothing (the library's "lease ran out while acquiring"). A holder does not renew.
//
// Abstracted: the lock has no metadata, no queue and one slot; a client's late undo of an attempt is one script that may run at any time after the client gave
// up, before or after that attempt's own script (the library repeats it until the lease would have
// ended, so it also runs after).

// SingleMutation puts back one defect fixed in issue 9, for the mutation check.
type SingleMutation int8

const (
	// SingleAsBuilt is the protocol as built.
	SingleAsBuilt SingleMutation = iota
	// UndoWithoutGrantMark: the undo of a failed attempt deletes the lock when it holds the caller's
	// token, not only when it holds this attempt's grant mark (issue 9, the late release).
	UndoWithoutGrantMark
	// FenceFromCounterOnly: the fence is counter + 1, without the clock term (issue 9, the
	// fence that repeats after a failover lost the counter's last write).
	FenceFromCounterOnly
	// ShortfallUndoesReadoption: WithWaitReplicas undoes a re-adoption whose WAIT fell short, as it
	// undoes a fresh grant (issue 9: the lock deleted from under the holder that re-adopted it).
	ShortfallUndoesReadoption
)

// SingleConfig bounds the single-deployment model and says which faults it may take.
type SingleConfig struct {
	Attempts int // attempts per client's Acquire
	Ticks    int // clock ticks the model may take
	// Failover lets the replica take over once, losing the writes it had not received; the
	// failover takes FailoverTicks of the clock (the clock-skew assumption: the new primary's
	// clock is past the old one's by more than the counter ran ahead of the clock).
	Failover      bool
	FailoverTicks int
	// Pause lets Redis expire a holder's lock while the holder still believes its lease valid (a
	// process paused past its ttl after it checked the lease). A pause before that check is
	// caught by it, and is the model's "validity ends" step.
	Pause bool
	// Readopt lets a holder acquire again with its token while its work runs, as an operator
	// that restarted re-adopts the locks of its running Jobs; it counts against Attempts.
	Readopt bool
	// WaitReplicas: every acquire script is followed by WAIT, which may fall short; a fresh grant
	// that fell short is undone and fails, a re-adoption fails and keeps the lock.
	WaitReplicas bool
	Mutation     SingleMutation
}

type lockValue struct {
	owner   int8  // 0: free; clients are 1 and 2
	mark    int8  // the attempt of a fresh grant (holder.lua's grant mark); 0 once re-adopted
	writers uint8 // the attempts whose scripts wrote the lock: their validities bound the expiry
}

type redisData struct {
	lock    lockValue
	counter int16 // the fence counter (no TTL)
}

type phase int8

const (
	idle    phase = iota // may start an attempt
	waiting              // sent an attempt, has not read its reply
	holding              // holds the lock: its work may run while valid
	done
)

type reply int8

const (
	noReply reply = iota
	busyReply
	grantedReply
	failedReply // an error that is no refusal: the WAIT fell short
)

type singleClient struct {
	pc       phase
	attempt  int8  // attempts made
	inflight uint8 // attempts (bit k-1) whose acquire script has not run yet
	undo     uint8 // attempts whose undo script has not run yet
	over     uint8 // attempts whose validity has ended
	got      reply // the reply to the attempt it waits for, once that attempt's script ran
	gotFence int16
	fence    int16 // the held fence
	via      int8  // the attempt whose lease the holder's validity counts from
	valid    bool  // holds, and believes its lease valid
}

// SingleState is one state of the single-deployment model.
type SingleState struct {
	primary, replica redisData
	clock            int16
	ticks            int8
	failedOver       bool
	c                [2]singleClient
	storeMax         int16 // the fenced store's highest fence accepted
	storeBy          int8  // who wrote with it
	lastGrant        int16 // the highest fence a fresh grant handed out
	broken           string
}

// SingleInit is the model's initial state: lock free, counter 0, clock at 1.
func SingleInit() SingleState { return SingleState{clock: 1} }

// SingleNext returns the model's steps from s.
func SingleNext(cfg SingleConfig) func(SingleState) []Step[SingleState] {
	return func(s SingleState) []Step[SingleState] {
		if s.broken != "" {
			return nil
		}
		var out []Step[SingleState]
		add := func(label string, n SingleState) { out = append(out, Step[SingleState]{label, n}) }
		for i := range s.c {
			s.clientSteps(cfg, i, add)
			s.serverSteps(cfg, i, add)
		}
		s.worldSteps(cfg, add)
		return out
	}
}

// clientSteps are what client i does between two scripts.
func (s SingleState) clientSteps(cfg SingleConfig, i int, add func(string, SingleState)) {
	id := int8(i + 1)
	c := s.c[i]
	switch {
	case c.pc == idle && int(c.attempt) < cfg.Attempts:
		n := s
		n.c[i].attempt++
		n.c[i].inflight |= bit(n.c[i].attempt)
		n.c[i].pc, n.c[i].got = waiting, noReply
		add(fmt.Sprintf("c%d sends attempt %d", id, n.c[i].attempt), n)
	case c.pc == waiting && c.got == noReply:
		n := s
		n.c[i].undo |= bit(c.attempt)
		n.c[i].pc = next(c, cfg)
		add(fmt.Sprintf("c%d gives up on attempt %d (no reply) and undoes it late", id, c.attempt), n)
	case c.pc == waiting && (c.got == busyReply || c.got == failedReply):
		n := s
		n.c[i].pc = next(c, cfg)
		add(fmt.Sprintf("c%d is refused or fails", id), n)
	case c.pc == waiting && c.got == grantedReply && c.over&bit(c.attempt) != 0:
		n := s
		n.c[i].undo |= bit(c.attempt)
		n.c[i].pc = next(c, cfg)
		add(fmt.Sprintf("c%d finds its lease ran out while acquiring, and undoes the attempt", id), n)
	case c.pc == waiting && c.got == grantedReply:
		n := s
		n.c[i].pc, n.c[i].fence, n.c[i].valid, n.c[i].via = holding, c.gotFence, true, c.attempt
		add(fmt.Sprintf("c%d holds with fence %d", id, c.gotFence), n)
	case c.pc == holding && c.valid:
		if cfg.Readopt && int(c.attempt) < cfg.Attempts {
			n := s
			n.c[i].attempt++
			n.c[i].inflight |= bit(n.c[i].attempt)
			add(fmt.Sprintf("c%d restarts and re-adopts with attempt %d while its work runs", id, n.c[i].attempt), n)
		}
		if n := s.write(i); n != s {
			add(fmt.Sprintf("c%d writes to the store with fence %d", id, c.fence), n)
		}
		n := s
		if s.primary.lock.owner == id {
			n.primary.lock = lockValue{} // release.lua: compare the token, DEL
		}
		n.c[i].pc, n.c[i].valid = done, false
		add(fmt.Sprintf("c%d releases", id), n)
	}
}

// write is client i's write to the fenced store.
func (s SingleState) write(i int) SingleState {
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

// serverSteps are the scripts of client i's attempts, the end of their validity, and Redis'
// expiry of client i's lock.
func (s SingleState) serverSteps(cfg SingleConfig, i int, add func(string, SingleState)) {
	id := int8(i + 1)
	c := s.c[i]
	for k := int8(1); k <= c.attempt; k++ {
		if c.over&bit(k) == 0 {
			n := s
			n.c[i].over |= bit(k)
			if c.pc == holding && c.valid && k == c.via {
				n.c[i].pc, n.c[i].valid = done, false
			}
			add(fmt.Sprintf("c%d's validity for attempt %d ends", id, k), n)
		}
		if c.inflight&bit(k) != 0 {
			label := fmt.Sprintf("acquire script of c%d attempt %d runs", id, k)
			n := s.acquire(cfg, i, k)
			add(label, n)
			if cfg.WaitReplicas {
				if f, ok := s.shortfall(cfg, n, i, k); ok {
					add(label+", and its WAIT falls short", f)
				}
			}
		}
		if c.undo&bit(k) != 0 {
			add(fmt.Sprintf("undo script of c%d attempt %d runs", id, k), s.runUndo(cfg, i, k))
		}
	}
	if l := s.primary.lock; l.owner == id && (l.writers&^c.over == 0 || (cfg.Pause && c.pc == holding)) {
		n := s
		n.primary.lock = lockValue{}
		add(fmt.Sprintf("Redis expires c%d's lock", id), n)
	}
}

// worldSteps are the clock's tick, replication and the failover.
func (s SingleState) worldSteps(cfg SingleConfig, add func(string, SingleState)) {
	if int(s.ticks) < cfg.Ticks {
		n := s
		n.clock++
		n.ticks++
		add("the clock ticks", n)
	}
	if !cfg.Failover || s.failedOver {
		return
	}
	if s.replica != s.primary {
		n := s
		n.replica = s.primary
		add("the replica catches up", n)
	}
	n := s
	n.primary, n.replica = s.replica, redisData{} // one failover at most: no replica after it
	n.clock += int16(cfg.FailoverTicks)
	n.failedOver = true
	add("the replica takes over, losing what it had not received", n)
}

// next is where a client goes after an attempt that got it nothing: another attempt, or done.
func next(c singleClient, cfg SingleConfig) phase {
	if int(c.attempt) < cfg.Attempts {
		return idle
	}
	return done
}

func bit(k int8) uint8 { return 1 << (k - 1) }

// acquire runs acquire.lua for client i's attempt k on the primary.
func (s SingleState) acquire(cfg SingleConfig, i int, k int8) SingleState {
	id := int8(i + 1)
	n := s
	n.c[i].inflight &^= bit(k)
	var got reply
	var fence int16
	p := &n.primary
	switch p.lock.owner {
	case 0:
		fence = p.counter + 1
		if cfg.Mutation != FenceFromCounterOnly {
			fence = max(fence, s.clock)
		}
		p.lock, p.counter = lockValue{owner: id, mark: k, writers: bit(k)}, fence
		got = grantedReply
		if fence <= s.lastGrant {
			n.broken = fmt.Sprintf("b: c%d attempt %d granted fence %d, not above the earlier grant's %d", id, k, fence, s.lastGrant)
		}
		n.lastGrant = max(s.lastGrant, fence)
	case id:
		// A re-adoption writes the bare token (the grant mark is gone) with a new lease.
		p.lock.mark = 0
		p.lock.writers |= bit(k)
		got, fence = grantedReply, p.counter
	default:
		got = busyReply
	}
	switch c := &n.c[i]; {
	case c.pc == waiting && c.attempt == k:
		c.got, c.gotFence = got, fence
	case c.pc == holding && c.attempt == k && got == busyReply:
		c.pc, c.valid = done, false // its re-adoption found the lock gone: it stops its work
	case c.pc == holding && c.attempt == k && c.over&bit(k) == 0:
		c.via = k // re-adopted in time: the lease now counts from this attempt
	}
	return n
}

// shortfall is n, the state after client i's attempt k's acquire script, when the WAIT after it
// fell short (runAcquire): a fresh grant is undone, a re-adoption kept; either way the attempt
// fails. ok is false when the script granted nothing, so there is nothing to fall short of.
func (s SingleState) shortfall(cfg SingleConfig, n SingleState, i int, k int8) (SingleState, bool) {
	id := int8(i + 1)
	l := n.primary.lock
	if l.owner != id {
		return n, false
	}
	readopted := s.primary.lock.owner == id
	if !readopted || cfg.Mutation == ShortfallUndoesReadoption {
		n.primary.lock = lockValue{}
	}
	if c := &n.c[i]; c.pc == waiting && c.attempt == k {
		c.got = failedReply
	}
	n.c[i].via = s.c[i].via // a re-adoption that failed gave the holder no new lease
	return n, true
}

// runUndo runs undo.lua for client i's attempt k on the primary.
func (s SingleState) runUndo(cfg SingleConfig, i int, k int8) SingleState {
	id := int8(i + 1)
	n := s
	n.c[i].undo &^= bit(k)
	l := n.primary.lock
	if l.owner == id && (l.mark == k || cfg.Mutation == UndoWithoutGrantMark) {
		n.primary.lock = lockValue{}
	}
	return n
}

// SingleCheck returns the property s breaks, or "". exclusion says whether (a) is checked: only
// while the model's assumptions hold (no failover, no pause).
func SingleCheck(exclusion bool) func(SingleState) string {
	return func(s SingleState) string {
		if s.broken != "" {
			return s.broken
		}
		if exclusion && s.c[0].valid && s.c[1].valid {
			return "a: two holders believe their leases valid at once"
		}
		return ""
	}
}
