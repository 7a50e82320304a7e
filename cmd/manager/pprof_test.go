package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// TestPprofServer: off unless asked for, and when asked, serves a heap profile (the soak in
// test/scale reads one) and nothing of the operator's other endpoints.
func TestPprofServer(t *testing.T) {
	for _, off := range []string{"", "0"} {
		if srv, err := pprofServer(off); srv != nil || err != nil {
			t.Fatalf("pprofServer(%q) = %v, %v; want nothing", off, srv, err)
		}
	}

	run, err := pprofServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := run.(*manager.Server)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pprof server: %v", err)
		}
	})
	base := "http://" + srv.Listener.Addr().String()

	for path, want := range map[string]int{
		"/debug/pprof/heap?gc=1": http.StatusOK,
		"/debug/pprof/goroutine": http.StatusOK,
		"/metrics":               http.StatusNotFound,
		"/healthz":               http.StatusNotFound,
	} {
		code, body := get(t, base+path)
		if code != want {
			t.Errorf("GET %s = %d, want %d", path, code, want)
		}
		if want == http.StatusOK && len(body) == 0 {
			t.Errorf("GET %s: empty profile", path)
		}
	}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test against a loopback server it started
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(fmt.Errorf("read %s: %w", url, err))
	}
	return resp.StatusCode, body
}
