package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// stall is how long a command may wait before a test calls it hung. Blackhole tests need a deadline
// to expire, so it is short; it is long enough that a loaded machine still answers a plain PING.
const stall = 500 * time.Millisecond

// answer bounds commands that must succeed or fail promptly; generous for a loaded machine.
const answer = 10 * time.Second

func startProxy(t *testing.T) *Proxy {
	t.Helper()
	srv := redisserver.Start(t)
	p, err := Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// client returns a go-redis client through the proxy that neither retries nor hides a deadline, so
// each fault shows as exactly one error.
func client(t *testing.T, p *Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           answer,
		ReadTimeout:           answer,
		WriteTimeout:          answer,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ping(t *testing.T, c *redis.Client, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func TestProxyPass(t *testing.T) {
	p := startProxy(t)
	c := client(t, p)
	if err := ping(t, c, answer); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	// A pipeline of many commands comes back whole and in order.
	checkPipelineOrder(t, c, 5000)
}

func TestProxyBlackhole(t *testing.T) {
	p := startProxy(t)
	warm := client(t, p)
	if err := ping(t, warm, answer); err != nil {
		t.Fatalf("PING before the fault: %v", err)
	}

	p.Blackhole()
	if err := ping(t, warm, stall); !isTimeout(err) {
		t.Fatalf("PING on an open connection in Blackhole = %v, want a timeout", err)
	}
	if n := p.Dropped(); n < int64(len("*1\r\n$4\r\nPING\r\n")) {
		t.Fatalf("Dropped() = %d after a blackholed PING, want at least the PING", n)
	}
	fresh := client(t, p)
	if err := ping(t, fresh, stall); !isTimeout(err) {
		t.Fatalf("PING on a new connection in Blackhole = %v, want a timeout", err)
	}

	p.Pass()
	// The timed-out connections were discarded by go-redis; new ones work again.
	if err := ping(t, warm, answer); err != nil {
		t.Fatalf("PING after Pass: %v", err)
	}
}

func TestProxyReset(t *testing.T) {
	p := startProxy(t)

	// A raw connection shows the reset itself: the next read fails with ECONNRESET, not EOF.
	raw, err := net.DialTimeout("tcp", p.Addr(), answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	_ = raw.SetDeadline(time.Now().Add(answer))
	r := bufio.NewReader(raw)
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", line, err)
	}
	warm := client(t, p)
	if err := ping(t, warm, answer); err != nil {
		t.Fatalf("PING before the fault: %v", err)
	}

	p.Reset()
	if _, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset = %v, want ECONNRESET", err)
	}
	if err := ping(t, warm, answer); err == nil || isTimeout(err) {
		t.Fatalf("PING on an open connection after Reset = %v, want a prompt error", err)
	}
	fresh := client(t, p)
	if err := ping(t, fresh, answer); err == nil || isTimeout(err) {
		t.Fatalf("PING on a new connection after Reset = %v, want a prompt error", err)
	}

	p.Pass()
	if err := ping(t, fresh, answer); err != nil {
		t.Fatalf("PING after Pass: %v", err)
	}
}

func TestProxyDelay(t *testing.T) {
	p := startProxy(t)
	c := client(t, p)
	if err := ping(t, c, answer); err != nil {
		t.Fatal(err)
	}

	const oneWay = 150 * time.Millisecond
	p.Delay(oneWay)
	for range 3 {
		start := time.Now()
		if err := ping(t, c, answer); err != nil {
			t.Fatalf("PING with delay: %v", err)
		}
		if took := time.Since(start); took < 2*oneWay {
			t.Fatalf("PING took %v with Delay(%v), want at least %v", took, oneWay, 2*oneWay)
		}
	}

	// Order holds under delay: a pipeline's replies still match its commands.
	checkPipelineOrder(t, c, 1000)
}

// TestProxyPassClearsDelay: bytes waiting out a long delay are sent as soon as Pass is called.
func TestProxyPassClearsDelay(t *testing.T) {
	p := startProxy(t)
	c := client(t, p)
	if err := ping(t, c, answer); err != nil {
		t.Fatal(err)
	}
	p.Delay(time.Hour)
	done := make(chan error, 1)
	go func() { done <- ping(t, c, answer) }()
	deadline := time.Now().Add(answer)
	for p.waiting.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the PING never reached the delay")
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for time to pass
	}
	p.Pass()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PING after Pass: %v", err)
		}
	case <-time.After(answer):
		t.Fatal("PING still waits out the delay after Pass")
	}
}

// checkPipelineOrder sends n INCRs of a fresh counter in one pipeline and checks that the replies
// come back whole and in order.
func checkPipelineOrder(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), answer)
	defer cancel()
	cmds, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for range n {
			pl.Incr(ctx, "n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if got := cmd.(*redis.IntCmd).Val(); got != int64(i+1) {
			t.Fatalf("reply %d = %d, want %d", i, got, i+1)
		}
	}
}
