package redisserver

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestScriptsRunReadsWhatAScriptDid: a recording names each script by its source's SHA-1, splits
// its keys from its arguments, and keeps the commands it called (and only its own).
func TestScriptsRunReadsWhatAScriptDid(t *testing.T) {
	rdb := Start(t).Client(t)
	ctx := context.Background()
	set := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[2])`)
	get := redis.NewScript(`return redis.call('GET', KEYS[1])`)
	for _, s := range []*redis.Script{set, get} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seen := Monitor(t, rdb)
	if err := set.Run(ctx, rdb, []string{"k", "other"}, `a "quoted" value`).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "plain", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := get.Run(ctx, rdb, []string{"k"}).Err(); err != nil {
		t.Fatal(err)
	}
	runs, err := ScriptsRun(seen(), ScriptNames(map[string]string{"set": `redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[2])`,
		"get": `return redis.call('GET', KEYS[1])`}))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Name != "set" || runs[1].Name != "get" {
		t.Fatalf("runs %+v, want set then get", runs)
	}
	if !slices.Equal(runs[0].Keys, []string{"k", "other"}) || !slices.Equal(runs[0].Argv, []string{`a \"quoted\" value`}) {
		t.Errorf("set's keys %q and arguments %q", runs[0].Keys, runs[0].Argv)
	}
	if !runs[0].Called("SET", "k") || !runs[0].Called("get", "other") || len(runs[0].Calls) != 2 {
		t.Errorf("set's calls %q, want its SET and GET alone (not the plain SET after it)", runs[0].Calls)
	}
	if runs[1].Called("SET", "k") || len(runs[1].Calls) != 1 {
		t.Errorf("get's calls %q, want its GET alone", runs[1].Calls)
	}
}
