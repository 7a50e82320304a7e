package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/model"
	. "github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// Trace validation of the lock library against the single-deployment model (issue 25, part 4;
// docs/model.md, "Traces"): a run of real clients on a real redis-server, with a real fault, is
// recorded as two streams, what the clients did (in the order the test's one goroutine did it) and
// every script Redis ran (MONITOR, in the order Redis ran them), mapped to the model's step labels,
// and model.Follow checks that some interleaving of the two is a run of the model.

// clientTrace records what the test's clients did, as the model's labels.
type clientTrace struct {
	tokens []string // index + 1 is the model's client number
	sent   []int    // attempts sent, per client
	events []string
}

func (ct *clientTrace) client(token string) int { return slices.Index(ct.tokens, token) + 1 }

// acquire makes one attempt (no retry) of client token's and records it and its answer.
func (ct *clientTrace) acquire(ctx context.Context, t *testing.T, c *Client, key, token string, ttl time.Duration) *Lock {
	t.Helper()
	i := ct.client(token)
	ct.sent[i-1]++
	ct.events = append(ct.events, fmt.Sprintf("c%d sends attempt %d", i, ct.sent[i-1]))
	l, err := c.Acquire(ctx, key, ttl, WithToken(token), WithRetry(NoRetry()))
	switch {
	case err == nil:
		ct.events = append(ct.events, fmt.Sprintf("c%d holds with fence %d", i, l.Fence()))
	case errors.Is(err, ErrNotAcquired):
		ct.events = append(ct.events, fmt.Sprintf("c%d is refused or fails", i))
	default: // no answer: the outcome is unknown, and the library undoes the attempt late
		ct.events = append(ct.events, fmt.Sprintf("c%d gives up on attempt %d (no reply) and undoes it late", i, ct.sent[i-1]))
	}
	return l
}

func (ct *clientTrace) release(ctx context.Context, t *testing.T, l *Lock) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ct.events = append(ct.events, fmt.Sprintf("c%d releases", ct.client(l.Token())))
}

// scriptsRun are the scripts the MONITOR lines show Redis running, in order (every script is
// loaded before the recording; see the tests).
func scriptsRun(t *testing.T, lines []string) []redisserver.ScriptRun {
	t.Helper()
	runs, err := redisserver.ScriptsRun(lines, redisserver.ScriptNames(ScriptSources()))
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// scriptEvents maps the commands MONITOR saw to the model's labels of the acquire and undo
// scripts of ct's clients. Attempts are numbered per client in the order their ids first appear,
// which is the order they were sent when each client sends its next attempt only after it has its
// answer or gave up. Releases are the clients' own steps in the model, and other scripts (reads)
// are none of its steps, so both are left out. The library repeats a late undo until one is
// answered; an undo that finds nothing of its attempts changes nothing, so of an attempt's undos
// the one kept is the first after its acquire script ran, or the first if that script never ran.
func scriptEvents(t *testing.T, ct *clientTrace, lines []string) []string {
	t.Helper()
	attempts := map[string]int{} // attempt id → its number for its client
	perClient := map[int]int{}
	type undo struct {
		at    int
		label string
	}
	var events []string
	acquiredAt := map[string]int{} // attempt id → index of its acquire script in events
	undos := map[string][]undo{}
	number := func(client int, id string) int {
		if _, ok := attempts[id]; !ok {
			perClient[client]++
			attempts[id] = perClient[client]
		}
		return attempts[id]
	}
	for _, run := range scriptsRun(t, lines) {
		argv := run.Argv
		switch run.Name {
		case "acquire": // ARGV: token, ttl, metadata, attempt id
			client, id := ct.client(argv[0]), argv[3]
			acquiredAt[id] = len(events)
			events = append(events, fmt.Sprintf("acquire script of c%d attempt %d runs", client, number(client, id)))
		case "undo": // ARGV: token, attempt ids
			client := ct.client(argv[0])
			for _, a := range argv[1:] {
				undos[a] = append(undos[a], undo{at: len(events), label: fmt.Sprintf("undo script of c%d attempt %d runs", client, number(client, a))})
			}
		}
	}
	// Put each attempt's kept undo in its place among the acquire scripts (a later place first,
	// so the earlier places stay right).
	var kept []undo
	for id, us := range undos {
		k := us[0]
		if at, ok := acquiredAt[id]; ok {
			if i := slices.IndexFunc(us, func(u undo) bool { return u.at > at }); i >= 0 {
				k = us[i]
			}
		}
		kept = append(kept, k)
	}
	slices.SortFunc(kept, func(a, b undo) int { return b.at - a.at })
	for _, k := range kept {
		events = slices.Insert(events, k.at, k.label)
	}
	return events
}

// traceSeen is what the recorder sees of the single-deployment model's steps: the clients' calls
// and answers and the acquire and undo scripts; a validity's end, the clock and an expiry are not.
func traceSeen(label string) bool {
	for _, hidden := range []string{"validity", "clock", "expires", "replica"} {
		if strings.Contains(label, hidden) {
			return false
		}
	}
	return true
}

var traceFence = regexp.MustCompile(`fence \d+`)

// sameStep compares a label with an event up to their fencing tokens: the model's are small
// numbers, the library's a hybrid clock's microseconds (their order is checked elsewhere). These
// recordings do not read a script's outcome, so a label's ("… → waits") is left out.
func sameStep(label, event string) bool {
	label, _, _ = strings.Cut(label, " → ")
	return traceFence.ReplaceAllString(label, "fence N") == traceFence.ReplaceAllString(event, "fence N")
}

// TestTraceOfAPausedAcquireFollowsTheModel: client 1 acquires while Redis is paused, gives up,
// and the library undoes its attempt late; Redis resumes and runs the queued acquire and the undo
// in whatever order it reads them; client 2 then acquires and releases. The recorded run is a run
// of the model. The same trace with client 1 claiming the lock after it gave up is not.
func TestTraceOfAPausedAcquireFollowsTheModel(t *testing.T) {
	srv := redisserver.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	// Every script loaded first: an EVALSHA that Redis refuses with NOSCRIPT (and the library then
	// loads and sends again) looks in MONITOR like one that ran.
	for _, src := range ScriptSources() {
		if err := redis.NewScript(src).Load(ctx, rc).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seen := redisserver.Monitor(t, rc)
	c1, err := New(srv.Client(t), WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	ct := &clientTrace{tokens: []string{"tok-1", "tok-2"}, sent: make([]int, 2)}

	// Client 1's connection is made first, so its attempt is written to Redis while Redis is paused
	// rather than stuck in the connection's handshake.
	if _, err := c1.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if l := ct.acquire(short, t, c1, key, "tok-1", time.Second); l != nil {
		t.Fatal("an acquisition answered while Redis was paused")
	}
	cancel()
	srv.Resume(t)
	eventually(t, 10*time.Second, "client 1's late undo to end", func() bool { return LateReleasesRunning(c1) == 0 })
	eventually(t, 10*time.Second, "the lock to be free", func() bool {
		st, err := c2.Inspect(ctx, key)
		return err == nil && !st.Held
	})
	var l *Lock
	for l == nil && ct.sent[1] < 7 {
		l = ct.acquire(ctx, t, c2, key, "tok-2", time.Minute)
	}
	if l == nil {
		t.Fatalf("client 2 never acquired the free lock: %v", ct.events)
	}
	ct.release(ctx, t, l)

	scripts := scriptEvents(t, ct, seen())
	t.Logf("clients: %q\nRedis: %q", ct.events, scripts)
	cfg := model.SingleConfig{Attempts: max(ct.sent[0], ct.sent[1]), Ticks: 1}
	streams := [][]string{ct.events, scripts}
	if r, err := model.Follow(model.SingleInit(), model.SingleNext(cfg), traceSeen, streams, sameStep, 5_000_000); err != nil || r != nil {
		t.Fatalf("the recorded run is not a run of the model: %v %v", r, err)
	}
	// The checker is not blind: client 1 claiming the lock after it gave up on its one attempt
	// is no run of the model.
	forged := slices.Insert(slices.Clone(ct.events), 2, "c1 holds with fence 1")
	r, err := model.Follow(model.SingleInit(), model.SingleNext(cfg), traceSeen, [][]string{forged, scripts}, sameStep, 5_000_000)
	if err != nil || r == nil {
		t.Fatalf("a forged trace was taken for a run of the model: %v %v", r, err)
	}
}

// queueScriptEvents maps the commands MONITOR saw to the queue model's labels: each client's asks
// (acquirequeued.lua), releases (releasehandoff.lua) and giving up (dequeue.lua), tied to the client
// by its token (its member, for dequeue.lua). Reads and keepalives are none of the model's steps.
func queueScriptEvents(t *testing.T, tokens, members []string, lines []string) []string {
	t.Helper()
	var events []string
	for _, run := range scriptsRun(t, lines) {
		switch run.Name {
		case "acquire queued":
			events = append(events, fmt.Sprintf("c%d asks (acquirequeued.lua)", slices.Index(tokens, run.Argv[0])+1))
		case "release handoff":
			events = append(events, fmt.Sprintf("c%d releases (releasehandoff.lua)", slices.Index(tokens, run.Argv[0])+1))
		case "dequeue":
			events = append(events, fmt.Sprintf("c%d gives up (dequeue.lua)", slices.Index(members, run.Argv[0])+1))
		}
	}
	return events
}

// queueSeen: the scripts and the clients' writes are seen; a wake-up (by the channel or the
// backoff timer), a validity's end, an expiry and a liveness that runs out are not.
func queueSeen(label string) bool {
	return strings.Contains(label, ".lua)") || strings.Contains(label, "writes to the store")
}

// TestTraceOfAQueuedHandoffFollowsTheModel: three clients on one redis-server each make one queued
// Acquire of one lock at once (client 1's score ahead of 2's, 2's of 3's), write once to a fenced
// store while they hold it, and release, handing it to the next in line. What Redis ran and what
// each client wrote follow the queue model (a waiter wakes on the release channel or its backoff
// timer); the same trace with a client writing before any grant is refused.
func TestTraceOfAQueuedHandoffFollowsTheModel(t *testing.T) {
	srv := redisserver.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	for _, src := range ScriptSources() {
		if err := redis.NewScript(src).Load(ctx, rc).Err(); err != nil {
			t.Fatal(err)
		}
	}
	key := uniqueKey(t)
	tokens := []string{"tok-1", "tok-2", "tok-3"}
	members := []string{"m-1", "m-2", "m-3"}
	// Each client's connection and subscription are made before the run, so the run is only the
	// protocol's calls.
	clients := make([]*Client, 3)
	for i := range clients {
		c, err := New(srv.Client(t), WithReleaseNotifications("trace:released"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, key); err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	seen := redisserver.Monitor(t, rc)

	writes := make([][]string, 3) // each client's writes, in its own order
	errs := make(chan error, 3)
	for i, c := range clients {
		go func() {
			l, err := c.Acquire(ctx, key, time.Minute, WithToken(tokens[i]), WithQueue(members[i], float64(i+1), time.Minute),
				WithRetry(FixedBackoff(20*time.Millisecond)))
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i+1, err)
				return
			}
			writes[i] = append(writes[i], fmt.Sprintf("c%d writes to the store with fence %d", i+1, l.Fence()))
			errs <- l.Release(ctx)
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	scripts := queueScriptEvents(t, tokens, members, seen())
	t.Logf("Redis: %q\nwrites: %q", scripts, writes)
	cfg := model.QueueConfig{Poll: true}
	streams := append([][]string{scripts}, writes...)
	if r, err := model.Follow(model.QueueInit(), model.QueueNext(cfg), queueSeen, streams, sameStep, 5_000_000); err != nil || r != nil {
		t.Fatalf("the recorded run is not a run of the model: %v %v", r, err)
	}
	// Not blind: a client that writes before Redis granted anyone anything is no run of the model.
	early := append([][]string{append([]string{"c3 writes to the store with fence 1"}, scripts...)}, writes...)
	r, err := model.Follow(model.QueueInit(), model.QueueNext(cfg), queueSeen, early, sameStep, 5_000_000)
	if err != nil || r == nil {
		t.Fatalf("a forged trace was taken for a run of the model: %v %v", r, err)
	}
}
