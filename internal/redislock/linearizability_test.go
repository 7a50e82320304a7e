package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// The sequential specification a lock's history must linearize to: one holder at a time, and
// every grant's fence above every earlier grant's. Leases outlast the histories here, so nothing
// expires: an Acquire of a held lock is refused, a Release by the holder frees it. On one Redis a
// refusal means the lock was held; on Redlock contenders can split the nodes so that none gets a
// majority, and a refusal may come while the lock is free (redlockSpec).

type lockSpecState struct {
	holder int // client id + 1; 0 when free
	fence  int64
}

type lockOp struct {
	client  int
	release bool
}

type lockOutcome struct {
	ok    bool
	fence int64 // of a granted Acquire
}

var lockSpec, redlockSpec = lockModel(false), lockModel(true)

func lockModel(splitVotes bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lockSpecState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(lockSpecState), input.(lockOp), output.(lockOutcome)
			switch {
			case in.release:
				if !out.ok || s.holder != in.client+1 {
					return false, s
				}
				return true, lockSpecState{fence: s.fence}
			case out.ok:
				if s.holder != 0 || out.fence <= s.fence {
					return false, s
				}
				return true, lockSpecState{holder: in.client + 1, fence: out.fence}
			default: // refused: someone else held it, or (Redlock) the contenders split the nodes
				return splitVotes || (s.holder != 0 && s.holder != in.client+1), s
			}
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(lockOp), output.(lockOutcome)
			if in.release {
				return fmt.Sprintf("c%d release -> %v", in.client, out.ok)
			}
			return fmt.Sprintf("c%d acquire -> %v fence %d", in.client, out.ok, out.fence)
		},
	}
}

// lockHistory runs clients goroutines that each try ops times to acquire key (no retry) through
// clientFor(their id) and, when granted, release it, and returns every call with its invocation and
// response times.
func lockHistory(t *testing.T, clientFor func(id int) *Client, key string, clients, ops int) []porcupine.Operation {
	t.Helper()
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	record := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	errs := make(chan error, clients)
	ctx := context.Background()
	for id := range clients {
		c := clientFor(id)
		wg.Go(func() {
			for range ops {
				call := now()
				l, err := c.Acquire(ctx, key, time.Minute)
				ret := now()
				switch {
				case errors.Is(err, ErrNotAcquired):
					record(porcupine.Operation{ClientId: id, Input: lockOp{client: id}, Call: call, Output: lockOutcome{}, Return: ret})
					continue
				case err != nil:
					errs <- fmt.Errorf("c%d acquire: %w", id, err)
					return
				}
				record(porcupine.Operation{ClientId: id, Input: lockOp{client: id}, Call: call, Output: lockOutcome{ok: true, fence: l.Fence()}, Return: ret})
				call = now()
				err = l.Release(ctx)
				record(porcupine.Operation{ClientId: id, Input: lockOp{client: id, release: true}, Call: call, Output: lockOutcome{ok: err == nil}, Return: now()})
				if err != nil {
					errs <- fmt.Errorf("c%d release: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return history
}

// TestLinearizable checks the histories of concurrent Acquire and Release calls on real Redis
// servers against the sequential lock: porcupine finds an order of the calls, each inside its own
// call-to-return interval, that the specification accepts, or the test fails.
func TestLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec porcupine.Model
		// clients returns, for the key, what each goroutine acquires through.
		clients func(t *testing.T, key string) func(id int) *Client
	}{
		{"one Redis", lockSpec, func(t *testing.T, _ string) func(int) *Client {
			c, _, _ := single(t)
			return func(int) *Client { return c }
		}},
		{"Redlock on 3 nodes", redlockSpec, func(t *testing.T, _ string) func(int) *Client {
			c, _ := redlock(t, 3, WithNodeTimeout(time.Second))
			return func(int) *Client { return c }
		}},
		{"Redlock, one node's counter far ahead, a client each", redlockSpec, func(t *testing.T, key string) func(int) *Client {
			// Every client's first proposal is below node 1's counter: the nodes disagree and the
			// token is written back, while the others acquire and release beside it.
			c, srvs := redlock(t, 3, WithNodeTimeout(time.Second))
			far := time.Now().Add(time.Hour).UnixMicro()
			if err := srvs[1].Client(t).Set(context.Background(), c.RedisKey(key)+":fence", far, 0).Err(); err != nil {
				t.Fatal(err)
			}
			return func(int) *Client { return redlockOn(t, srvs, WithNodeTimeout(time.Second)) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey(t)
			history := lockHistory(t, tc.clients(t, key), key, 6, 40)
			granted := 0
			for _, op := range history {
				if out := op.Output.(lockOutcome); out.ok && !op.Input.(lockOp).release {
					granted++
				}
			}
			if granted == 0 || granted == len(history) {
				t.Fatalf("%d grants in %d calls: the history has no contention to check", granted, len(history))
			}
			res := porcupine.CheckOperationsTimeout(tc.spec, history, time.Minute)
			if res != porcupine.Ok {
				t.Fatalf("history of %d calls (%d grants) is %s against the sequential lock", len(history), granted, res)
			}
			t.Logf("%d calls, %d grants: linearizable", len(history), granted)
		})
	}
}

// TestLinearizableSpecRefuses: the specification (and so the check) rejects the histories a broken
// lock would produce, so TestLinearizable can fail.
func TestLinearizableSpecRefuses(t *testing.T) {
	acq := func(client int, call, ret, fence int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: lockOp{client: client}, Call: call,
			Output: lockOutcome{ok: true, fence: fence}, Return: ret}
	}
	rel := func(client int, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: lockOp{client: client, release: true}, Call: call,
			Output: lockOutcome{ok: true}, Return: ret}
	}
	for name, history := range map[string][]porcupine.Operation{
		"two holders":            {acq(0, 0, 1, 10), acq(1, 2, 3, 11), rel(0, 4, 5), rel(1, 6, 7)},
		"a fence that went back": {acq(0, 0, 1, 10), rel(0, 2, 3), acq(1, 4, 5, 9), rel(1, 6, 7)},
		"a refusal of a free lock": {acq(0, 0, 1, 10), rel(0, 2, 3),
			{ClientId: 1, Input: lockOp{client: 1}, Call: 4, Output: lockOutcome{}, Return: 5}},
	} {
		if porcupine.CheckOperations(lockSpec, history) {
			t.Errorf("%s: accepted", name)
		}
		if name != "a refusal of a free lock" && porcupine.CheckOperations(redlockSpec, history) {
			t.Errorf("%s: accepted by the Redlock specification", name)
		}
	}
	ok := []porcupine.Operation{acq(0, 0, 1, 10), rel(0, 2, 5), acq(1, 3, 6, 11), rel(1, 7, 8)}
	if !porcupine.CheckOperations(lockSpec, ok) {
		t.Error("a history with an acquire overlapping the release before it was refused")
	}
}
