//go:build scale

package main

import (
	"strings"
	"testing"
	"time"
)

// TestDurableKeys: only a lock's fence counters, a semaphore's stored N and release marks may
// outlive its holders and waiters; its holder, metadata, queue and tickets may not.
func TestDurableKeys(t *testing.T) {
	for key, want := range map[string]bool{
		"lockedjob:{ns/scale/scale-soak/lock-00001}:fence":    true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:s1:fence": true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:permits":  true,
		// A release mark, of slot 0 and of slot 1: it expires by itself.
		"lockedjob:{ns/scale/scale-soak/lock-00001}:released:0123456789abcdef0123456789abcdef01234567":    true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:s1:released:0123456789abcdef0123456789abcdef01234567": true,
		"lockedjob:{ns/scale/scale-soak/lock-00001}":                                                      false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:meta":                                                 false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:queue":                                                false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:tickets":                                              false,
		"lockedjob:{ns/scale/scale-soak/lock-00001}:s1":                                                   false,
		// A lock named like a suffix is still judged by what follows its braces.
		"lockedjob:{ns/scale/scale-soak/x:fence}:queue": false,
	} {
		if got := durable(key); got != want {
			t.Errorf("durable(%q) = %t, want %t", key, got, want)
		}
	}
}

// TestSoakReportJudgesGrowth: a series that keeps rising after the warm-up is not flat; one that
// rose only during the warm-up is, and so is one that rises and falls within each window (a cache
// swept every window), wherever in its cycle the first and last windows start.
func TestSoakReportJudgesGrowth(t *testing.T) {
	const lives = 1000
	j := soakJudge{lives: lives, window: 6 * time.Second}
	var samples []soakSample
	for i := range 50 {
		ended := i * lives / 50
		s := soakSample{at: time.Duration(i) * time.Second, ended: ended, goroutines: 300, fds: 40, sockets: 20,
			redisClients: 12, lockKeys: 100}
		s.rss = 100 << 20 // flat after the warm-up ...
		if !j.warm(s) {
			s.rss = int64(10+i) << 20 // ... rising during it
		}
		s.heapInuse = int64(20+5*(i%6)) << 20 // a sawtooth of one window: 20 to 45 MiB
		s.goroutines += ended / 10            // a leak: one goroutine per ten lives
		s.lockKeys = 60 + i%40                // locks in use rise and fall, within 5 keys × 20 locks
		samples = append(samples, s)
	}
	want := map[string]string{
		"| operator RSS":            "| yes",
		"| operator Go heap in use": "| yes",
		"| operator goroutines":     "| NO",
		"| lock keys":               "| yes (at most 100)",
	}
	report := soakReport(samples, j, 20)
	for line := range strings.SplitSeq(report, "\n") {
		for row, verdict := range want {
			if strings.HasPrefix(line, row) {
				if !strings.Contains(line, verdict) {
					t.Errorf("want %q in %s", verdict, line)
				}
				delete(want, row)
			}
		}
	}
	if len(want) > 0 {
		t.Fatalf("rows %v missing from\n%s", want, report)
	}
}

// TestSoakReportTooShort: a soak whose samples after the warm-up do not span two windows is not
// judged at all, rather than judged on part of a cycle.
func TestSoakReportTooShort(t *testing.T) {
	j := soakJudge{lives: 100, window: time.Minute}
	var samples []soakSample
	for i := range 30 {
		samples = append(samples, soakSample{at: time.Duration(i) * 5 * time.Second, ended: 4 * i})
	}
	report := soakReport(samples, j, 10)
	if !strings.Contains(report, "too short to judge") || strings.Contains(report, "| operator") {
		t.Fatalf("a soak of 2.5 min with windows of 1 min judged:\n%s", report)
	}
}
