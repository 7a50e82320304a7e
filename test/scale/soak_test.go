//go:build scale

package main

import (
	"strings"
	"testing"
	"time"
)

// TestDurableKeys: only a lock's fence counters and a semaphore's stored N may outlive its
// holders and waiters; its holder, metadata, queue and tickets may not.
func TestDurableKeys(t *testing.T) {
	for key, want := range map[string]bool{
		"lockedjob:{ns/scale/scale-soak/lock-00001}:fence":    true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:s1:fence": true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:permits":  true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}":          false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:meta":     false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:queue":    false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:tickets":  false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:s1":       false,
		// A lock named like a suffix is still judged by what follows its braces.
		"lockedjob:{ns/scale/scale-soak/x:fence}:queue": false,
	} {
		if got := durable(key); got != want {
			t.Errorf("durable(%q) = %t, want %t", key, got, want)
		}
	}
}

// TestSoakReportJudgesGrowth: a series that keeps rising after the warm-up is not flat; one that
// rose only during the warm-up is.
func TestSoakReportJudgesGrowth(t *testing.T) {
	const lives = 1000
	var samples []soakSample
	for i := range 50 {
		ended := i * lives / 50
		s := soakSample{at: time.Duration(i) * time.Second, ended: ended, goroutines: 300, fds: 40, sockets: 20,
			redisClients: 12, lockKeys: 100}
		s.rss = 100 << 20 // flat after the warm-up ...
		if ended < lives/5 {
			s.rss = int64(10+i) << 20 // ... rising during it
		}
		s.goroutines += ended / 10 // a leak: one goroutine per ten lives
		s.lockKeys = 60 + i%40     // locks in use rise and fall, within 5 keys × 20 locks
		samples = append(samples, s)
	}
	report := soakReport(samples, lives, 20)
	for line := range strings.SplitSeq(report, "\n") {
		switch {
		case strings.HasPrefix(line, "| operator RSS"):
			if !strings.Contains(line, "| yes") {
				t.Errorf("RSS flat after the warm-up judged not flat: %s", line)
			}
		case strings.HasPrefix(line, "| operator goroutines"):
			if !strings.Contains(line, "| NO") {
				t.Errorf("rising goroutines judged flat: %s", line)
			}
		case strings.HasPrefix(line, "| lock keys"):
			if !strings.Contains(line, "| yes (at most 100)") {
				t.Errorf("lock keys within their bound judged otherwise: %s", line)
			}
		}
	}
	if !strings.Contains(report, "| operator goroutines") {
		t.Fatalf("no goroutine row in\n%s", report)
	}
}
