package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// keySeq gives every test its own lock names, so tests never see each other's keys.
var keySeq atomic.Int64

func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s/%d", strings.ReplaceAll(t.Name(), "/", "_"), keySeq.Add(1))
}

// single starts one real redis-server and returns a lock client for it.
func single(t testing.TB, opts ...Option) (*Client, *redisserver.Server, *redis.Client) {
	t.Helper()
	srv := redisserver.Start(t)
	rc := srv.Client(t)
	c, err := New(rc, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, srv, rc
}

// redlock starts n real redis-servers and returns a Redlock client over them.
func redlock(t testing.TB, n int, opts ...Option) (*Client, []*redisserver.Server) {
	t.Helper()
	srvs := redisserver.StartN(t, n)
	return redlockOn(t, srvs, opts...), srvs
}

// redlockOn returns a new Redlock client over srvs, as another process would have.
func redlockOn(t testing.TB, srvs []*redisserver.Server, opts ...Option) *Client {
	t.Helper()
	clients := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		clients[i] = s.Client(t)
	}
	c, err := NewRedlock(clients, opts...)
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	return c
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func mustAcquire(t testing.TB, c *Client, key string, ttl time.Duration, opts ...AcquireOption) *Lock {
	t.Helper()
	l, err := c.Acquire(context.Background(), key, ttl, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func TestAcquireReleaseCycle(t *testing.T) {
	c, _, rc := single(t, WithKeyPrefix("test:"))
	key := uniqueKey(t)
	ctx := context.Background()

	l := mustAcquire(t, c, key, time.Minute, WithMetadata("holder-a"))
	if got, want := l.RedisKey(), "test:{"+key+"}"; got != want {
		t.Fatalf("RedisKey = %q, want %q", got, want)
	}
	if len(l.Token()) < 22 {
		t.Fatalf("token %q is shorter than 128 bits of base64", l.Token())
	}
	if got, err := rc.Get(ctx, l.RedisKey()).Result(); err != nil || HolderToken(got) != l.Token() {
		t.Fatalf("redis holds %q (%v), want the lock's token", got, err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second Acquire: got %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n, _ := rc.Exists(ctx, l.RedisKey(), l.RedisKey()+":meta").Result(); n != 0 {
		t.Fatalf("%d lock keys left after Release", n)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: got %v, want ErrNotHeld", err)
	}
	l2 := mustAcquire(t, c, key, time.Minute)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence went from %d to %d, want strictly increasing", l.Fence(), l2.Fence())
	}
}

// TestContendedHoldersNeverOverlap: 64 goroutines fight for one lock; nobody is ever inside the
// critical section with someone else, and every holder's fencing token is higher than all earlier
// holders' tokens.
func TestContendedHoldersNeverOverlap(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	const workers, rounds = 64, 4

	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastFence int64
		holds     int
		failures  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				l, err := c.Acquire(ctx, key, 10*time.Second, WithRetry(ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
				if err != nil {
					fail("worker %d round %d: %v", w, r, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					fail("worker %d found %d holders inside", w, n)
				}
				mu.Lock()
				if l.Fence() <= lastFence {
					failures = append(failures, fmt.Sprintf("fence %d after %d", l.Fence(), lastFence))
				}
				lastFence = l.Fence()
				holds++
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					fail("worker %d release: %v", w, err)
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d violations, first: %s", len(failures), failures[0])
	}
	if holds != workers*rounds {
		t.Fatalf("%d holds, want %d", holds, workers*rounds)
	}
}

// TestStaleHolderCannotTouchNewLock: after a lease expires and someone else acquires the lock, the old
// holder's Renew and Release fail and leave the new holder's lock as it was.
func TestStaleHolderCannotTouchNewLock(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()

	stale := mustAcquire(t, c, key, 50*time.Millisecond)
	var fresh *Lock
	eventually(t, 5*time.Second, "the first lease to expire and the lock to be acquired again", func() bool {
		l, err := c.Acquire(ctx, key, time.Minute, WithMetadata("fresh"))
		fresh = l
		return err == nil
	})
	if fresh.Fence() <= stale.Fence() {
		t.Fatalf("fence after expiry %d, before %d: want higher", fresh.Fence(), stale.Fence())
	}
	if err := stale.Renew(ctx, time.Minute); !errors.Is(err, ErrLockLost) {
		t.Fatalf("stale Renew: got %v, want ErrLockLost", err)
	}
	if stale.Held() {
		t.Fatal("stale lock still reports Held after ErrLockLost")
	}
	if err := stale.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stale Release: got %v, want ErrNotHeld", err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if !st.Held || st.Metadata != "fresh" || st.TTL < 30*time.Second || st.Fence != fresh.Fence() {
		t.Fatalf("new holder's lock changed: %+v", st)
	}
	if err := fresh.Renew(ctx, 0); err != nil {
		t.Fatalf("new holder's Renew: %v", err)
	}
}

func TestReadoptionWithSameToken(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()

	first := mustAcquire(t, c, key, 2*time.Second, WithToken("operator-secret-token"), WithMetadata("a"))
	again, err := c.Acquire(ctx, key, time.Minute, WithToken("operator-secret-token"), WithMetadata("a"))
	if err != nil {
		t.Fatalf("re-adopting with the held token: %v", err)
	}
	if again.Fence() != first.Fence() {
		t.Fatalf("re-adoption changed the fence from %d to %d", first.Fence(), again.Fence())
	}
	if ttl, err := again.TTL(ctx); err != nil || ttl < 30*time.Second {
		t.Fatalf("re-adoption did not extend the lease: ttl %v, err %v", ttl, err)
	}
	if _, err := c.Acquire(ctx, key, time.Minute, WithToken("someone-else")); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("other token: got %v, want ErrNotAcquired", err)
	}
}

func TestInspect(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()

	st, err := c.Inspect(ctx, key)
	if err != nil || st.Held || st.Fence != 0 {
		t.Fatalf("Inspect of a never-used lock: %+v, %v", st, err)
	}
	l := mustAcquire(t, c, key, time.Minute, WithMetadata("ns/job-a"))
	st, err = c.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if !st.Held || st.Metadata != "ns/job-a" || st.Fence != l.Fence() || st.TTL <= 50*time.Second || st.TTL > time.Minute {
		t.Fatalf("Inspect of a held lock: %+v (fence %d)", st, l.Fence())
	}
	if strings.Contains(fmt.Sprintf("%+v", st), l.Token()) {
		t.Fatal("Inspect revealed the holder's token")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ = c.Inspect(ctx, key)
	if st.Held || st.Metadata != "" || st.Fence != l.Fence() {
		t.Fatalf("Inspect after release: %+v", st)
	}
}

// TestRestartWithoutPersistence: a Redis that restarts and loses its data makes the holder's next
// renew report ErrLockLost, and the next holder still gets a higher fencing token.
func TestRestartWithoutPersistence(t *testing.T) {
	c, srv, _ := single(t)
	key := uniqueKey(t)
	ctx := context.Background()

	before := mustAcquire(t, c, key, time.Minute)
	srv.Restart(t)

	var err error
	eventually(t, 10*time.Second, "a renew that reaches the restarted server", func() bool {
		err = before.Renew(ctx, 0)
		var ne *NodeError
		return !errors.As(err, &ne) // transport errors while the client reconnects
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("renew after restart: got %v, want ErrLockLost", err)
	}
	after := mustAcquire(t, c, key, time.Minute)
	if after.Fence() <= before.Fence() {
		t.Fatalf("fence after data loss %d, before %d: want higher", after.Fence(), before.Fence())
	}
}

func TestContextCancellationStopsRetries(t *testing.T) {
	c, _, _ := single(t)
	key := uniqueKey(t)
	mustAcquire(t, c, key, time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, key, time.Minute, WithRetry(FixedBackoff(10*time.Millisecond)))
	// The deadline usually ends the wait between two refused attempts (ErrNotAcquired); on a loaded
	// machine it can also cut an attempt's write short, whose outcome is then unknown. Either way
	// the caller must learn that its context ended the call.
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error joined with context.DeadlineExceeded", err)
	}
	if !errors.Is(err, ErrNotAcquired) {
		t.Logf("the deadline cut an attempt short: %v", err)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx2, key, time.Minute, WithRetry(FixedBackoff(5*time.Millisecond)))
		done <- err
	}()
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: got %v, want context.Canceled", err)
	}
}

func TestLimitRetryGivesUp(t *testing.T) {
	c, _, rc := single(t)
	key := uniqueKey(t)
	mustAcquire(t, c, key, time.Minute)

	// Count acquire attempts by the number of scripts the server ran.
	before := evalCalls(t, rc)
	_, err := c.Acquire(context.Background(), key, time.Minute, WithRetry(LimitRetry(FixedBackoff(time.Millisecond), 3)))
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	if got := evalCalls(t, rc) - before; got != 4 {
		t.Fatalf("%d attempts, want 4 (1 + 3 retries)", got)
	}
}

func evalCalls(t testing.TB, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.SplitSeq(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if strings.HasPrefix(line, cmd) {
				var calls int64
				if _, err := fmt.Sscanf(strings.TrimPrefix(line, cmd), "calls=%d", &calls); err == nil {
					total += calls
				}
			}
		}
	}
	return total
}

func TestTransportErrorsAreNotLockOutcomes(t *testing.T) {
	c, srv, _ := single(t)
	key := uniqueKey(t)
	l := mustAcquire(t, c, key, time.Minute)
	srv.Stop(t)

	ctx := context.Background()
	var ne *NodeError
	_, err := c.Acquire(ctx, uniqueKey(t), time.Minute)
	if err == nil || errors.Is(err, ErrNotAcquired) || !errors.As(err, &ne) {
		t.Fatalf("Acquire with Redis down: got %v, want a NodeError that is not ErrNotAcquired", err)
	}
	if err := l.Renew(ctx, 0); err == nil || errors.Is(err, ErrLockLost) || !errors.As(err, &ne) {
		t.Fatalf("Renew with Redis down: got %v, want a NodeError that is not ErrLockLost", err)
	}
	if err := l.Release(ctx); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release with Redis down: got %v, want a transport error", err)
	}
	if !l.Held() {
		t.Fatal("a transport error must not mark the lock lost while its lease lasts")
	}
}

func TestReleaseNotifications(t *testing.T) {
	c, _, _ := single(t, WithReleaseNotifications("lockedjob:released"))
	key := uniqueKey(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatalf("SubscribeReleases: %v", err)
	}
	l := mustAcquire(t, c, key, time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-releases:
		if got != (Released{Key: l.RedisKey()}) {
			t.Fatalf("notified %+v, want the key %q handed to nobody", got, l.RedisKey())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no release notification")
	}
	cancel()
	for range releases {
	}
}

// A release that hands the lock to the head of its queue names the member it went to, so a
// subscriber can wake that waiter alone.
func TestReleaseNotificationNamesTheWaiterHandedTo(t *testing.T) {
	c, _, _ := single(t, WithReleaseNotifications("lockedjob:released"))
	key := uniqueKey(t)
	ctx := t.Context()
	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatalf("SubscribeReleases: %v", err)
	}
	holder, err := c.Acquire(ctx, key, time.Minute, WithQueue("holder", 1, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"first", "second"} {
		if _, err := c.Acquire(ctx, key, time.Minute, WithQueue(w, 2, time.Minute)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("waiter %s: got %v, want ErrNotAcquired", w, err)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-releases:
		if got != (Released{Key: holder.RedisKey(), HandedTo: "first"}) {
			t.Fatalf("notified %+v, want the key handed to the head, first", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no release notification")
	}
}

// A subscription that breaks is made again, and says so: the releases in between were lost, and a
// subscriber must ask Redis instead of waiting for a message that never comes.
func TestReleaseNotificationsTellAMissedGap(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications("lockedjob:released"))
	ctx := t.Context()
	releases, err := c.SubscribeReleases(ctx)
	if err != nil {
		t.Fatalf("SubscribeReleases: %v", err)
	}
	if n, err := rc.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
		t.Fatalf("killing the subscriber's connection: %d killed, %v", n, err)
	}
	select {
	case got := <-releases:
		if got != (Released{Missed: true}) {
			t.Fatalf("notified %+v, want Missed", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a broken subscription was not told")
	}
	// And it works again.
	l := mustAcquire(t, c, uniqueKey(t), time.Minute)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-releases:
		if got != (Released{Key: l.RedisKey()}) {
			t.Fatalf("notified %+v after the gap, want the key %q", got, l.RedisKey())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no release notification after the gap")
	}
}

func TestBadInput(t *testing.T) {
	c, _, _ := single(t)
	ctx := context.Background()
	cases := map[string]func() error{
		"empty key": func() error { _, err := c.Acquire(ctx, "", time.Second); return err },
		"zero ttl":  func() error { _, err := c.Acquire(ctx, "k", 0); return err },
		"negative ttl": func() error {
			_, err := c.Acquire(ctx, "k", -time.Second)
			return err
		},
		"ttl under 1ms": func() error { _, err := c.Acquire(ctx, "k", 500*time.Microsecond); return err },
		"brace in key":  func() error { _, err := c.Acquire(ctx, "a{b}", time.Second); return err },
		"huge key":      func() error { _, err := c.Acquire(ctx, strings.Repeat("k", 2000), time.Second); return err },
		"nil client":    func() error { _, err := New(nil); return err },
		"redlock zero":  func() error { _, err := NewRedlock(nil); return err },
		"redlock one": func() error {
			_, err := NewRedlock([]redis.UniversalClient{redis.NewClient(&redis.Options{})})
			return err
		},
		"redlock even": func() error {
			cl := redis.NewClient(&redis.Options{})
			_, err := NewRedlock([]redis.UniversalClient{cl, cl, cl, cl})
			return err
		},
		"redlock nil node": func() error {
			cl := redis.NewClient(&redis.Options{})
			_, err := NewRedlock([]redis.UniversalClient{cl, nil, cl})
			return err
		},
		"renew ttl under 1ms": func() error {
			l := mustAcquire(t, c, uniqueKey(t), time.Second)
			return l.Renew(ctx, time.Microsecond)
		},
		"keeper interval not shorter than ttl": func() error {
			k := c.NewKeeper(KeeperOptions{})
			defer k.Stop()
			return k.Add(mustAcquire(t, c, uniqueKey(t), time.Second), time.Second)
		},
		"inspect empty key": func() error { _, err := c.Inspect(ctx, ""); return err },
		// A NUL would let a token pass for another token's grant mark (holder.lua).
		"NUL in token": func() error {
			_, err := c.Acquire(ctx, uniqueKey(t), time.Second, WithToken("tok\x00mark"))
			return err
		},
		"NUL in released token": func() error { return c.ReleaseToken(ctx, uniqueKey(t), "tok\x00mark", 0) },
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
			if !strings.HasPrefix(err.Error(), "redislock: invalid argument: ") || len(err.Error()) < 40 {
				t.Fatalf("message %q does not say what is wrong", err)
			}
		})
	}
}

func TestNilLockIsSafe(t *testing.T) {
	var l *Lock
	ctx := context.Background()
	if err := l.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Renew(ctx, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("TTL: %v", err)
	}
	if l.Held() || l.Fence() != 0 || l.Token() != "" || !l.ValidUntil().IsZero() {
		t.Fatal("nil lock reports state")
	}
}

func TestRetryStrategies(t *testing.T) {
	if _, again := NoRetry().Backoff(1); again {
		t.Fatal("NoRetry retried")
	}
	if d, again := FixedBackoff(7 * time.Millisecond).Backoff(100); !again || d != 7*time.Millisecond {
		t.Fatalf("FixedBackoff: %v %v", d, again)
	}
	exp := ExponentialBackoff(2*time.Millisecond, 64*time.Millisecond)
	for attempt := 1; attempt <= 40; attempt++ {
		ceiling := min(2*time.Millisecond<<min(attempt-1, 30), 64*time.Millisecond)
		for range 50 {
			d, again := exp.Backoff(attempt)
			if !again || d < 2*time.Millisecond || d > ceiling {
				t.Fatalf("attempt %d: %v outside [2ms, %v]", attempt, d, ceiling)
			}
		}
	}
	limited := LimitRetry(FixedBackoff(time.Millisecond), 2)
	for attempt, want := range []bool{true, true, false} {
		if _, again := limited.Backoff(attempt + 1); again != want {
			t.Fatalf("LimitRetry attempt %d: retry=%v, want %v", attempt+1, again, want)
		}
	}
}

// TestWaitReplicas: with a real replica attached, an acquisition that the replica acknowledged
// succeeds; one that asks for more replicas than exist fails and leaves no key behind.
func TestWaitReplicas(t *testing.T) {
	primary := redisserver.Start(t)
	replica := redisserver.Start(t)
	ctx := context.Background()
	host, port, _ := strings.Cut(primary.Addr(), ":")
	if err := replica.Client(t).ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	rc := primary.Client(t)
	eventually(t, 10*time.Second, "the replica to attach", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})

	one, err := New(rc, WithWaitReplicas(1, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	l := mustAcquire(t, one, key, time.Minute)
	if got, err := replica.Client(t).Get(ctx, l.RedisKey()).Result(); err != nil || HolderToken(got) != l.Token() {
		t.Fatalf("replica holds %q (%v) after WAIT, want the token", got, err)
	}

	two, err := New(rc, WithWaitReplicas(2, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	other := uniqueKey(t)
	_, err = two.Acquire(ctx, other, time.Minute)
	var ne *NodeError
	if err == nil || errors.Is(err, ErrNotAcquired) || !errors.As(err, &ne) || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Fatalf("got %v, want a node error about missing replica acknowledgements", err)
	}
	if n := rc.Exists(ctx, two.RedisKey(other)).Val(); n != 0 {
		t.Fatal("the unreplicated lock was left behind")
	}
}

// TestKeysFor: the keys built in one allocation are the ones every script expects, in order.
func TestKeysFor(t *testing.T) {
	for _, prefix := range []string{"", "app:"} {
		rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		t.Cleanup(func() { _ = rc.Close() })
		c, err := New(rc, WithKeyPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		base := prefix + "{job}"
		want := []string{base, base + ":meta", base + ":fence"}
		if got := KeysFor(c, "job", false); !slices.Equal(got, want) {
			t.Errorf("prefix %q: keys %q, want %q", prefix, got, want)
		}
		want = append(want, base+":queue", base+":waiters", base+":tickets")
		if got := KeysFor(c, "job", true); !slices.Equal(got, want) {
			t.Errorf("prefix %q: queued keys %q, want %q", prefix, got, want)
		}
	}
}

// TestDeadlineCuttingAnAttemptIsTold: when the caller's deadline ends an attempt in flight (Redis
// does not answer: a blackhole), the connection's own deadline fails the call with an i/o timeout,
// and the error must still say that the context ended it, without claiming ErrNotAcquired: the
// attempt's outcome is unknown.
func TestDeadlineCuttingAnAttemptIsTold(t *testing.T) {
	c, p, _ := proxied(t)
	key := uniqueKey(t)
	mustAcquire(t, c, key+"-warm", time.Minute) // a pooled connection, so the cut lands on a call, not a dial
	p.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, key, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error joined with context.DeadlineExceeded", err)
	}
	if errors.Is(err, ErrNotAcquired) {
		t.Fatalf("got %v: an attempt cut short has an unknown outcome, not ErrNotAcquired", err)
	}
}
