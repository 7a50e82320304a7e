package redislock_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// flushScripts empties the node's script cache, as a restart or a failover does.
func flushScripts(t *testing.T, rc redis.Cmdable) {
	t.Helper()
	if err := rc.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// TestScriptsReloadAfterFlush: every verb works on a node that forgot the scripts, in a single call
// and in a pipeline (the WAIT of WithWaitReplicas, the keeper's renewals on a client that is not a
// plain one and so cannot load the script in the pipeline itself).
func TestScriptsReloadAfterFlush(t *testing.T) {
	c, srv, rc := single(t, WithReleaseNotifications(releaseChannel))
	ctx := context.Background()
	key := uniqueKey(t)
	steps := []struct {
		name string
		do   func() error
	}{
		{"acquire", func() error { l, err := c.Acquire(ctx, key, time.Minute); _ = l.Release(ctx); return err }},
		{"acquire queued", func() error {
			_, err := c.Acquire(ctx, key, time.Minute, WithQueue("a", 1, time.Minute))
			return err
		}},
		{"keep queued", func() error { _, err := c.KeepQueued(ctx, key, time.Minute, "b"); return err }},
		{"lineup", func() error { _, err := c.Lineup(ctx, key, 1); return err }},
		{"queue state", func() error { _, err := c.QueueState(ctx, key); return err }},
		{"inspect", func() error { _, err := c.Inspect(ctx, key); return err }},
		{"dequeue", func() error { return c.Dequeue(ctx, key, "b") }},
		{"acquire slots, release slot", func() error {
			l, err := c.Acquire(ctx, key+"/sem", time.Minute, WithPermits(2))
			if err != nil {
				return err
			}
			flushScripts(t, rc)
			return l.Release(ctx)
		}},
		{"inspect slots", func() error { _, err := c.InspectSlots(ctx, key+"/sem", 2); return err }},
		{"dequeue slots", func() error { return c.DequeueSlots(ctx, key+"/sem", "b") }},
	}
	for _, s := range steps {
		flushScripts(t, rc)
		if err := s.do(); err != nil {
			t.Fatalf("%s after SCRIPT FLUSH: %v", s.name, err)
		}
	}
	l := mustAcquire(t, c, uniqueKey(t), time.Minute)
	flushScripts(t, rc)
	if err := l.Renew(ctx, 0); err != nil {
		t.Fatalf("renew after SCRIPT FLUSH: %v", err)
	}
	flushScripts(t, rc)
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("ttl after SCRIPT FLUSH: %v", err)
	}
	flushScripts(t, rc)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}

	// WAIT shares a pipeline with the acquire script: without the script the pipeline fails on
	// NOSCRIPT; with it, WAIT runs and finds no replica.
	waiting, err := New(rc, WithWaitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	flushScripts(t, rc)
	if _, err := waiting.Acquire(ctx, uniqueKey(t), time.Minute); err == nil || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Fatalf("acquire WithWaitReplicas after SCRIPT FLUSH: %v, want WAIT to run and find no replica", err)
	}

	// A Ring is not a plain client: its keeper pipeline meets NOSCRIPT and must load and resend.
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"only": srv.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	rcl, err := New(ring)
	if err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, rcl, uniqueKey(t), 2*time.Second)
	renewed := make(chan error, 4)
	k := rcl.NewKeeper(KeeperOptions{
		OnRenew: func(_ *Lock, err error) { renewed <- err },
		OnLost:  func(_ *Lock, err error) { renewed <- errors.Join(ErrLockLost, err) },
	})
	defer k.Stop()
	flushScripts(t, rc)
	if err := k.Add(held, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-renewed:
		if err != nil {
			t.Fatalf("keeper renewal through a ring after SCRIPT FLUSH: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the keeper did not renew")
	}
}

// luaBuiltins are the global functions a script may call without defining them: Lua 5.1's base
// library as Redis offers it. Calls through a table (redis.call, string.sub, cmsgpack.pack) are
// not bare names and need no entry.
var luaBuiltins = map[string]bool{
	"assert": true, "error": true, "getmetatable": true, "ipairs": true, "next": true, "pairs": true,
	"pcall": true, "rawequal": true, "rawget": true, "rawset": true, "select": true,
	"setmetatable": true, "tonumber": true, "tostring": true, "type": true, "unpack": true,
	"xpcall": true, "loadstring": true,
}

// luaKeywords can stand before a parenthesis without being called.
var luaKeywords = map[string]bool{
	"and": true, "elseif": true, "function": true, "if": true, "in": true, "local": true,
	"not": true, "or": true, "return": true, "until": true, "while": true,
}

var (
	// luaNoise is what holds no code: comments and string literals.
	luaNoise = regexp.MustCompile(`(?s)--\[\[.*?\]\]|--[^\n]*|\[\[.*?\]\]|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"`)
	// luaDefinition finds `local function NAME` and `local NAME = function`.
	luaDefinition = regexp.MustCompile(`\blocal\s+function\s+([A-Za-z_]\w*)|\blocal\s+([A-Za-z_]\w*)\s*=\s*function\b`)
	// luaCall finds a bare NAME( with what comes just before it, to skip table calls and
	// definitions.
	luaCall = regexp.MustCompile(`([.:]\s*|\bfunction\s+)?\b([A-Za-z_]\w*)\s*\(`)
)

// undefinedCalls returns the bare names src calls that it does not define before the call and that
// are not builtins: Lua resolves such a name to a global, which Redis refuses at run time, and
// only on the path that reaches it.
func undefinedCalls(src string) []string {
	code := luaNoise.ReplaceAllStringFunc(src, func(s string) string { return strings.Repeat(" ", len(s)) })
	defined := map[string]int{} // name -> offset of its first definition
	for _, m := range luaDefinition.FindAllStringSubmatchIndex(code, -1) {
		name := code[m[2]:m[3]]
		if m[2] < 0 {
			name = code[m[4]:m[5]]
		}
		if _, ok := defined[name]; !ok {
			defined[name] = m[0]
		}
	}
	var missing []string
	for _, m := range luaCall.FindAllStringSubmatchIndex(code, -1) {
		if m[2] >= 0 {
			continue // a table's function, or a definition
		}
		name := code[m[4]:m[5]]
		if luaKeywords[name] || luaBuiltins[name] {
			continue
		}
		if at, ok := defined[name]; !ok || at > m[4] {
			missing = append(missing, name)
		}
	}
	return missing
}

// TestComposedScriptsDefineTheirHelpers: Lua scripts cannot include one another, so scripts.go puts
// shared helpers (holder.lua, clock.lua, queue.lua) in front of the scripts that call them. Each
// composed script must define every helper it calls, before the call.
func TestComposedScriptsDefineTheirHelpers(t *testing.T) {
	scripts := ComposedScripts()
	if len(scripts) < 10 {
		t.Fatalf("found %d composed scripts, want every script the package runs", len(scripts))
	}
	for name, src := range scripts {
		if missing := undefinedCalls(src); len(missing) > 0 {
			t.Errorf("script %q calls %v without defining them first", name, missing)
		}
	}
}

// TestUndefinedCallsSeesAMissingHelper: the check above can fail, on a composition that lacks a
// helper, on one that defines it too late, and not on calls through tables or in comments.
func TestUndefinedCallsSeesAMissingHelper(t *testing.T) {
	helper := "local function holds(v, t)\n  return v == t\nend\n"
	script := "-- holds(x) in a comment\nif not holds(redis.call('GET', KEYS[1]), ARGV[1]) then\n  return string.sub('holds(', 1)\nend\n"
	cases := []struct {
		src  string
		want []string
	}{
		{helper + script, nil},
		{script, []string{"holds"}},
		{script + helper, []string{"holds"}},
	}
	for _, c := range cases {
		if got := undefinedCalls(c.src); !slices.Equal(got, c.want) {
			t.Errorf("undefinedCalls(%q) = %v, want %v", c.src, got, c.want)
		}
	}
}
