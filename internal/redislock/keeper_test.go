package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// lostRecorder collects OnLost calls with the time they happened.
type lostRecorder struct {
	mu   sync.Mutex
	lost map[*Lock]error
	at   map[*Lock]time.Time
	ch   chan *Lock
}

func newLostRecorder() *lostRecorder {
	return &lostRecorder{lost: map[*Lock]error{}, at: map[*Lock]time.Time{}, ch: make(chan *Lock, 16)}
}

func (r *lostRecorder) onLost(l *Lock, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.lost[l]; dup {
		panic("OnLost called twice for one lock")
	}
	r.lost[l], r.at[l] = err, time.Now()
	select {
	case r.ch <- l:
	default:
	}
}

func (r *lostRecorder) wait(t *testing.T, timeout time.Duration) (*Lock, error, time.Time) {
	t.Helper()
	select {
	case l := <-r.ch:
		r.mu.Lock()
		defer r.mu.Unlock()
		return l, r.lost[l], r.at[l]
	case <-time.After(timeout):
		t.Fatalf("no lost lock reported within %v", timeout)
		return nil, nil, time.Time{}
	}
}

// TestKeeperRenewsTenThousandLocks: one keeper keeps 10,000 locks alive well past their lease, and
// a lock deleted behind its back is reported within one renew interval.
func TestKeeperRenewsTenThousandLocks(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	const n = 10000
	const ttl, interval = 3 * time.Second, time.Second

	locks := make([]*Lock, n)
	for i := range locks {
		locks[i] = mustObtain(t, c, fmt.Sprintf("%s/%d", uniqueKey(t), i), ttl)
	}
	var renewals atomic.Int64
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{
		OnLost: rec.onLost,
		OnRenew: func(_ *Lock, err error) {
			if err == nil {
				renewals.Add(1)
			}
		},
	})
	defer k.Stop()
	for _, l := range locks {
		if err := k.Add(l, interval); err != nil {
			t.Fatal(err)
		}
	}

	// Two full rounds of renewals take longer than one lease: every lock still existing afterwards
	// was renewed, not merely young.
	start := time.Now()
	eventually(t, 4*ttl, "two rounds of renewals", func() bool { return renewals.Load() >= 2*n && time.Since(start) > ttl })
	pipe := rc.Pipeline()
	cmds := make([]*redis.DurationCmd, n)
	for i, l := range locks {
		cmds[i] = pipe.PTTL(ctx, l.RedisKey())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if cmd.Val() <= 0 {
			t.Fatalf("lock %d expired although the keeper renews it (pttl %v)", i, cmd.Val())
		}
	}

	victim := locks[n/2]
	deleted := time.Now()
	if err := rc.Del(ctx, victim.RedisKey()).Err(); err != nil {
		t.Fatal(err)
	}
	got, err, at := rec.wait(t, 3*interval)
	if got != victim {
		t.Fatalf("reported %s lost, want %s", got.Key(), victim.Key())
	}
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("lost with %v, want ErrLockLost", err)
	}
	if took := at.Sub(deleted); took > interval+interval/4 {
		t.Fatalf("loss reported %v after the delete, want within one interval (%v)", took, interval)
	}
	if k.Len() != n-1 {
		t.Fatalf("keeper renews %d locks, want %d", k.Len(), n-1)
	}
}

// TestKeeperRidesOutShortOutage: a Redis that stops answering for less than the lease costs
// nothing; the keeper retries and the lock lives on.
func TestKeeperRidesOutShortOutage(t *testing.T) {
	c, srv, _ := single(t)
	l := mustObtain(t, c, uniqueKey(t), 2*time.Second)
	var failed, renewedAfter atomic.Int64
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: func(_ *Lock, err error) {
		if err != nil {
			failed.Add(1)
		} else if failed.Load() > 0 {
			renewedAfter.Add(1)
		}
	}})
	defer k.Stop()
	if err := k.Add(l, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	eventually(t, 5*time.Second, "a failed renewal while Redis is paused", func() bool { return failed.Load() > 0 })
	srv.Resume(t)
	eventually(t, 5*time.Second, "a successful renewal after Redis resumed", func() bool { return renewedAfter.Load() > 0 })
	if !l.Held() || k.Len() != 1 {
		t.Fatal("lock lost over an outage shorter than its lease")
	}
	select {
	case lost := <-rec.ch:
		t.Fatalf("%s reported lost", lost.Key())
	default:
	}
}

// TestKeeperReportsLossWhenValidityRunsOut: while Redis does not answer, the keeper keeps trying,
// and reports the lock lost once its validity has run out — not before.
func TestKeeperReportsLossWhenValidityRunsOut(t *testing.T) {
	c, srv, _ := single(t)
	l := mustObtain(t, c, uniqueKey(t), time.Second)
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost})
	defer k.Stop()
	if err := k.Add(l, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	validAtPause := l.ValidUntil()

	got, err, at := rec.wait(t, 5*time.Second)
	if got != l || !errors.Is(err, ErrLockLost) {
		t.Fatalf("reported %v with %v, want our lock with ErrLockLost", got, err)
	}
	var ne *NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("loss by outage should carry the transport error: %v", err)
	}
	if at.Before(validAtPause) {
		t.Fatalf("reported lost at %v, before its validity ran out at %v", at, validAtPause)
	}
	if l.Held() {
		t.Fatal("lock still Held after reported lost")
	}
}

func TestKeeperRemoveAndRelease(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	rec := newLostRecorder()
	var renewals atomic.Int64
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost, OnRenew: func(*Lock, error) { renewals.Add(1) }})
	defer k.Stop()

	kept := mustObtain(t, c, uniqueKey(t), 300*time.Millisecond)
	released := mustObtain(t, c, uniqueKey(t), 300*time.Millisecond)
	for _, l := range []*Lock{kept, released} {
		if err := k.Add(l, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !k.Remove(released) || k.Remove(released) {
		t.Fatal("Remove should report true once, then false")
	}
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "several renewals of the kept lock", func() bool { return renewals.Load() >= 5 })
	select {
	case l := <-rec.ch:
		t.Fatalf("%s reported lost", l.Key())
	default:
	}
	if err := k.Add(released, 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Add of a released lock: %v, want ErrNotHeld", err)
	}
	k.Stop()
	k.Stop() // idempotent
}

// TestKeeperReloadsScriptsAfterRestart: EVALSHA in a pipeline has no per-command fallback; the
// keeper must reload the script on a fresh server and carry on.
func TestKeeperReloadsScriptsAfterRestart(t *testing.T) {
	c, srv, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	l := mustObtain(t, c, key, 2*time.Second, WithToken("tok"))
	rec := newLostRecorder()
	k := c.NewKeeper(KeeperOptions{OnLost: rec.onLost})
	defer k.Stop()

	srv.Restart(t)
	// Put the lock back by hand, as a replica that kept it would: the script cache is empty, the
	// key is ours.
	eventually(t, 5*time.Second, "the restarted server", func() bool {
		return rc.Set(ctx, l.RedisKey(), "tok", time.Second).Err() == nil
	})
	if err := k.Add(l, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a renewal that extended the lock", func() bool {
		ttl, err := rc.PTTL(ctx, l.RedisKey()).Result()
		return err == nil && ttl > 1500*time.Millisecond // only a renewal sets it past the 1s we wrote
	})
	select {
	case lost := <-rec.ch:
		t.Fatalf("%s reported lost: %v", lost.Key(), rec.lost[lost])
	default:
	}
}
