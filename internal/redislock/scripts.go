package redislock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The scripts run through EVALSHA, and are loaded when a server (e.g. one that restarted) does not
// know them yet; see runScript and withScript.
var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
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
	// Lua scripts cannot include one another, so shared helpers are put in front of the scripts that
	// use them: holder.lua (who holds a lock), clock.lua (server clock, fence counter) and queue.lua
	// (the waiter queue and handoff). Each variant carries only the helpers its paths reach, since
	// defining them costs every call.
	//go:embed holder.lua
	holderSrc string
	//go:embed clock.lua
	clockSrc string
	//go:embed queue.lua
	queueSrc string

	scriptAcquire        = redis.NewScript(holderSrc + clockSrc + acquireSrc)
	scriptAcquireQueued  = redis.NewScript(holderSrc + clockSrc + queueSrc + acquireSrc)
	renewFullSrc         = holderSrc + renewSrc // the keeper loads it itself (renewPipeline)
	scriptRenew          = redis.NewScript(renewFullSrc)
	scriptRelease        = redis.NewScript(holderSrc + releaseSrc)
	scriptReleaseHandoff = redis.NewScript(holderSrc + clockSrc + queueSrc + releaseSrc)
	scriptInspect        = redis.NewScript(inspectSrc)
	scriptFence          = redis.NewScript(holderSrc + fenceSrc)
	scriptPTTL           = redis.NewScript(holderSrc + pttlSrc)
	scriptDequeue        = redis.NewScript(holderSrc + clockSrc + queueSrc + dequeueSrc)
	scriptUndo           = redis.NewScript(undoSrc)
	scriptKeepQueued     = redis.NewScript(clockSrc + keepQueuedSrc)
	scriptLineup         = redis.NewScript(lineupSrc)
)

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
