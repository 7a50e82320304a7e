package redislock

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scripts run through EVALSHA, and are loaded when a server (e.g. one that restarted) does not
// know them yet; see runScript and withScript.
var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed acquirequeued.lua
	acquireQueuedSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed releasehandoff.lua
	releaseHandoffSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed pttl.lua
	pttlSrc string
	//go:embed dequeue.lua
	dequeueSrc string
	//go:embed undo.lua
	undoSrc string
	//go:embed keepqueued.lua
	keepQueuedSrc string
	//go:embed lineup.lua
	lineupSrc string
	//go:embed queuestate.lua
	queueStateSrc string
	//go:embed acquireslots.lua
	acquireSlotsSrc string
	//go:embed releaseslot.lua
	releaseSlotSrc string
	//go:embed dequeueslots.lua
	dequeueSlotsSrc string
	//go:embed inspectslots.lua
	inspectSlotsSrc string
	//go:embed undoslots.lua
	undoSlotsSrc string
	//go:embed setpermits.lua
	setPermitsSrc string
	//go:embed announce.lua
	announceSrc string
	//go:embed releasedbefore.lua
	releasedBeforeSrc string
	// Lua scripts cannot include one another, so shared helpers are put in front of the scripts that
	// use them: holder.lua (who holds a lock), clock.lua (server clock, fence counter), queue.lua
	// (the waiter queue and handoff) and grant.lua (the end of a successful acquisition). Each script
	// carries only the helpers it calls, since defining them costs every call;
	// TestComposedScriptsDefineTheirHelpers checks that it carries all of them.
	//go:embed holder.lua
	holderSrc string
	//go:embed clock.lua
	clockSrc string
	//go:embed queue.lua
	queueSrc string
	//go:embed grant.lua
	grantSrc string
	// A semaphore's scripts (a lock acquired WithPermits) also carry slots.lua (its slots' keys) and,
	// when they free a slot, slotrelease.lua (which slot a release hands off).
	//go:embed slots.lua
	slotsSrc string
	//go:embed slotrelease.lua
	slotReleaseSrc string
	// The scripts that release a lock by its token also carry releasemark.lua (the release mark), and
	// so do the acquire scripts a re-adoption runs (WithRecordedFence).
	//go:embed releasemark.lua
	releaseMarkSrc string

	scriptAcquire        = compose("acquire", holderSrc, releaseMarkSrc, clockSrc, grantSrc, acquireSrc)
	scriptAcquireQueued  = compose("acquire queued", holderSrc, clockSrc, queueSrc, grantSrc, acquireQueuedSrc)
	renewFullSrc         = holderSrc + renewSrc // the keeper loads it itself (renewPipeline)
	scriptRenew          = compose("renew", renewFullSrc)
	scriptRelease        = compose("release", holderSrc, releaseMarkSrc, releaseSrc)
	scriptReleaseHandoff = compose("release handoff", holderSrc, releaseMarkSrc, clockSrc, queueSrc, releaseHandoffSrc)
	scriptInspect        = compose("inspect", inspectSrc)
	scriptFence          = compose("fence", holderSrc, fenceSrc)
	scriptPTTL           = compose("pttl", holderSrc, pttlSrc)
	scriptDequeue        = compose("dequeue", holderSrc, clockSrc, queueSrc, dequeueSrc)
	scriptUndo           = compose("undo", undoSrc)
	scriptKeepQueued     = compose("keep queued", clockSrc, keepQueuedSrc)
	scriptLineup         = compose("lineup", lineupSrc)
	scriptQueueState     = compose("queue state", clockSrc, queueStateSrc)

	scriptAcquireSlots = compose("acquire slots", holderSrc, releaseMarkSrc, clockSrc, queueSrc, slotsSrc, acquireSlotsSrc)
	scriptReleaseSlot  = compose("release slot", holderSrc, releaseMarkSrc, clockSrc, queueSrc, slotsSrc, slotReleaseSrc, releaseSlotSrc)
	scriptDequeueSlots = compose("dequeue slots", holderSrc, clockSrc, queueSrc, slotsSrc, slotReleaseSrc, dequeueSlotsSrc)
	scriptInspectSlots = compose("inspect slots", slotsSrc, inspectSlotsSrc)
	scriptUndoSlots    = compose("undo slots", slotsSrc, undoSlotsSrc)
	scriptSetPermits   = compose("set permits", slotsSrc, setPermitsSrc)
	scriptAnnounce     = compose("announce", clockSrc, announceSrc)

	scriptReleasedBefore = compose("released before", releaseMarkSrc, releasedBeforeSrc)
)

// composedSources holds the source of every composed script by name, for the test that checks each
// defines every helper it calls, and for ScriptSources.
var composedSources = map[string]string{}

// ScriptSources maps the name of every script the library runs to its source, as Redis receives
// it. A recording of what Redis ran (MONITOR shows EVALSHA with the SHA-1 of the source) names the
// scripts by it, and a test that loads them all first sees no NOSCRIPT retry in its recording.
func ScriptSources() map[string]string { return maps.Clone(composedSources) }

// compose joins a script's parts, shared helpers first, and records the result.
func compose(name string, parts ...string) *redis.Script {
	src := strings.Join(parts, "")
	composedSources[name] = src
	return redis.NewScript(src)
}

// withScript runs send, which runs s by EVALSHA, alone or in a pipeline, and, when the node answers
// NOSCRIPT (it restarted, failed over or flushed its script cache), loads s and runs send once
// more. It is the one place that recovers a lost script, for single calls and pipelines alike:
// EVALSHA in a pipeline cannot fall back to EVAL per command, so loading and sending again is
// what works for both. Through a cluster client, loading reaches every primary.
func withScript(ctx context.Context, n redis.Scripter, s *redis.Script, send func() error) error {
	err := send()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err
	}
	if err := s.Load(ctx, n).Err(); err != nil {
		return fmt.Errorf("load script %s after NOSCRIPT: %w", s.Hash(), err)
	}
	return send()
}

// runScript runs s on n with keys and args; see withScript.
func runScript(ctx context.Context, n redis.Scripter, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	if err := withScript(ctx, n, s, func() error {
		cmd = s.EvalSha(ctx, n, keys, args...)
		return cmd.Err()
	}); err != nil {
		cmd.SetErr(err) // a failed load says more than the NOSCRIPT that led to it
	}
	return cmd
}
