//go:build fault

package fault

import (
	"fmt"
	"time"

	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// untraced says why the queue model cannot follow scenario sc's trace, or "" when it can.
func untraced(sc scenario) string {
	if sc.permits > 1 {
		return "a semaphore: the queue model has one slot"
	}
	return sc.untraced
}

// recordTrace starts recording every script the suite's Redis runs, for the scenario's trace
// check, after loading every script of the library (an EVALSHA refused with NOSCRIPT and sent
// again would look like two runs). It returns nil for a scenario the model cannot follow.
func (r *run) recordTrace() func() []string {
	if untraced(r.sc) != "" {
		return nil
	}
	for name, src := range redislock.ScriptSources() {
		if err := env.redisClient.ScriptLoad(r.ctx, src).Err(); err != nil {
			r.t.Fatalf("load script %s: %v", name, err)
		}
	}
	return redisserver.Monitor(r.t, env.redisClient)
}

// checkTrace holds what Redis ran for the scenario's lock, and what the pods wrote, to the queue
// model (queueTrace, followTrace). It returns the table's cell and a failure ("" if none).
func (r *run) checkTrace(seen func() []string, h history) (cell, failure string) {
	if seen == nil {
		return "not checked (" + untraced(r.sc) + ")", ""
	}
	runs, err := redisserver.ScriptsRun(seen(), redisserver.ScriptNames(redislock.ScriptSources()))
	if err != nil {
		return "NO", "trace: " + err.Error()
	}
	streams, members, err := queueTrace(slotKey(r.lock, 0), runs, h.Pods)
	if err != nil {
		return "NO", "trace: " + err.Error()
	}
	start := time.Now()
	refusal, err := followTrace(streams, members, r.sc.disturbs)
	events := 0
	for _, s := range streams {
		events += len(s)
	}
	logf("%s: trace of %d claimants, %d events (%d scripts), checked in %s", r.sc.name, len(members), events, len(streams[0]), since(start))
	switch {
	case err != nil:
		return "NO", "trace: " + err.Error()
	case refusal != nil:
		return "NO", fmt.Sprintf("trace: not a run of the queue model (claimants %v): %v", members, refusal)
	}
	return fmt.Sprintf("followed (%d events)", events), ""
}
