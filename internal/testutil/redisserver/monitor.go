package redisserver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// monitorMarkers numbers the markers of every Monitor of the test process.
var monitorMarkers atomic.Int64

// Monitor records every command the Redis of rdb runs from now on, in the order it runs them
// (MONITOR, on a connection of its own), as MONITOR prints them. seen returns the commands run until
// it is called: it sends a marker through rdb and waits until the monitor saw it, so nothing run
// before the call is missing; the marker itself is left out.
func Monitor(tb TB, rdb *redis.Client) (seen func() []string) {
	tb.Helper()
	conn, err := net.Dial("tcp", rdb.Options().Addr)
	if err != nil {
		tb.Fatalf("monitor: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		tb.Fatalf("MONITOR: %v", err)
	}
	r := bufio.NewReader(conn)
	if ok, err := r.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		tb.Fatalf("MONITOR: %q, %v", ok, err)
	}
	var mu sync.Mutex
	var lines []string
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			lines = append(lines, strings.TrimRight(line, "\r\n"))
			mu.Unlock()
		}
	}()
	return func() []string {
		tb.Helper()
		marker := fmt.Sprintf("redisserver-monitor-marker-%d", monitorMarkers.Add(1))
		if err := rdb.Echo(context.Background(), marker).Err(); err != nil {
			tb.Fatalf("monitor marker: %v", err)
		}
		deadline := time.Now().Add(readyTimeout)
		for {
			mu.Lock()
			out := slices.Clone(lines)
			mu.Unlock()
			if i := slices.IndexFunc(out, func(l string) bool { return strings.Contains(l, marker) }); i >= 0 {
				return slices.DeleteFunc(out[:i], func(l string) bool { return strings.Contains(l, "redisserver-monitor-marker-") })
			}
			if time.Now().After(deadline) {
				tb.Fatalf("the monitor did not see its marker within %v (%d commands seen)", readyTimeout, len(out))
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
	}
}
