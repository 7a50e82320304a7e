package lockbook

import (
	"net/http/httptest"
	"testing"

	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

func TestRedisReadyCheckFollowsRedis(t *testing.T) {
	srv := redisserver.Start(t)
	c, err := redislock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	check := RedisReadyCheck(c)
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check(req); err != nil {
		t.Fatalf("ready with Redis up: %v", err)
	}
	srv.Stop(t)
	if err := check(req); err == nil {
		t.Fatal("ready although Redis is down")
	}
	srv.Restart(t)
	if err := check(req); err != nil {
		t.Fatalf("not ready after Redis came back: %v", err)
	}
}
