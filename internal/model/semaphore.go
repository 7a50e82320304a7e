package model

import "fmt"

// The semaphore model: one Redis with a lock of three slots and its permits key, the user's Lock
// (its spec.permits, changed at any time, or deleted), the per-lock view that is the one writer of
// the permits (SetPermits, setpermits.lua, some time after the spec changed), and three clients
// that each acquire twice with the N their cache read of the Lock (a stale one, or none: a plain
// Acquire), hold one slot, and release it. Its atomic steps are the scripts' (acquire.lua, which
// sends a plain caller on to the semaphore's script when the permits key exists; acquireslots.lua;
// releaseslot.lua and release.lua; setpermits.lua), the user's edit, the view's write, a client's
// read of its cache.
//
// Property (e): a grant never leaves more slots held than the N the view last wrote (absent: 1).
// Lowering N lets holders keep their slots (the scripts count every slot), so more may be held
// than N for a while, but no grant makes it so.
//
// Abstracted, and why: no queue (the queue model has it; here callers retry), no expiry, no replies
// that do not come and no fences (the single model's); the view writes the Lock's N as it reads
// it, and rewrites it whenever it likes (its resync), which is what makes a Lock's deletion take
// effect once its last slot above 0 is free.

// SemaphoreMutation puts back one defect, for the mutation check.
type SemaphoreMutation int8

const (
	// SemaphoreAsBuilt is the protocol as built.
	SemaphoreAsBuilt SemaphoreMutation = iota
	// StoreCallerPermits: every acquisition stores its caller's N, as before issue 23, so a caller
	// whose cache had not seen the Lock lowered or deleted writes the old N back.
	StoreCallerPermits
	// RetireWhileHeldAbove: SetPermits(1) deletes the permits while a slot above 0 is held, so a
	// plain caller takes slot 0 beside that holder.
	RetireWhileHeldAbove
	// PlainIgnoresPermits: acquire.lua grants slot 0 without looking at the permits key (no divert).
	PlainIgnoresPermits
)

const semSlots = 3

type semPhase int8

const (
	semRead     semPhase = iota // about to read the Lock from its cache
	semPlain                    // sends acquire.lua (no Lock in its cache)
	semSlotsAsk                 // sends acquireslots.lua with its N (0: a plain caller sent on)
	semHolding
	semDone
)

type semClient struct {
	pc     semPhase
	n      int8 // the N it asks with (0: plain)
	rounds int8 // acquisitions made
	slot   int8 // the slot it holds
}

// SemaphoreState is one state of the semaphore model.
type SemaphoreState struct {
	slots    [semSlots]int8 // owner of each slot, 0 when free
	permits  int8           // the stored N; 0 when the key is absent
	declared int8           // the Lock's spec.permits; 0 when there is no Lock
	applied  int8           // the N the view last wrote (1 before any write, as absent)
	edits    int8           // the user's edits so far
	c        [3]semClient
	broken   string
}

// SemaphoreConfig bounds the model.
type SemaphoreConfig struct {
	Rounds   int // acquisitions per client
	Edits    int // edits of the Lock by the user
	Mutation SemaphoreMutation
}

// SemaphoreInit: no Lock, a plain lock, every client about to read.
func SemaphoreInit() SemaphoreState { return SemaphoreState{applied: 1} }

// SemaphoreNext returns the model's steps from s.
func SemaphoreNext(cfg SemaphoreConfig) func(SemaphoreState) []Step[SemaphoreState] {
	return func(s SemaphoreState) []Step[SemaphoreState] {
		if s.broken != "" {
			return nil
		}
		var out []Step[SemaphoreState]
		add := func(label string, n SemaphoreState) { out = append(out, Step[SemaphoreState]{label, n}) }
		if int(s.edits) < cfg.Edits {
			for d := int8(0); d <= semSlots; d++ {
				if d != s.declared {
					n := s
					n.declared, n.edits = d, s.edits+1
					add(fmt.Sprintf("the user sets the Lock's permits to %d (0: deletes it)", d), n)
				}
			}
		}
		if n := s.setPermits(cfg); n != s {
			add(fmt.Sprintf("the view writes N = %d (setpermits.lua)", max(s.declared, 1)), n)
		}
		for i := range s.c {
			s.semClientSteps(cfg, i, add)
		}
		return out
	}
}

// setPermits runs setpermits.lua with the Lock's N (1 for no Lock).
func (s SemaphoreState) setPermits(cfg SemaphoreConfig) SemaphoreState {
	n := s
	want := max(s.declared, 1)
	n.applied = want
	if want == 1 {
		if s.permits == 0 {
			return n // a plain lock stays plain
		}
		above := false
		for _, o := range s.slots[1:] {
			above = above || o != 0
		}
		if !above || cfg.Mutation == RetireWhileHeldAbove {
			n.permits = 0
			return n
		}
	}
	n.permits = want
	return n
}

func (s SemaphoreState) semClientSteps(cfg SemaphoreConfig, i int, add func(string, SemaphoreState)) {
	id := int8(i + 1)
	c := s.c[i]
	switch c.pc {
	case semRead:
		if int(c.rounds) >= cfg.Rounds {
			n := s
			n.c[i].pc = semDone
			add(fmt.Sprintf("c%d is done", id), n)
			return
		}
		// Its cache may lag: it asks with any N, 0 to 3, so every lag is covered (and N that no
		// Lock ever declared, as a caller that is wrong): the view's write bounds the grants, not
		// the caller's N.
		for d := int8(0); d <= semSlots; d++ {
			n := s
			n.c[i].n = d
			n.c[i].pc = semSlotsAsk
			if d == 0 {
				n.c[i].pc = semPlain
			}
			add(fmt.Sprintf("c%d asks with N = %d (0: plain)", id, d), n)
		}
	case semPlain:
		add(fmt.Sprintf("acquire.lua of c%d runs", id), s.acquirePlain(cfg, i))
	case semSlotsAsk:
		add(fmt.Sprintf("acquireslots.lua of c%d runs (N = %d)", id, c.n), s.acquireSlots(cfg, i))
	case semHolding:
		n := s
		if s.slots[c.slot] == id {
			n.slots[c.slot] = 0
		}
		n.c[i].pc = semRead
		add(fmt.Sprintf("c%d releases slot %d", id, c.slot), n)
	}
}

// acquirePlain runs acquire.lua: a lock with permits is a semaphore, and the caller is sent on to
// acquireslots.lua with N 0 (the stored N alone); else slot 0 if it is free.
func (s SemaphoreState) acquirePlain(cfg SemaphoreConfig, i int) SemaphoreState {
	n := s
	if s.permits != 0 && cfg.Mutation != PlainIgnoresPermits {
		n.c[i].pc, n.c[i].n = semSlotsAsk, 0
		return n
	}
	if s.slots[0] != 0 {
		n.c[i].pc = semRead
		return n
	}
	return n.grant(i, 0)
}

// acquireSlots runs acquireslots.lua for client i: a free slot under the lower of its N and the
// stored N, counting every held slot.
func (s SemaphoreState) acquireSlots(cfg SemaphoreConfig, i int) SemaphoreState {
	n := s
	asked := s.c[i].n
	if cfg.Mutation == StoreCallerPermits && asked > 0 {
		n.permits = asked
	}
	limit := max(n.permits, 1)
	if asked > 0 && asked < limit {
		limit = asked
	}
	held := int8(0)
	for _, o := range n.slots {
		if o != 0 {
			held++
		}
	}
	if held < limit {
		for slot := int8(0); slot < limit; slot++ {
			if n.slots[slot] == 0 {
				return n.grant(i, slot)
			}
		}
	}
	n.c[i].pc = semRead
	return n
}

// grant gives client i the slot and checks property (e).
func (s SemaphoreState) grant(i int, slot int8) SemaphoreState {
	n := s
	n.slots[slot] = int8(i + 1)
	n.c[i].pc, n.c[i].slot, n.c[i].rounds = semHolding, slot, s.c[i].rounds+1
	held := int8(0)
	for _, o := range n.slots {
		if o != 0 {
			held++
		}
	}
	if held > s.applied {
		n.broken = fmt.Sprintf("e: c%d granted slot %d with %d slots held, above N = %d as the view last wrote it", i+1, slot, held, s.applied)
	}
	return n
}

// SemaphoreCheck returns the property s breaks, or "".
func SemaphoreCheck(s SemaphoreState) string { return s.broken }
