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

	scriptObtain  = redis.NewScript(obtainSrc)
	scriptRefresh = redis.NewScript(refreshSrc)
	scriptRelease = redis.NewScript(releaseSrc)
	scriptInspect = redis.NewScript(inspectSrc)
	scriptFence   = redis.NewScript(fenceSrc)
	scriptPTTL    = redis.NewScript(pttlSrc)
	scriptDequeue = redis.NewScript(dequeueSrc)
)
