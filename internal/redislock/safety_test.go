package redislock_test

// Tests for the lock-library items of issue 9: each replays the sequence that broke exclusion or
// fencing on a real redis-server.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// warmUp loads the scripts and opens a connection, so a later stalled attempt is one EVALSHA that
// the server applies when it wakes up.
func warmUp(t *testing.T, c *Client) {
	t.Helper()
	if err := mustAcquire(t, c, uniqueKey(t), time.Minute).Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// lockHolder is the token that holds the lock in Redis ("" when free).
func lockHolder(t *testing.T, rc *redis.Client, redisKey string) string {
	t.Helper()
	v, err := rc.Get(context.Background(), redisKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return HolderToken(v)
}

// TestLateReleaseKeepsARetrysLock (issue 9 item 1): Redis stalls past the caller's deadline during
// an Acquire with a derived token, wakes up and applies it; the caller's retry finds the lock held
// with its token and succeeds. The failed attempt's late release must not delete that lock.
func TestLateReleaseKeepsARetrysLock(t *testing.T) {
	c, srv, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	const token = "derived-token"
	warmUp(t, c)
	letGo := HoldLateReleases(c)

	srv.Pause(t)
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.Acquire(actx, key, time.Minute, WithToken(token))
	cancel()
	if err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("stalled Acquire: %v, want a transport error", err)
	}
	if n := LateReleasesStarted(c); n != 1 {
		t.Fatalf("%d late releases started, want 1", n)
	}
	srv.Resume(t)
	eventually(t, 5*time.Second, "the stalled acquisition to be applied", func() bool {
		return lockHolder(t, rc, c.RedisKey(key)) == token
	})

	l, err := c.Acquire(ctx, key, time.Minute, WithToken(token))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	letGo()
	eventually(t, 10*time.Second, "the late release to finish", func() bool { return LateReleasesRunning(c) == 0 })
	if v := lockHolder(t, rc, c.RedisKey(key)); v != token {
		t.Fatalf("after the late release the lock holds %q, want the retry's token: the retry lost its lock", v)
	}
	if err := l.Renew(ctx, 0); err != nil {
		t.Fatalf("renew of the retry's lock: %v", err)
	}
	if !l.Readopted() {
		t.Fatal("the retry found the lock held with its token: want Readopted")
	}
	if other := mustAcquire(t, c, uniqueKey(t), time.Minute, WithToken(token)); other.Readopted() {
		t.Fatal("a free lock granted afresh reports Readopted")
	}
}

// TestFreshGrantIsUndoneLate: an attempt that Redis applied after its caller gave up, and that
// nobody re-adopted, is still removed by its late release.
func TestFreshGrantIsUndoneLate(t *testing.T) {
	c, srv, rc := single(t)
	key := uniqueKey(t)
	warmUp(t, c)
	srv.Pause(t)
	actx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.Acquire(actx, key, time.Minute, WithToken("tok"))
	cancel()
	if err == nil {
		t.Fatal("stalled Acquire succeeded")
	}
	srv.Resume(t)
	eventually(t, 10*time.Second, "the late release to finish", func() bool { return LateReleasesRunning(c) == 0 })
	if v := lockHolder(t, rc, c.RedisKey(key)); v != "" {
		t.Fatalf("the failed attempt's lock is left behind: %q", v)
	}
}

// TestLateReleasesAreDeduplicated (issue 9 item 9): many failed attempts on a stalled node start
// one late release per (key, token, node), not one each.
func TestLateReleasesAreDeduplicated(t *testing.T) {
	c, srv, _ := single(t)
	key := uniqueKey(t)
	warmUp(t, c)
	letGo := HoldLateReleases(c)
	srv.Pause(t)
	for range 10 {
		actx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := c.Acquire(actx, key, 10*time.Second, WithToken("tok"))
		cancel()
		if err == nil {
			t.Fatal("Acquire on a paused node succeeded")
		}
	}
	n := LateReleasesStarted(c)
	srv.Resume(t)
	letGo()
	eventually(t, 10*time.Second, "the late releases to finish", func() bool { return LateReleasesRunning(c) == 0 })
	if n != 1 {
		t.Fatalf("%d late releases started for one key, token and node, want 1", n)
	}
}

// TestLateReleasesAreCapped (issue 9 item 9): past the Client's limit, a failed attempt starts no
// late release at all.
func TestLateReleasesAreCapped(t *testing.T) {
	c, srv, _ := single(t)
	warmUp(t, c)
	SetLateReleaseLimit(c, 3)
	letGo := HoldLateReleases(c)
	srv.Pause(t)
	for range 5 {
		actx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := c.Acquire(actx, uniqueKey(t), 10*time.Second)
		cancel()
		if err == nil {
			t.Fatal("Acquire on a paused node succeeded")
		}
	}
	started, running := LateReleasesStarted(c), LateReleasesRunning(c)
	srv.Resume(t)
	letGo()
	eventually(t, 10*time.Second, "the late releases to finish", func() bool { return LateReleasesRunning(c) == 0 })
	if started != 3 || running != 3 {
		t.Fatalf("%d late releases started, %d running for 5 keys, want the limit of 3", started, running)
	}
}

// TestWaitShortfallKeepsAReadoptedLock (issue 9 item 2): a re-adoption whose WAIT fell short
// reports the error but keeps the lock: the holder had it before and still has it.
func TestWaitShortfallKeepsAReadoptedLock(t *testing.T) {
	srv := redisserver.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	plain, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	l := mustAcquire(t, plain, key, time.Minute, WithToken("tok"))

	waiting, err := New(rc, WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = waiting.Acquire(ctx, key, time.Minute, WithToken("tok"))
	if err == nil || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Fatalf("re-adoption without replicas: %v, want an error about replica acknowledgements", err)
	}
	if v := lockHolder(t, rc, l.RedisKey()); v != "tok" {
		t.Fatalf("after the WAIT shortfall the lock holds %q, want it kept", v)
	}
	if err := l.Renew(ctx, 0); err != nil {
		t.Fatalf("renew after the shortfall: %v", err)
	}
}

// TestRedlockReadoptionKeepsTheFence (issue 9 item 3): one node loses its data; re-adopting with
// the same token finds a quorum that still holds it and keeps the stored fence, and the node that
// granted afresh keeps the lock too.
func TestRedlockReadoptionKeepsTheFence(t *testing.T) {
	srvs := redisserver.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		clients[i] = s.Client(t)
	}
	c, err := NewRedlock(clients, WithNodeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	l := mustAcquire(t, c, key, time.Minute, WithToken("tok"))

	srvs[0].Restart(t)
	// Drop the connection that died with the old process, so node 0 answers the re-adoption.
	eventually(t, 5*time.Second, "node 0 to answer", func() bool { return clients[0].Ping(ctx).Err() == nil })

	again, err := c.Acquire(ctx, key, time.Minute, WithToken("tok"))
	if err != nil {
		t.Fatalf("re-adoption: %v", err)
	}
	if again.Fence() != l.Fence() || !again.Readopted() {
		t.Fatalf("re-adoption fence %d (re-adopted %v), want the stored %d, re-adopted", again.Fence(), again.Readopted(), l.Fence())
	}
	for i, rc := range clients {
		if v, err := rc.Get(ctx, l.RedisKey()).Result(); err != nil || HolderToken(v) != "tok" {
			t.Fatalf("node %d holds %q (%v), want the token", i, v, err)
		}
	}

	// A majority lost its data: only one node re-adopts, so this is a fresh acquisition.
	srvs[0].Restart(t)
	srvs[1].Restart(t)
	for i := range 2 {
		eventually(t, 5*time.Second, "the restarted node to answer", func() bool { return clients[i].Ping(ctx).Err() == nil })
	}
	fresh, err := c.Acquire(ctx, key, time.Minute, WithToken("tok"))
	if err != nil {
		t.Fatalf("acquire after a majority lost its data: %v", err)
	}
	if fresh.Readopted() || fresh.Fence() <= l.Fence() {
		t.Fatalf("fence %d (re-adopted %v), want a fresh grant above %d", fresh.Fence(), fresh.Readopted(), l.Fence())
	}
}

// TestFenceRisesAfterTheCounterWentBack (issue 9 item 4): a failover to a replica that missed the
// last INCR leaves the counter one token behind; the next token must still be the highest yet.
func TestFenceRisesAfterTheCounterWentBack(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	var fences []int64
	for range 2 {
		l := mustAcquire(t, c, key, time.Minute)
		fences = append(fences, l.Fence())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The promoted replica's counter: it saw the first grant, not the second.
	if err := rc.Set(ctx, c.RedisKey(key)+":fence", strconv.FormatInt(fences[0], 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, c, key, time.Minute)
	for _, f := range fences {
		if l.Fence() <= f {
			t.Fatalf("fence %d after the counter went back, want above every earlier one %v", l.Fence(), fences)
		}
	}
}

// readAttempt reads the attempt id from a waiter's ticket, as anyone with access to Redis could.
func readAttempt(t *testing.T, rc *redis.Client, ticketsKey, member string) string {
	t.Helper()
	const src = `local _, attempt = cmsgpack.unpack(redis.call('HGET', KEYS[1], ARGV[1])) return attempt`
	a, err := rc.Eval(context.Background(), src, []string{ticketsKey}, member).Text()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestForgedHandoffIsOnlyAWakeUp (issue 9 item 6): a release message naming a waiting member and
// its latest attempt, published while someone else holds the lock, must not make Acquire return.
func TestForgedHandoffIsOnlyAWakeUp(t *testing.T) {
	c, _, rc := single(t, WithReleaseNotifications(releaseChannel))
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute)

	got, cancel := startListeningWaiter(t, c, rc, key)
	defer cancel()
	attempt := readAttempt(t, rc, holder.RedisKey()+":tickets", "waiter")
	before := evalCalls(t, rc)
	forged := strings.Join([]string{holder.RedisKey(), "1", "60000", attempt, "waiter"}, "\x00")
	if n, err := rc.Publish(ctx, releaseChannel, forged).Result(); err != nil || n != 1 {
		t.Fatalf("publish: %d receivers, %v", n, err)
	}
	var returned bool
	var err error
	eventually(t, 5*time.Second, "the waiter to return or ask Redis", func() bool {
		select {
		case err = <-got:
			returned = true
			return true
		default:
			return evalCalls(t, rc) > before
		}
	})
	if returned {
		t.Fatalf("Acquire returned (err %v) on a forged handoff while another holder has the lock", err)
	}
	expectCancelledWait(t, cancel, got)
	if len(attempt) < 16 {
		t.Fatalf("attempt id %q: at most %d bits, want at least 96 unguessable bits", attempt, 6*len(attempt))
	}
}

// TestHandoffLeaseIsBoundedByRemainingLiveness (issue 9 item 7): a head that stopped asking long
// ago is handed the lock for what is left of its liveness, not for a whole liveness more.
func TestHandoffLeaseIsBoundedByRemainingLiveness(t *testing.T) {
	c, _, rc := single(t)
	key := uniqueKey(t)
	ctx := context.Background()
	holder := mustAcquire(t, c, key, time.Minute, WithQueue("holder", 0, time.Minute))
	if _, err := c.Acquire(ctx, key, time.Minute, WithQueue("ghost", 1, 2*time.Second)); position(t, err) != 1 {
		t.Fatal("ghost should be first")
	}
	deadline, err := rc.ZScore(ctx, holder.RedisKey()+":waiters", "ghost").Result()
	if err != nil {
		t.Fatal(err)
	}
	var remaining time.Duration
	eventually(t, 5*time.Second, "most of the ghost's liveness to pass", func() bool {
		now, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		remaining = time.UnixMilli(int64(deadline)).Sub(now)
		return remaining < 700*time.Millisecond
	})
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Redis counts whole milliseconds: allow the one that reading the clock in ms can add.
	if !st.Held || st.TTL > remaining+time.Millisecond {
		t.Fatalf("handed to the ghost: %+v, want held for at most its remaining liveness %v", st, remaining)
	}
}

// TestTTLIsTruncatedToMilliseconds (issue 9 item 10): Redis keeps a lease in whole milliseconds, so
// the client must count the same lease, never a longer one.
func TestTTLIsTruncatedToMilliseconds(t *testing.T) {
	c, _, _ := single(t)
	l := mustAcquire(t, c, uniqueKey(t), 10*time.Second+900*time.Microsecond)
	if got := l.LeaseTTL(); got != 10*time.Second {
		t.Fatalf("lease %v after Acquire, want 10s", got)
	}
	if got := l.ValidUntil().Sub(l.LeaseStart()); got > 10*time.Second {
		t.Fatalf("validity %v, longer than the 10s Redis keeps", got)
	}
	if err := l.Renew(context.Background(), 5*time.Second+999*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if got := l.LeaseTTL(); got != 5*time.Second {
		t.Fatalf("lease %v after Renew, want 5s", got)
	}
}

// TestKeyPrefixRefusesBraces (issue 9 item 10): a brace in the prefix would change the hash tag.
func TestKeyPrefixRefusesBraces(t *testing.T) {
	srvs := redisserver.StartN(t, 3)
	clients := make([]redis.UniversalClient, len(srvs))
	for i, s := range srvs {
		clients[i] = s.Client(t)
	}
	for _, prefix := range []string{"app{", "app}", "{x}:"} {
		if _, err := New(clients[0], WithKeyPrefix(prefix)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New with prefix %q: %v, want ErrInvalidArgument", prefix, err)
		}
		if _, err := NewRedlock(clients, WithKeyPrefix(prefix)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewRedlock with prefix %q: %v, want ErrInvalidArgument", prefix, err)
		}
	}
}

// TestGrantMarkIsNoCredential: a fresh grant stores its token followed by the attempt's mark. Only
// that very token holds the lock: neither a token that is a prefix of it nor anything that reaches
// into the mark can re-adopt, release or undo it, and the holder can still use every operation.
func TestGrantMarkIsNoCredential(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	l := mustAcquire(t, c, key, time.Minute, WithToken("tok-long"))
	raw, err := rc.Get(ctx, l.RedisKey()).Result()
	if err != nil || raw == "tok-long" || HolderToken(raw) != "tok-long" {
		t.Fatalf("a fresh grant stored %q (%v), want the token with a grant mark", raw, err)
	}

	for _, other := range []string{"tok", "tok-lon", "tok-long-"} {
		if _, err := c.Acquire(ctx, key, time.Minute, WithToken(other)); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("Acquire with %q: %v, want ErrNotAcquired", other, err)
		}
		if err := c.ReleaseToken(ctx, key, other, 0); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("ReleaseToken with %q: %v, want ErrNotHeld", other, err)
		}
	}
	if err := c.ReleaseToken(ctx, key, raw, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("ReleaseToken with the stored value: %v, want ErrInvalidArgument", err)
	}
	if v := lockHolder(t, rc, l.RedisKey()); v != "tok-long" {
		t.Fatalf("the lock holds %q after the others tried, want it kept", v)
	}

	if err := l.Renew(ctx, 0); err != nil {
		t.Fatalf("holder's Renew: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("holder's TTL: %v, %v", ttl, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("holder's Release: %v", err)
	}
	if v := lockHolder(t, rc, l.RedisKey()); v != "" {
		t.Fatalf("released lock still holds %q", v)
	}
}

// TestFenceCounterAheadOfTheClock: when the counter is ahead of the server clock (as after a
// failover to a host whose clock is behind), tokens continue from the counter, one by one, and the
// counter keeps the token handed out (nextFence writes the clock first and must correct it).
func TestFenceCounterAheadOfTheClock(t *testing.T) {
	c, _, rc := single(t)
	ctx := context.Background()
	key := uniqueKey(t)
	fenceKey := c.RedisKey(key) + ":fence"
	far := time.Now().Add(24 * time.Hour).UnixMicro()
	if err := rc.Set(ctx, fenceKey, far, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for want := far + 1; want <= far+2; want++ {
		l := mustAcquire(t, c, key, time.Minute)
		if l.Fence() != want {
			t.Fatalf("fence %d, want %d (the counter plus one)", l.Fence(), want)
		}
		if stored, err := rc.Get(ctx, fenceKey).Int64(); err != nil || stored != want {
			t.Fatalf("counter holds %d (%v), want the token handed out, %d", stored, err, want)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
