package lockedjob

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/model"
)

// The operator in the model (issue 25; docs/model.md, "The operator model"). internal/model checks
// the lock protocol's scripts and clients; this checks the reconciler above them: two LockedJobs of
// one lock, the API server (each LockedJob with its resourceVersion, and the writes conditional on
// it), the operator's cache of LockedJobs (behind the API server until it catches up), the lock
// book, passes of Reconcile whose decisions are made by the real decide, the Job controller and
// the kubelet, Redis (owner, fence counter, a lease that runs out when nobody renews it), an
// operator crash and restart, and users who delete a Job or a LockedJob. Every API write and every
// Redis call of a pass is one atomic step; anything may happen between two of them. The effects of
// each step restate act.go and the files it calls; decide is not restated but called.
//
// Abstracted: the Redis queue (a waiter asks again in a later pass; internal/model's queue model
// checks handoffs), Events, conditions beyond LockAcquired, observedGeneration, messages, the Job
// cache (a Job is read as the API server has it, which observe's fallback to the API reader gives
// for a Job the cache lacks), onLockLost (Delete: what matters is that the pod goes), Redis
// failing; a second operator only as a deposed leader beside its successor (Deposed), for one
// LockedJob.

type mJob uint8

const (
	mJobNone     mJob = iota // never created, or none of the name a pass looks for
	mJobActive               // exists, without a condition
	mJobComplete             // exists, Complete
	mJobDeleted              // existed and was deleted; its pod may still be terminating
)

type mPod uint8

const (
	podNone mPod = iota
	podRunning
	podSucceeded
	podGone // deleted after its Job
)

type mPhase uint8

const (
	phNone mPhase = iota
	phPending
	phWaiting
	phRunning
	phSucceeded
	phFailed
	phLockLost
)

func (p mPhase) terminal() bool { return p >= phSucceeded }

var phaseNames = [...]string{"-", "Pending", "Waiting", "Running", "Succeeded", "Failed", "LockLost"}

// mStatus is the part of a LockedJob's status the protocol reads.
type mStatus struct {
	phase    mPhase
	fence    uint8 // fencingToken; 0: none
	job      uint8 // jobName, named by the fence it was made under; 0: none
	held     bool  // LockAcquired True
	uid      bool  // jobUID recorded
	released bool  // releasedAt
}

// mObject is a LockedJob as the API server, the cache or a pass has it.
type mObject struct {
	rv   uint8 // resourceVersion
	fin  bool  // the finalizer
	del  bool  // deletionTimestamp
	gone bool  // deleted from the API server
	st   mStatus
}

// mBook is the lock book's record of one LockedJob.
type mBook struct {
	holding  uint8 // fence of the lock in hand (renewed by the keeper); 0: none
	job      uint8 // the fence whose Job the book bound (BindJob)
	created  bool  // MarkJobCreated
	released bool
	lost     bool
	gaveUp   bool // the keeper gave the lock up in a stall and renews it no more
}

// mObs is a pass's observation: what decide reads.
type mObs struct {
	deleting, fin, terminal, held, released, uid, settled, holding, lost bool
	job                                                                  mJob // mJobNone, mJobActive or mJobComplete
}

// The external actions of the steps (one API write or Redis call each), in the order act.go makes
// them.
type mAction uint8

const (
	aAddFinalizer mAction = iota
	aAcquire
	aRecordFence
	aCreateJob
	aReadopt
	aStopJob
	aReleaseFinish
	aRecordOutcome
	aReleaseOutcome
	aRecordReleased
	aLetGo
	aReleaseAfterEnd
	aJobGone
	aReleaseGone
	aDeleteReadopt
	aDeleteJob
	aDeleteRelease
	aRecord // the closing status write of every pass (record.go)
)

var actionNames = [...]string{"adds the finalizer", "acquires", "records the fence", "creates the Job", "re-adopts",
	"stops the Job", "releases (finish)", "records the outcome", "releases at the pod's outcome", "records the release",
	"lets go", "releases after the end", "records a gone Job's end", "releases (Job gone)", "re-adopts (deleting)", "deletes the Job", "releases (deleting)",
	"records status"}

// plans are the actions each step makes; a step without any ends the pass.
var plans = map[step][]mAction{
	stepAddFinalizer:     {aAddFinalizer},
	stepAcquire:          {aAcquire},
	stepCreateJob:        {aRecordFence, aCreateJob},
	stepReadopt:          {aReadopt},
	stepLoseLock:         {aStopJob},
	stepFinish:           {aReleaseFinish, aRecordOutcome},
	stepReleaseAtOutcome: {aReleaseOutcome, aRecordReleased},
	stepForget:           {aLetGo},
	stepReleaseAfterEnd:  {aReleaseAfterEnd},
	stepJobGone:          {aJobGone, aReleaseGone},
	stepDeleteReadopt:    {aDeleteReadopt},
	stepDeleteJob:        {aDeleteJob},
	stepDeleteRelease:    {aDeleteRelease},
}

// mPass is a pass of Reconcile in progress.
type mPass struct {
	on     bool
	st     step
	k      uint8 // index of its next action in plans[st]; len: the closing record
	steps  uint8 // decisions made (maxStepsPerPass)
	o      mObs
	w      mObject // p.lj: the pass's copy
	base   uint8   // p.before's resourceVersion: every write is conditional on it
	baseSt mStatus // p.before's status: what the closing record compares with
}

type opState struct {
	api, cache [2]mObject
	book       [2]mBook
	pass       [2]mPass
	job        [2]mJob
	jobFence   [2]uint8
	pod        [2]mPod
	creates    [2]uint8
	// Redis: the lock's owner (LockedJob index + 1; its token is derived, so the same after a
	// restart), the fence its grant had, and the fence counter.
	owner, ownerFence, counter uint8
	// mark is the fence of each LockedJob's last release by its token (releasemark.lua; 0: none):
	// kept for a retention longer than the model's operator is ever away.
	mark             [2]uint8
	down, crashed    bool
	stalled          bool // the keeper gave a lock up in a stall (once)
	jobDeletedByUser bool
	ljDeletedByUser  bool
	unrecorded       bool    // a Job was created under a fence status did not record
	cancelled        bool    // the user deleted A's Job before its pod succeeded
	lostTruly        [2]bool // the LockedJob's lease ran out while it held the lock
	readoptedLost    bool    // a pass took a lock for a LockedJob the API server has LockLost
	// old is a deposed leader (Deposed): it lost its lease in a pause and goes on, its passes beside
	// its successor's, until it sees the lease gone and exits.
	old     opProc
	deposed bool
}

// opProc is an operator process's memory: its cache, book and passes.
type opProc struct {
	on    bool
	cache [2]mObject
	book  [2]mBook
	pass  [2]mPass
}

// swapOld puts the deposed leader's memory where the steps read the operator's, and back.
func (s opState) swapOld() opState {
	s.cache, s.old.cache = s.old.cache, s.cache
	s.book, s.old.book = s.old.book, s.book
	s.pass, s.old.pass = s.old.pass, s.pass
	return s
}

type opMutation uint8

const (
	_ opMutation = iota // as built
	// CreateBeforeFence creates the Job without recording its fence first (issue 9, #19).
	opCreateBeforeFence
	// ForgetJobUID never records the Job's UID (issue 9, #11: a Job deleted out of band is created
	// again).
	opForgetJobUID
	// WriteWithoutLock makes status writes unconditional: a pass that read a stale LockedJob writes
	// over what a later one recorded.
	opWriteWithoutLock
	// BookForgetsRelease: the book does not remember a release, so a pass that read a LockedJob
	// from before it releases again.
	opBookForgetsRelease
	// BookForgetsJob: the book does not remember the Job it created (MarkJobCreated), so a pass
	// that read a LockedJob from before its UID was recorded takes a Job deleted since for one
	// never made.
	opBookForgetsJob
	// NoReleaseMark: a release leaves no mark, so a restarted operator that asks again cannot tell
	// its own release from a lease that ran out (the protocol before the mark).
	opNoReleaseMark
	// BookForgetsLoss: the book forgets a lock once the loss is acted on (the Job stopped), so a
	// pass that read the LockedJob from before its LockLost record finds a fence and no lock in the
	// book and re-adopts it (issue 9, #28).
	opBookForgetsLoss
	// ReadoptWithoutMark: a re-adoption does not ask the release mark whether the recorded
	// acquisition was ended by a release of its own (the protocol before the deposed leader was
	// modelled), so it takes a lock a deposed leader released afresh, or finds it another's, and
	// ends the LockedJob LockLost.
	opReadoptWithoutMark
	// KeeperWithoutMark: a lock the keeper finds gone is lost, even when the release mark says a
	// release by its token ended it (a successor's, while this deposed leader did not know it yet).
	opKeeperWithoutMark
)

type opConfig struct {
	Crash  bool // the operator may crash once, and restart
	Outage bool // a lease nobody renews may run out (an operator away past the ttl)
	// Stall: the keeper may give a lock up once, its validity run out in a stall (renewals that did
	// not come back in time) while its key lives on in Redis until its ttl.
	Stall bool
	// Deposed: the leader may pause past its leader lease once; another operator then leads (a
	// fresh book, its cache listed afresh) while the deposed one, resumed, goes on with its passes,
	// its keeper and its book until it sees its lease gone and exits.
	Deposed bool
	// Alone: LockedJob A only (B never exists), to bound a configuration whose races are between
	// two operators over one LockedJob.
	Alone           bool
	DeleteJob       bool // a user may delete the first LockedJob's Job once, out of band
	DeleteLockedJob bool // a user may delete the first LockedJob
	Mutation        opMutation
	Skip            string // properties not checked (letters), for a configuration that breaks one on purpose
}

var errModelLost = errors.New("lost")

var (
	modelLock        = &lockbook.Lock{}
	modelJobActive   = &batchv1.Job{}
	modelJobComplete = &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}
)

// real is the observation decide takes.
func (o mObs) real() observation {
	r := observation{deleting: o.deleting, hasFinalizer: o.fin, terminal: o.terminal, lockRecorded: o.held,
		scopeAllowed: true, released: o.released, jobCreated: o.uid, settled: o.settled}
	if o.holding {
		r.holding = modelLock
	}
	if o.lost {
		r.lost = errModelLost
	}
	switch o.job {
	case mJobActive:
		r.job = modelJobActive
	case mJobComplete:
		r.job = modelJobComplete
	}
	return r
}

func ljName(i int) string { return string(rune('A' + i)) }

func opInit() opState {
	var s opState
	for i := range 2 {
		s.api[i] = mObject{rv: 1}
	}
	s.cache = s.api
	return s
}

// opNext is every step of the world from s.
func opNext(cfg opConfig) func(opState) []model.Step[opState] {
	return func(s opState) []model.Step[opState] {
		var out []model.Step[opState]
		add := func(label string, n opState) { out = append(out, model.Step[opState]{Label: label, Next: n}) }
		for i := range 2 {
			name := ljName(i)
			if s.cache[i] != s.api[i] {
				n := s
				n.cache[i] = s.api[i]
				add("the cache catches up on "+name, n)
			}
			if !s.down {
				operatorSteps(s, i, cfg, add)
			}
			jobWorld(s, i, add)
			if cfg.Stall && !s.stalled && !s.down && s.book[i].holding != 0 && !s.book[i].lost && s.owner == uint8(i+1) {
				n := s
				n.book[i].lost, n.book[i].gaveUp, n.stalled = true, true, true
				n.lostTruly[i] = true // its validity ended while it held: its lease may be gone
				add("the keeper gives "+name+"'s lock up: its validity ran out in a stall (the key lives on)", n)
			}
		}
		if s.old.on {
			// The deposed leader acts for A (the configuration has A alone: its races are between
			// the two operators over one LockedJob).
			d := s.swapOld()
			if d.cache[0] != d.api[0] {
				n := d
				n.cache[0] = d.api[0]
				add("the deposed leader's cache catches up on A", n.swapOld())
			}
			operatorSteps(d, 0, cfg, func(label string, n opState) { add("the deposed leader: "+label, n.swapOld()) })
			n := s
			n.old = opProc{}
			add("the deposed leader sees its lease gone and exits", n)
		}
		if cfg.Deposed && !s.deposed && !s.down {
			n := s
			n.deposed = true
			n.old = opProc{on: true, cache: s.cache, book: s.book, pass: s.pass}
			n.cache, n.book, n.pass = s.api, [2]mBook{}, [2]mPass{}
			add("the leader pauses past its lease; another operator leads (its cache listed afresh)", n)
		}
		// A lease nobody renews runs out after its ttl. Without Outage the operator is back (and
		// re-adopts) sooner wherever status records the lock held; a lock only the token names (a
		// crash between the grant and its record, a pass that read a stale cache) or one of a
		// LockedJob that is gone is left to run out.
		if s.owner != 0 {
			o := s.owner - 1
			renewed := !s.down && s.book[o].holding == s.ownerFence && !s.book[o].gaveUp ||
				s.old.on && s.old.book[o].holding == s.ownerFence
			recorded := !s.api[o].gone && s.api[o].st.held
			if !renewed && (cfg.Outage || !recorded || s.book[o].gaveUp) {
				n := s
				n.owner, n.ownerFence = 0, 0
				n.lostTruly[o] = n.lostTruly[o] || recorded
				add(fmt.Sprintf("the lease of %s (fence %d) runs out", ljName(int(o)), s.ownerFence), n)
			}
		}
		if cfg.Crash && !s.crashed {
			n := s
			n.down, n.crashed = true, true
			n.pass, n.book = [2]mPass{}, [2]mBook{}
			add("the operator crashes", n)
		}
		if s.down {
			n := s
			n.down, n.cache = false, s.api
			add("the operator restarts (its cache lists afresh)", n)
		}
		if cfg.DeleteJob && !s.jobDeletedByUser && s.job[0] == mJobActive {
			n := s
			n.job[0], n.jobDeletedByUser = mJobDeleted, true
			n.cancelled = s.pod[0] != podSucceeded
			add("a user deletes A's Job", n)
		}
		if cfg.DeleteLockedJob && !s.ljDeletedByUser && !s.api[0].gone {
			n := s
			n.ljDeletedByUser = true
			n.api[0].rv++
			if s.api[0].fin {
				n.api[0].del = true
			} else {
				n.api[0].gone = true
			}
			add("a user deletes LockedJob A", n)
		}
		return out
	}
}

// operatorSteps are what a running operator does for LockedJob i: a pass starts or takes its next
// action, and the keeper finds a lock in hand gone.
func operatorSteps(s opState, i int, cfg opConfig, add func(string, opState)) {
	if !s.pass[i].on {
		n := s
		if label := startPass(&n, i, cfg); label != "" {
			add(label, n)
		}
	} else if s.pass[i].on {
		n := s
		add(runAction(&n, i, cfg), n)
	}
	if s.book[i].holding != 0 && !s.book[i].lost && !s.book[i].released && (s.owner != uint8(i+1) || s.ownerFence != s.book[i].holding) {
		n := s
		if s.mark[i] == s.book[i].holding && cfg.Mutation != opKeeperWithoutMark { // lossOrOwnRelease
			// The book lets the lock go; a pass in flight keeps the lock it acquired (its fence).
			n.book[i].released = true
			add("the keeper finds "+ljName(i)+"'s lock gone, released under its fence (the mark)", n)
			return
		}
		n.book[i].lost = true
		add("the keeper finds "+ljName(i)+"'s lock gone", n)
	}
}

// jobWorld: the Job controller, the kubelet and the garbage collector for LockedJob i's Job.
func jobWorld(s opState, i int, add func(string, opState)) {
	name := ljName(i)
	n := s
	switch {
	case s.job[i] == mJobActive && s.pod[i] == podNone:
		n.pod[i] = podRunning
		add(name+"'s pod starts", n)
	case s.job[i] == mJobActive && s.pod[i] == podRunning:
		n.pod[i] = podSucceeded
		add(name+"'s pod succeeds", n)
	case s.job[i] == mJobActive && s.pod[i] == podSucceeded:
		n.job[i] = mJobComplete
		add(name+"'s Job completes", n)
	case s.job[i] == mJobDeleted && (s.pod[i] == podRunning || s.pod[i] == podSucceeded):
		n.pod[i] = podGone
		add(name+"'s pod is gone", n)
	case s.api[i].gone && (s.job[i] == mJobActive || s.job[i] == mJobComplete):
		n.job[i] = mJobDeleted
		add("the garbage collector deletes "+name+"'s Job", n)
	}
}

// startPass observes LockedJob i as observe does, and decides. It returns "" when nothing starts.
func startPass(n *opState, i int, cfg opConfig) string {
	c := n.cache[i]
	if c.gone {
		if n.book[i] == (mBook{}) {
			return ""
		}
		n.book[i] = mBook{} // Get says NotFound: ForgetObject
		return "a pass of " + ljName(i) + " finds it gone; the book forgets it"
	}
	b := n.book[i]
	o := mObs{deleting: c.del, fin: c.fin, terminal: c.st.phase.terminal(), held: c.st.held,
		holding: b.holding != 0 && !b.released, lost: b.lost, released: b.released || c.st.released}
	w := c
	if !w.st.uid && b.created { // the book's word is newer
		w.st.job, w.st.uid = b.job, true
	}
	o.uid = w.st.uid
	name := w.st.job
	if name == 0 {
		name = b.job
	}
	if name != 0 && n.jobFence[i] == name && (n.job[i] == mJobActive || n.job[i] == mJobComplete) {
		o.job = n.job[i]
	}
	if o.job != mJobNone && !c.st.uid && cfg.Mutation != opForgetJobUID {
		w.st.uid, o.uid = true, true
	}
	if o.job == mJobActive && n.pod[i] == podSucceeded && mayHoldRunning(o.real()) {
		o.settled = true
	}
	n.pass[i] = mPass{on: true, o: o, w: w, base: c.rv, baseSt: c.st}
	decideAgain(n, i)
	return fmt.Sprintf("a pass of %s starts (cache rv %d, %s, fence %d) → %v", ljName(i), c.rv, phaseNames[c.st.phase], c.st.fence, n.pass[i].st)
}

func decideAgain(n *opState, i int) {
	p := &n.pass[i]
	p.st, p.k = decide(p.o.real()), 0
	p.steps++
	if p.st == stepRunning { // recordRunning: what the closing record writes
		p.w.st.phase, p.w.st.held, p.w.st.fence = phRunning, true, n.book[i].holding
	}
}

type outcomeOf uint8

const (
	oCont outcomeOf = iota // the step's next action
	oNext                  // the step changed the observation: decide again
	oEnd                   // the step ends the pass: the closing record
	oFail                  // a write lost to a newer version: the pass ends, and so does its record
)

// runAction carries out the next action of LockedJob i's pass and returns its label.
func runAction(n *opState, i int, cfg opConfig) string {
	p := &n.pass[i]
	plan := plans[p.st]
	if int(p.k) >= len(plan) {
		label := fmt.Sprintf("%s's pass %s", ljName(i), actionNames[aRecord])
		if closingRecord(n, i, cfg) == oFail {
			label += ": conflict"
		}
		n.pass[i] = mPass{}
		return label
	}
	a := plan[p.k]
	label := fmt.Sprintf("%s's pass %s", ljName(i), actionNames[a])
	switch act(n, i, a, cfg) {
	case oCont:
		p.k++
	case oNext:
		if p.steps >= maxStepsPerPass {
			p.k = uint8(len(plan))
		} else {
			decideAgain(n, i)
		}
	case oEnd:
		p.k = uint8(len(plan))
	case oFail:
		n.pass[i] = mPass{}
		label += ": conflict"
	}
	return label
}

// write is a conditional write of the pass's object: it fails when the API server's
// resourceVersion moved past the pass's base (or the object is gone).
func write(n *opState, i int, cfg opConfig) bool {
	p := &n.pass[i]
	if n.api[i].gone || (n.api[i].rv != p.base && cfg.Mutation != opWriteWithoutLock) {
		return false
	}
	n.api[i].rv++
	return true
}

// recordNow writes the pass's status at once and moves its base (record.go).
func recordNow(n *opState, i int, cfg opConfig) bool {
	p := &n.pass[i]
	if !write(n, i, cfg) {
		return false
	}
	n.api[i].st = p.w.st
	p.base, p.baseSt = n.api[i].rv, p.w.st
	return true
}

func closingRecord(n *opState, i int, cfg opConfig) outcomeOf {
	p := &n.pass[i]
	switch {
	case !p.o.fin && !p.o.deleting, p.o.deleting && !p.w.fin, p.w.st == p.baseSt:
		return oEnd
	case !write(n, i, cfg):
		return oFail
	}
	n.api[i].st = p.w.st
	return oEnd
}

// release is release() in end.go: compare-and-delete by the derived token, leaving the release
// mark; a lease that ran out with the counter still at the holder's fence counts as released
// (lockbook.ErrLapsedUntaken), and so does a lock this token released under the same fence before
// (the mark).
func release(n *opState, i int, cfg opConfig) bool {
	p := &n.pass[i]
	fence := n.book[i].holding
	if fence == 0 {
		fence = p.w.st.fence
	}
	switch {
	case n.owner == uint8(i+1):
		if cfg.Mutation != opNoReleaseMark {
			n.mark[i] = n.ownerFence
		}
		n.owner, n.ownerFence = 0, 0
	case n.owner == 0 && n.counter == fence:
	case fence != 0 && n.mark[i] == fence:
	default:
		return false
	}
	n.book[i].holding = 0
	if cfg.Mutation != opBookForgetsRelease {
		n.book[i].released = true
	}
	p.o.released, p.o.holding = true, false
	p.w.st.held = false
	return true
}

// podsLeft is waitForPods: a finished Job has no running pods; otherwise every pod of the recorded
// Job's name counts until it is gone.
func podsLeft(n *opState, i int) bool {
	p := &n.pass[i]
	if p.w.st.job == 0 || p.o.job == mJobComplete {
		return false
	}
	return n.jobFence[i] == p.w.st.job && (n.pod[i] == podRunning || n.pod[i] == podSucceeded)
}

func act(n *opState, i int, a mAction, cfg opConfig) outcomeOf {
	p := &n.pass[i]
	owner := uint8(i + 1)
	switch a {
	case aAddFinalizer:
		if !write(n, i, cfg) {
			return oFail
		}
		n.api[i].fin = true
		p.w.fin, p.o.fin = true, true
		p.base, p.baseSt = n.api[i].rv, p.w.st
		return oNext

	case aAcquire:
		if p.w.st.phase == phNone {
			p.w.st.phase = phPending
		}
		switch n.owner {
		case 0:
			n.counter++
			n.owner, n.ownerFence = owner, n.counter
		case owner: // ours already: the queued acquire re-adopts it
		default:
			p.w.st.phase = phWaiting
			return oEnd
		}
		n.book[i].holding = n.ownerFence
		p.o.holding = true
		p.w.st.fence, p.w.st.held = n.ownerFence, true
		if p.w.st.phase == phWaiting {
			p.w.st.phase = phPending
		}
		return oNext

	case aRecordFence:
		fence := n.book[i].holding
		p.w.st.fence, p.w.st.held = fence, true
		if p.w.st.job == 0 {
			p.w.st.job = fence
		}
		n.book[i].job = p.w.st.job
		if (p.baseSt.fence == fence && p.baseSt.job == p.w.st.job) || cfg.Mutation == opCreateBeforeFence {
			return oCont
		}
		if !recordNow(n, i, cfg) {
			return oFail
		}
		return oCont

	case aCreateJob:
		fence, name := n.book[i].holding, p.w.st.job
		if n.jobFence[i] != name || (n.job[i] != mJobActive && n.job[i] != mJobComplete) {
			if n.api[i].st.fence != fence || n.api[i].st.job != name {
				n.unrecorded = true
			}
			n.job[i], n.jobFence[i], n.pod[i] = mJobActive, name, podNone
			n.creates[i]++
		} // else AlreadyExists: adopted
		if cfg.Mutation != opForgetJobUID {
			p.w.st.uid, p.o.uid = true, true
			n.book[i].created = cfg.Mutation != opBookForgetsJob
		}
		p.o.job = n.job[i]
		return oNext

	case aReadopt, aDeleteReadopt:
		if f := p.w.st.fence; f != 0 && n.mark[i] == f && cfg.Mutation != opReadoptWithoutMark { // releasedBefore
			if cfg.Mutation != opBookForgetsRelease {
				n.book[i].released = true
			}
			p.o.released = true
			return oNext
		}
		if n.owner == 0 || n.owner == owner {
			n.readoptedLost = n.readoptedLost || n.api[i].st.phase == phLockLost
		}
		switch n.owner {
		case 0:
			n.counter++
			n.owner, n.ownerFence = owner, n.counter
		case owner:
		default: // lostWhileAway
			n.book[i].lost, p.o.lost = true, true
			return oNext
		}
		n.book[i].holding, p.o.holding = n.ownerFence, true
		if n.ownerFence != p.w.st.fence && a == aReadopt { // granted afresh: at risk
			n.book[i].lost, p.o.lost = true, true
		}
		return oNext

	case aStopJob:
		if p.o.job == mJobActive && (n.job[i] == mJobActive || n.job[i] == mJobComplete) {
			n.job[i] = mJobDeleted
		}
		p.w.st.phase, p.w.st.held = phLockLost, false
		if cfg.Mutation == opBookForgetsLoss {
			n.book[i] = mBook{}
		}
		return oEnd

	case aReleaseFinish:
		if !p.o.released && !release(n, i, cfg) {
			n.book[i].lost, p.o.lost = true, true // notOursAtEnd
			return oNext
		}
		p.w.st.released = true
		return oCont

	case aRecordOutcome:
		p.w.st.phase, p.w.st.held = phSucceeded, false
		if !recordNow(n, i, cfg) {
			return oFail
		}
		p.o.terminal = true
		return oNext

	case aReleaseOutcome:
		if !release(n, i, cfg) {
			n.book[i].lost, p.o.lost = true, true
			return oNext
		}
		p.w.st.released = true
		return oCont

	case aRecordReleased:
		if !recordNow(n, i, cfg) {
			return oFail
		}
		return oEnd

	case aLetGo:
		n.book[i] = mBook{} // Forget
		if p.o.job == mJobActive {
			return oEnd
		}
		if !write(n, i, cfg) {
			return oFail
		}
		n.api[i].fin, p.w.fin = false, false
		if n.api[i].del {
			n.api[i].gone = true
		}
		return oEnd

	case aReleaseAfterEnd:
		if podsLeft(n, i) {
			return oEnd
		}
		if !release(n, i, cfg) {
			p.w.st.held = false // "Lock no longer held"
		}
		n.book[i] = mBook{}
		return oEnd

	case aJobGone:
		if podsLeft(n, i) {
			return oEnd
		}
		p.w.st.phase = phFailed
		if !recordNow(n, i, cfg) {
			return oFail
		}
		return oCont

	case aReleaseGone:
		release(n, i, cfg)
		p.w.st.released, p.w.st.held = true, false
		return oEnd

	case aDeleteJob:
		if n.job[i] == mJobActive || n.job[i] == mJobComplete {
			n.job[i] = mJobDeleted
		}
		p.o.job = mJobNone
		return oNext

	case aDeleteRelease:
		if podsLeft(n, i) {
			return oEnd
		}
		if mayHoldOrWait(p.o.real()) {
			release(n, i, cfg)
		}
		if !write(n, i, cfg) {
			return oFail
		}
		n.api[i].fin, n.api[i].gone, p.w.fin = false, true, false
		n.book[i] = mBook{}
		return oEnd
	}
	panic(fmt.Sprintf("action %d", a))
}

// opCheck names the first property s breaks, "" if none.
func opCheck(cfg opConfig) func(opState) string {
	checks := func(letter string) bool { return !strings.Contains(cfg.Skip, letter) }
	return func(s opState) string {
		for i := range 2 {
			if s.creates[i] > 1 && checks("f") {
				return "f: the Job of one LockedJob was created twice"
			}
			if s.api[i].st.phase == phLockLost && !s.lostTruly[i] && checks("h") {
				return "h: a LockedJob ended LockLost though its lease never ran out while it held the lock"
			}
		}
		if s.cancelled && s.api[0].st.phase == phSucceeded && checks("o") {
			return "o: a LockedJob whose Job was deleted before its pod succeeded ended Succeeded"
		}
		if s.readoptedLost && checks("r") {
			return "r: a pass took the lock again for a LockedJob recorded LockLost (a Readopted after LockLost)"
		}
		if s.unrecorded && checks("u") {
			return "u: a Job was created under a fence its LockedJob's status did not record"
		}
		if !cfg.Outage && !cfg.Stall && s.pod[0] == podRunning && s.pod[1] == podRunning && checks("a") {
			return "a: the pods of both LockedJobs ran at once"
		}
		return ""
	}
}

// opDone: every LockedJob ended (or is gone), no pod runs and the lock is free.
func opDone(s opState) bool {
	for i := range 2 {
		if !s.api[i].gone && !s.api[i].st.phase.terminal() || s.pod[i] == podRunning {
			return false
		}
	}
	return s.owner == 0
}

const opStateLimit = 4_000_000

// expectOperator explores the operator model: want "" when every property checked holds, (g)
// included, else the letter of the one the checker must find broken.
func expectOperator(t *testing.T, cfg opConfig, want string) {
	t.Helper()
	check := opCheck(cfg)
	init := opInit()
	if cfg.Alone {
		init.api[1].gone, init.cache[1].gone = true, true
	}
	var (
		res model.Result
		v   *model.Violation
		err error
	)
	if strings.Contains(cfg.Skip, "g") {
		res, v, err = model.Explore(init, opNext(cfg), check, opStateLimit)
	} else {
		res, v, err = model.ExploreLive(init, opNext(cfg), check, opDone,
			"g: a state from which some LockedJob can no longer end", opStateLimit)
	}
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case want == "" && v != nil:
		t.Fatalf("%v", v)
	case want == "":
		t.Logf("every property checked holds in %d states, %d transitions, depth %d", res.States, res.Transitions, res.Depth)
	case v == nil:
		t.Fatalf("every property holds in all %d states; the checker was to find %s broken", res.States, want)
	case !strings.HasPrefix(v.Property, want+":"):
		t.Fatalf("want a violation of %s, got %v", want, v)
	default:
		t.Logf("found after %d states: %v", res.States, v)
	}
}

// The configurations, with what each must show (docs/model.md, "The operator model").
func TestOperatorModelAsBuilt(t *testing.T) {
	t.Run("no fault", func(t *testing.T) { expectOperator(t, opConfig{}, "") })
	t.Run("a user deletes a LockedJob", func(t *testing.T) { expectOperator(t, opConfig{DeleteLockedJob: true}, "") })
	t.Run("a user deletes a Job", func(t *testing.T) { expectOperator(t, opConfig{DeleteJob: true}, "") })
	t.Run("the operator crashes and restarts", func(t *testing.T) { expectOperator(t, opConfig{Crash: true}, "") })
	t.Run("the operator is away past the ttl", func(t *testing.T) { expectOperator(t, opConfig{Crash: true, Outage: true, Skip: "h"}, "") })
	// A stall is a true loss: the key runs out while the Job may run on, so (a) is not claimed.
	t.Run("the keeper gives a lock up in a stall", func(t *testing.T) { expectOperator(t, opConfig{Stall: true}, "") })
	t.Run("a deposed leader goes on beside its successor", func(t *testing.T) { expectOperator(t, opConfig{Deposed: true, Alone: true}, "") })
	// A limit of today's protocol (docs/design.md, "A Job is created once"): a crash after the
	// Job's create and before its UID is recorded, then the Job deleted out of band before the
	// operator is back, looks like a Job never created.
	t.Run("a crash between the create and the UID, and the Job deleted", func(t *testing.T) {
		expectOperator(t, opConfig{Crash: true, DeleteJob: true, Skip: "h"}, "f")
	})
}

func TestOperatorModelMutations(t *testing.T) {
	t.Run("the Job created before its fence is recorded (issue 9, #19)", func(t *testing.T) {
		expectOperator(t, opConfig{Mutation: opCreateBeforeFence, Skip: "g"}, "u")
		// and what it costs: after a crash and an outage, a second Job under a new fence
		expectOperator(t, opConfig{Crash: true, Outage: true, Mutation: opCreateBeforeFence, Skip: "uhg"}, "f")
	})
	t.Run("the Job's UID never recorded (issue 9, #11)", func(t *testing.T) {
		expectOperator(t, opConfig{DeleteJob: true, Mutation: opForgetJobUID, Skip: "g"}, "f")
	})
	t.Run("status written without the resourceVersion", func(t *testing.T) {
		expectOperator(t, opConfig{Mutation: opWriteWithoutLock, Skip: "g"}, "f")
	})
	t.Run("the book does not remember the Job it created (found by this model)", func(t *testing.T) {
		expectOperator(t, opConfig{DeleteJob: true, Mutation: opBookForgetsJob, Skip: "g"}, "f")
	})
	t.Run("the book does not remember a release", func(t *testing.T) {
		expectOperator(t, opConfig{Mutation: opBookForgetsRelease, Skip: "g"}, "h")
	})
	// Found by this model (docs/design.md, "A release whose record is lost"): without the release
	// mark, a release whose status write a crash cut off is taken for a loss after the restart,
	// once another holder has the lock.
	t.Run("a release leaves no mark", func(t *testing.T) {
		expectOperator(t, opConfig{Crash: true, Mutation: opNoReleaseMark, Skip: "g"}, "h")
	})
	// Found by this model: a deposed leader releases at the pod's outcome while its successor's pass
	// re-adopts, takes the lock afresh, and ends the LockedJob LockLost.
	t.Run("a re-adoption that does not read the release mark", func(t *testing.T) {
		expectOperator(t, opConfig{Deposed: true, Alone: true, Mutation: opReadoptWithoutMark, Skip: "g"}, "h")
	})
	// Found by this model, next: the successor releases at the pod's outcome, and the deposed
	// leader's keeper finds the lock gone and its pass records LockLost.
	t.Run("a keeper that takes a lock released by its token for lost", func(t *testing.T) {
		expectOperator(t, opConfig{Deposed: true, Alone: true, Mutation: opKeeperWithoutMark, Skip: "g"}, "h")
	})
	t.Run("the book forgets a lost lock once the loss is acted on (issue 9, #28)", func(t *testing.T) {
		expectOperator(t, opConfig{Stall: true, Mutation: opBookForgetsLoss, Skip: "g"}, "r")
	})
}
