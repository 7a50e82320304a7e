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
	// queue.lua defines the queue helpers the three scripts that touch the queue share; Lua scripts
	// cannot include one another, so it is put in front of each.
	//go:embed queue.lua
	queueSrc string

	scriptObtain  = redis.NewScript(queueSrc + obtainSrc)
	scriptRefresh = redis.NewScript(refreshSrc)
	// A plain release runs release.lua alone: it never reaches the handoff, and defining the queue
	// helpers on every call would cost it a third of its server time.
	scriptRelease        = redis.NewScript(releaseSrc)
	scriptReleaseHandoff = redis.NewScript(queueSrc + releaseSrc)
	scriptInspect        = redis.NewScript(inspectSrc)
	scriptFence          = redis.NewScript(fenceSrc)
	scriptPTTL           = redis.NewScript(pttlSrc)
	scriptDequeue        = redis.NewScript(queueSrc + dequeueSrc)
)
