package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run through EVALSHA and fall back to EVAL when a server (e.g. one that restarted)
// does not know them yet; see redis.Script.Run.
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
