package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run through EVALSHA and fall back to EVAL when a server (e.g. one that restarted)
// does not know them yet; see redis.Script.Run.
var (
	//go:embed obtain.lua
	obtainSrc string
	//go:embed refresh.lua
	refreshSrc string
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
	// Lua scripts cannot include one another, so shared helpers are put in front of the scripts that
	// use them: clock.lua (server clock, fence counter) and queue.lua (the waiter queue and handoff).
	// Each variant carries only the helpers its paths reach, since defining them costs every call.
	//go:embed clock.lua
	clockSrc string
	//go:embed queue.lua
	queueSrc string

	scriptObtain         = redis.NewScript(clockSrc + obtainSrc)
	scriptObtainQueued   = redis.NewScript(clockSrc + queueSrc + obtainSrc)
	scriptRefresh        = redis.NewScript(refreshSrc)
	scriptRelease        = redis.NewScript(releaseSrc)
	scriptReleaseHandoff = redis.NewScript(clockSrc + queueSrc + releaseSrc)
	scriptInspect        = redis.NewScript(inspectSrc)
	scriptFence          = redis.NewScript(fenceSrc)
	scriptPTTL           = redis.NewScript(pttlSrc)
	scriptDequeue        = redis.NewScript(clockSrc + queueSrc + dequeueSrc)
	scriptUndo           = redis.NewScript(undoSrc)
)
