package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// nextRelease returns the next announcement of releases, failing the test after a while.
func nextRelease(t *testing.T, releases <-chan Released) Released {
	t.Helper()
	select {
	case got := <-releases:
		return got
	case <-time.After(5 * time.Second):
		t.Fatal("no release announced")
		return Released{}
	}
}

// TestOneReaderOfTheReleaseChannel: two SubscribeReleases readers and a waiting Acquire share one
// SUBSCRIBE on the node, and each still gets what it waits for; the subscription ends with the
// last of them.
func TestOneReaderOfTheReleaseChannel(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications(releaseChannel))
	key := uniqueKey(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))

	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	relA, err := c.SubscribeReleases(ctxA)
	if err != nil {
		t.Fatalf("SubscribeReleases: %v", err)
	}
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	relB, err := c.SubscribeReleases(ctxB)
	if err != nil {
		t.Fatalf("SubscribeReleases: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		// An hour's backoff: only the release message can wake it in time.
		l, err := c.Acquire(ctx, key, time.Minute, WithQueue("waiter", 1, time.Minute), WithRetry(FixedBackoff(time.Hour)))
		if err == nil && !l.Readopted() {
			t.Errorf("the waiter's lock was not handed to it")
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "two readers and the waiter to listen", func() bool { return ReleaseListeners(c, 0) == 3 })
	if n := subscribers(t, rc); n != 1 {
		t.Fatalf("%d subscriptions to the release channel, want one shared by all", n)
	}

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire: %v", err)
	}
	want := Released{Key: holder.RedisKey(), HandedTo: "waiter"}
	for name, rel := range map[string]<-chan Released{"A": relA, "B": relB} {
		if got := nextRelease(t, rel); got != want {
			t.Fatalf("reader %s was told %+v, want %+v", name, got, want)
		}
	}

	cancelA()
	for range relA {
	}
	if n := subscribers(t, rc); n != 1 {
		t.Fatalf("%d subscriptions while reader B still reads, want 1", n)
	}
	cancelB()
	for range relB {
	}
	eventually(t, 5*time.Second, "the subscription to end with its last reader", func() bool {
		return subscribers(t, rc) == 0
	})
}

// TestOneReaderPerRedlockNode: on Redlock every node has one subscription, however many read.
func TestOneReaderPerRedlockNode(t *testing.T) {
	c, srvs := redlock(t, 3, WithReleaseNotifications(releaseChannel))
	ctx := t.Context()
	var readers []<-chan Released
	for range 2 {
		rel, err := c.SubscribeReleases(ctx)
		if err != nil {
			t.Fatalf("SubscribeReleases: %v", err)
		}
		readers = append(readers, rel)
	}
	rcs := make([]*redis.Client, len(srvs))
	for i, s := range srvs {
		rcs[i] = s.Client(t)
		if n := subscribers(t, rcs[i]); n != 1 {
			t.Fatalf("node %d: %d subscriptions to the release channel, want 1", i, n)
		}
	}
	l := mustAcquire(t, c, uniqueKey(t), time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Every node announces the release, to every reader.
	for r, rel := range readers {
		for range srvs {
			if got := nextRelease(t, rel); got != (Released{Key: l.RedisKey()}) {
				t.Fatalf("reader %d was told %+v, want the key %q", r, got, l.RedisKey())
			}
		}
	}
}

// TestSubscribeReleasesWithARedlockMinorityDown: a node that cannot subscribe is left out, the
// majority still announces every release, and a single node that is down fails the call.
func TestSubscribeReleasesWithARedlockMinorityDown(t *testing.T) {
	c, srvs := redlock(t, 3, WithReleaseNotifications(releaseChannel))
	srvs[2].Stop(t)
	ctx := t.Context()
	rel, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatalf("SubscribeReleases with a minority down: %v", err)
	}
	if n := ReleaseListeners(c, 2); n != 0 {
		t.Fatalf("%d listeners kept on the node that is down, want 0", n)
	}
	l := mustAcquire(t, c, uniqueKey(t), time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := nextRelease(t, rel); got != (Released{Key: l.RedisKey()}) {
			t.Fatalf("told %+v, want the key %q", got, l.RedisKey())
		}
	}

	one, srv, _ := single(t, WithReleaseNotifications(releaseChannel))
	srv.Stop(t)
	var ne *NodeError
	if _, err := one.SubscribeReleases(ctx); !errors.As(err, &ne) {
		t.Fatalf("SubscribeReleases with the only node down: %v, want a NodeError", err)
	}
	if n := ReleaseListeners(one, 0); n != 0 {
		t.Fatalf("%d listeners kept after a failed subscription, want 0", n)
	}
}
