package fault

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lockedjob/lockedjob/internal/model"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// Trace validation of the fault suite's runs (issue 25, part 4; docs/model.md, "Traces"): what
// Redis ran for a scenario's lock (MONITOR, in the order Redis ran it) and what each claimant's
// pods wrote with their fences (the recorder's history) must be a run of the queue model, with its
// clients as an operator's claimants (model.QueueConfig.Operator). So the operators' real calls,
// under the scenario's fault, are held to the model's transitions: a grant the model would not
// make, to a claimant whose pod then ran, is refused.
//
// Like the checker, this has no build tag and is tested on hand-made traces by the unit tests; the
// fault suite records the real ones.

// traceModel is the queue model the traces follow: waiters ask again on their backoff timer, the
// release channel may lose messages, waiters may leave, and the clients are an operator's, those
// of the clusters in disturbed hit by the fault (model.QueueConfig.Disturbed).
func traceModel(members, disturbed []string) model.QueueConfig {
	cfg := model.QueueConfig{Poll: true, LoseMessages: true, GiveUp: true, Operator: true}
	for i, m := range members {
		cluster, _, _ := strings.Cut(m, "/")
		if slices.Contains(disturbed, cluster) {
			cfg.Disturbed |= 1 << i
		}
	}
	return cfg
}

// traceLimit bounds the places Follow visits for one scenario (a few hundred bytes each).
const traceLimit = 3_000_000

// queueTrace maps one scenario's record to the queue model's streams: first every script Redis ran
// on the lock whose key is lockKey, then, per claimant, its pods' writes, one for each fence
// (a pod's first write; the model's store takes a second write with the same fence as nothing new).
// The claimants are the model's clients, numbered by their score in the queue (priority, then
// age; ties by member, as a sorted set orders them), each found by the member and token its asks
// carry. Scripts the model has no step for (a renewal, a keepalive, a read) are left out.
func queueTrace(lockKey string, runs []redisserver.ScriptRun, pods []podSpan) (streams [][]string, members []string, err error) {
	var ours []redisserver.ScriptRun
	for _, r := range runs {
		if len(r.Keys) > 0 && r.Keys[0] == lockKey {
			ours = append(ours, r)
		}
	}
	members, byToken, err := traceClients(ours)
	if err != nil {
		return nil, nil, err
	}
	client := func(member string) int { return slices.Index(members, member) + 1 }
	byTokenOf := func(r redisserver.ScriptRun) (int, error) {
		if m, ok := byToken[r.Argv[0]]; ok {
			return client(m), nil
		}
		return 0, fmt.Errorf("%s by a token no claimant asked with", r.Name)
	}
	var scripts []string
	for _, r := range ours {
		label := ""
		switch r.Name {
		case "acquire queued": // ARGV: token, ttl, metadata, attempt, waiter, score, liveness, join
			label = fmt.Sprintf("c%d asks (acquirequeued.lua) → %s", client(r.Argv[4]), grantOf(r, "waits"))
			if len(r.Argv) > 7 && r.Argv[7] == "1" {
				label = fmt.Sprintf("c%d joins (acquirequeued.lua)", client(r.Argv[4]))
			}
		case "acquire": // ARGV: token, ttl, metadata, attempt
			label = fmt.Sprintf("c%d re-adopts (acquire.lua) → %s", client(byToken[r.Argv[0]]), grantOf(r, "is refused"))
		case "release handoff", "release", "undo", "renew": // ARGV: token, ...
			c, err := byTokenOf(r)
			if err != nil {
				return nil, nil, err
			}
			label = fmt.Sprintf(scriptOutcome(r), c)
		case "dequeue": // ARGV: waiter, ...
			label = fmt.Sprintf("c%d gives up (dequeue.lua)", client(r.Argv[0]))
		case "acquire slots", "release slot", "dequeue slots", "undo slots", "set permits":
			return nil, nil, fmt.Errorf("%s ran on %s: a semaphore's slots, which the queue model does not have", r.Name, lockKey)
		case "":
			return nil, nil, fmt.Errorf("a script this build does not know ran on %s", lockKey)
		}
		if label != "" {
			scripts = append(scripts, label)
		}
	}
	streams = [][]string{scripts}
	writes, err := traceWrites(members, pods)
	if err != nil {
		return nil, nil, err
	}
	streams = append(streams, writes...)
	if len(streams) > model.MaxStreams || len(members) > model.MaxQueueClients {
		return nil, nil, fmt.Errorf("%d claimants: the model follows at most %d, in %d streams", len(members),
			model.MaxQueueClients, model.MaxStreams)
	}
	return streams, members, nil
}

// grantOf names what an acquire script did, as its writes show: it took the next fence (a fresh
// grant), wrote the lock key without taking one (a re-adoption: the lock held the caller's
// token), or neither. acquire.lua tries every call with SET NX first, which writes nothing on a
// held lock, so only a SET without NX counts as a write.
func grantOf(r redisserver.ScriptRun, refused string) string {
	if len(r.Keys) < 3 {
		return "(keys " + strings.Join(r.Keys, ", ") + ")" // no lock, meta and fence: matches no step
	}
	lock, fence := r.Keys[0], r.Keys[2]
	if r.Called("GETSET", fence) {
		return "is granted"
	}
	for _, c := range r.Calls {
		if len(c) > 1 && strings.EqualFold(c[0], "SET") && c[1] == lock && !slices.ContainsFunc(c[2:], func(a string) bool { return strings.EqualFold(a, "NX") }) {
			return "re-adopts"
		}
	}
	return refused
}

// scriptOutcome is the label (for fmt, with the client's number) of a script by a holder's token,
// with what it did, as its writes show: a release that deleted the lock, a renewal that pushed its
// expiry back, an undo that removed it.
func scriptOutcome(r redisserver.ScriptRun) string {
	lock := r.Keys[0]
	switch r.Name {
	case "release handoff":
		return "c%d releases (releasehandoff.lua) → " + pick(r.Called("DEL", lock), "released", "not ours")
	case "renew":
		return "c%d renews (renew.lua) → " + pick(r.Called("PEXPIRE", lock), "renewed", "not ours")
	case "undo":
		return "c%d undoes an attempt (undo.lua) → " + pick(r.Called("DEL", lock), "removes the lock", "changes nothing")
	}
	return "c%d releases (release.lua)" // the deployment's other release, which the queue model has no step for
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// traceClients are the claimants that asked for the lock in runs, in the queue's order, and the
// claimant (member) of each token they asked with.
func traceClients(runs []redisserver.ScriptRun) (members []string, byToken map[string]string, err error) {
	score := map[string]float64{}
	byToken = map[string]string{}
	for _, r := range runs {
		switch r.Name {
		case "acquire queued":
			if len(r.Argv) < 6 {
				return nil, nil, fmt.Errorf("acquire queued with %d arguments", len(r.Argv))
			}
			s, err := strconv.ParseFloat(r.Argv[5], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("the score of %s: %w", r.Argv[4], err)
			}
			if _, ok := score[r.Argv[4]]; !ok {
				score[r.Argv[4]] = s
				members = append(members, r.Argv[4])
			}
			byToken[r.Argv[0]] = r.Argv[4]
		case "acquire":
			if len(r.Argv) < 3 {
				return nil, nil, fmt.Errorf("acquire with %d arguments", len(r.Argv))
			}
			if _, ok := byToken[r.Argv[0]]; !ok {
				return nil, nil, fmt.Errorf("acquire.lua by %s, which never asked in the queue", r.Argv[2])
			}
		}
	}
	slices.SortFunc(members, func(a, b string) int { return cmp.Or(cmp.Compare(score[a], score[b]), cmp.Compare(a, b)) })
	return members, byToken, nil
}

// traceWrites are each client's writes, one stream per client that wrote: its pods' fences, each
// once, in the order the pods started. A pod without a fence never came under the lock (the
// checker judges it) and writes nothing here.
func traceWrites(members []string, pods []podSpan) ([][]string, error) {
	sorted := slices.Clone(pods)
	slices.SortStableFunc(sorted, func(a, b podSpan) int { return a.Start.Compare(b.Start) })
	perClient := make([][]string, len(members))
	seen := map[string]bool{}
	for _, p := range sorted {
		if p.Fence == 0 {
			continue
		}
		i := slices.IndexFunc(members, func(m string) bool { return holderOf(m) == p.holder() })
		if i < 0 {
			return nil, fmt.Errorf("pod %s of %s ran with fence %d, and its claimant never asked Redis for the lock", p.Name, p.holder(), p.Fence)
		}
		w := fmt.Sprintf("c%d writes to the store with fence %d", i+1, p.Fence)
		if !seen[w] {
			seen[w] = true
			perClient[i] = append(perClient[i], w)
		}
	}
	return slices.DeleteFunc(perClient, func(s []string) bool { return len(s) == 0 }), nil
}

// followTrace checks that streams (queueTrace) are a run of the queue model whose clients are
// members, those of the clusters in disturbed hit by the fault.
func followTrace(streams [][]string, members, disturbed []string) (*model.Refusal, error) {
	return model.Follow(model.QueueInitN(len(members)), model.QueueNext(traceModel(members, disturbed)), traceSeen, streams, traceStep, traceLimit)
}

// traceSeen: the scripts and the pods' writes are seen; what a client does between two scripts
// (wakes, crashes, starts again, sees its validity end) and Redis' expiries are not.
func traceSeen(label string) bool {
	return strings.Contains(label, ".lua)") || strings.Contains(label, "writes to the store")
}

var traceFence = regexp.MustCompile(`fence \d+`)

// traceStep compares a model's label with a recorded event: a release is one whether or not the
// model's client had seen its validity end, and fences compare up to their values (the model's
// are small numbers, the operator's a hybrid clock's microseconds; the checker orders them).
func traceStep(label, event string) bool {
	label = strings.Replace(label, "releases late, by its token (", "releases (", 1)
	return traceFence.ReplaceAllString(label, "fence N") == traceFence.ReplaceAllString(event, "fence N")
}
