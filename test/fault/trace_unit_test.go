package fault

import (
	"strings"
	"testing"

	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// The trace check must be able to refuse: each case is a hand-made record of what Redis ran and
// what the pods wrote, as the fault suite records them.

const traceKey = "lockedjob:{cluster/lock-t}"

// traceClaimants are two claimants' queue members (holder names with their UID), tokens and
// scores: a1 is ahead of b1, so they are clients 1 and 2.
var traceClaimants = map[string]struct{ member, token, score string }{
	"a1": {"a/fault-t/a1/aaaa1111", "token-a1", "1000"},
	"b1": {"b/fault-t/b1/bbbb2222", "token-b1", "2000"},
}

// Outcomes of an acquire script, as its writes show them.
const (
	granted   = "granted"
	readopted = "re-adopts"
	waits     = "waits"
)

// writes are the commands an acquire script with outcome calls on the lock and fence keys.
func writes(outcome string) [][]string {
	switch outcome {
	case granted:
		return [][]string{{"SET", traceKey, "token\\x00attempt"}, {"GETSET", traceKey + ":fence", "1000001"}}
	case readopted:
		return [][]string{{"SET", traceKey, "token"}, {"GET", traceKey + ":fence"}}
	}
	return [][]string{{"SET", traceKey, "token\\x00attempt", "NX", "PX", "3000"}, {"GET", traceKey}} // acquire.lua's try on a held lock
}

func ask(who, outcome string) redisserver.ScriptRun {
	c := traceClaimants[who]
	return redisserver.ScriptRun{Name: "acquire queued", Keys: []string{traceKey, traceKey + ":meta", traceKey + ":fence"},
		Argv: []string{c.token, "3000", c.member, "attempt", c.member, c.score, "10000", ""}, Calls: writes(outcome)}
}

func readoptRun(who, outcome string) redisserver.ScriptRun {
	c := traceClaimants[who]
	return redisserver.ScriptRun{Name: "acquire", Keys: []string{traceKey, traceKey + ":meta", traceKey + ":fence"},
		Argv: []string{c.token, "3000", c.member, "attempt"}, Calls: writes(outcome)}
}

func releaseRun(who string) redisserver.ScriptRun {
	return redisserver.ScriptRun{Name: "release handoff", Keys: []string{traceKey}, Argv: []string{traceClaimants[who].token, "", "600000", "0"},
		Calls: [][]string{{"GET", traceKey}, {"DEL", traceKey, traceKey + ":meta"}}}
}

// renewal is the keeper's renewal of who's lock, which found it held.
func renewal(who string) redisserver.ScriptRun {
	return redisserver.ScriptRun{Name: "renew", Keys: []string{traceKey, traceKey + ":meta"}, Argv: []string{traceClaimants[who].token, "3000"},
		Calls: [][]string{{"GET", traceKey}, {"PEXPIRE", traceKey, "3000"}}}
}

func tracePod(cluster, claimant string, fence int64, startMS int) podSpan {
	return podSpan{Cluster: cluster, Namespace: "fault-t", Name: claimant + "-pod", Claimant: claimant, Fence: fence, JobFence: fence,
		Start: at(startMS), End: at(startMS + 100), Stopped: true}
}

// followRecord maps and follows a record in which the fault hits the clusters in disturbed.
func followRecord(t *testing.T, runs []redisserver.ScriptRun, pods []podSpan, disturbed ...string) error {
	t.Helper()
	streams, members, err := queueTrace(traceKey, runs, pods)
	if err != nil {
		return err
	}
	r, err := followTrace(streams, members, disturbed)
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		return r
	}
	return nil
}

func TestTraceOfAHandoffFollows(t *testing.T) {
	runs := []redisserver.ScriptRun{ask("a1", granted), ask("b1", waits), renewal("a1"), releaseRun("a1"), ask("b1", readopted),
		renewal("b1"), releaseRun("b1")}
	pods := []podSpan{tracePod("a", "a1", 1000001, 0), tracePod("b", "b1", 1000002, 200)}
	if err := followRecord(t, runs, pods); err != nil {
		t.Fatalf("a handoff was refused: %v", err)
	}
}

func TestTraceOfARestartedOperatorFollows(t *testing.T) {
	// a1's operator is killed while a1 holds, starts again and re-adopts; b1 waits, then is handed
	// the lock. A retry whose first ask granted without a reply asks once more, and re-adopts.
	runs := []redisserver.ScriptRun{ask("a1", granted), ask("a1", readopted), ask("b1", waits), renewal("a1"), readoptRun("a1", readopted),
		releaseRun("a1"), ask("b1", readopted), releaseRun("b1")}
	pods := []podSpan{tracePod("a", "a1", 1000001, 0), tracePod("b", "b1", 1000002, 200)}
	if err := followRecord(t, runs, pods, "a"); err != nil {
		t.Fatalf("a restart was refused: %v", err)
	}
	// Where no fault hits a1's operator, it does not start again: its re-adoption is no run.
	if err := followRecord(t, runs, pods); err == nil {
		t.Fatal("a re-adoption by an operator that never stopped was taken for a run of the model")
	}
}

func TestTraceRefusesAWriteWithoutAGrant(t *testing.T) {
	// b1 asked only while a1 held the lock, and never again: nothing granted it the lock, yet a pod
	// of b1's wrote under a fence.
	runs := []redisserver.ScriptRun{ask("a1", granted), ask("b1", waits), releaseRun("a1")}
	pods := []podSpan{tracePod("a", "a1", 1000001, 0), tracePod("b", "b1", 1000002, 200)}
	err := followRecord(t, runs, pods)
	if err == nil {
		t.Fatal("a write by a claimant Redis never granted was taken for a run of the model")
	}
	if !strings.Contains(err.Error(), "c2 writes to the store") {
		t.Fatalf("refused, but not at b1's write: %v", err)
	}
}

func TestTraceRefusesTwoGrantsAtOnceWithoutAFault(t *testing.T) {
	// Redis granted b1 while a1 held the lock, and a1's next renewal still found it a1's: no run of
	// the model grants a held lock, whatever the clients did in between.
	runs := []redisserver.ScriptRun{ask("a1", granted), ask("b1", granted), renewal("a1"), releaseRun("a1")}
	pods := []podSpan{tracePod("a", "a1", 1000001, 0), tracePod("b", "b1", 1000002, 200)}
	err := followRecord(t, runs, pods)
	if err == nil {
		t.Fatal("a grant of a held lock was taken for a run of the model")
	}
	// Without the renewal, a1's lease may have run out first (a pause): that is a run.
	if err := followRecord(t, []redisserver.ScriptRun{ask("a1", granted), ask("b1", granted), releaseRun("b1")}, pods); err != nil {
		t.Fatalf("a grant after a lease that may have run out was refused: %v", err)
	}
}

func TestTraceLeavesOtherLocksAndReadsOut(t *testing.T) {
	other := ask("b1", waits)
	other.Keys = []string{"lockedjob:{cluster/another}"}
	runs := []redisserver.ScriptRun{other, ask("a1", granted), {Name: "inspect", Keys: []string{traceKey}}, releaseRun("a1")}
	streams, members, err := queueTrace(traceKey, runs, []podSpan{tracePod("a", "a1", 1000001, 0)})
	if err != nil {
		t.Fatal(err)
	}
	want := "c1 asks (acquirequeued.lua) → is granted | c1 releases (releasehandoff.lua) → released"
	if got := strings.Join(streams[0], " | "); got != want || len(members) != 1 {
		t.Fatalf("scripts %q of %v, want %q of a1 alone", got, members, want)
	}
}

func TestTraceRefusesARecordItCannotMap(t *testing.T) {
	if _, _, err := queueTrace(traceKey, []redisserver.ScriptRun{ask("a1", waits)}, []podSpan{tracePod("b", "b1", 1000002, 0)}); err == nil {
		t.Error("a pod of a claimant that never asked was mapped")
	}
	if _, _, err := queueTrace(traceKey, []redisserver.ScriptRun{ask("a1", waits), releaseRun("b1")}, nil); err == nil {
		t.Error("a release by a token nobody asked with was mapped")
	}
	slots := redisserver.ScriptRun{Name: "acquire slots", Keys: []string{traceKey}, Argv: []string{"t"}}
	if _, _, err := queueTrace(traceKey, []redisserver.ScriptRun{slots}, nil); err == nil {
		t.Error("a semaphore's scripts were mapped to the queue model")
	}
}
