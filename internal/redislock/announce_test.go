package redislock_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/lockedjob/lockedjob/internal/redislock"
)

// TestAnnounce: a client's announcement is what another reads back while it lasts; an older
// protocol, and a value that does not parse, are reported; one whose lease ended is dropped.
func TestAnnounce(t *testing.T) {
	c, _, rc := single(t, WithKeyPrefix("announce:"))
	ctx := context.Background()
	if behind, err := c.Announce(ctx, "a", time.Minute); err != nil || len(behind) != 0 {
		t.Fatalf("first announcement: %v, %v", behind, err)
	}
	if behind, err := c.Announce(ctx, "b", 100*time.Millisecond); err != nil || len(behind) != 0 {
		t.Fatalf("announcement of a second client of the same protocol: %v, %v", behind, err)
	}
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	rc.HSet(ctx, "announce:clients", "old", "1 "+far, "garbage", "x", "gone", "1 1")
	behind, err := c.Announce(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(behind, func(x, y Announced) int { return x.Protocol - y.Protocol })
	if want := []Announced{{Member: "garbage", Protocol: 0}, {Member: "old", Protocol: 1}}; !slices.Equal(behind, want) {
		t.Fatalf("behind = %v, want %v", behind, want)
	}
	if rc.HExists(ctx, "announce:clients", "gone").Val() {
		t.Fatal("an announcement whose lease ended was kept")
	}
	eventually(t, 3*time.Second, "b's announcement to lapse", func() bool {
		_, err := c.Announce(ctx, "a", time.Minute)
		return err == nil && !rc.HExists(ctx, "announce:clients", "b").Val()
	})
	if _, err := c.Announce(ctx, "", time.Minute); err == nil {
		t.Fatal("an empty member was accepted")
	}
	rc.HDel(ctx, "announce:clients", "old", "garbage")
	if err := c.Withdraw(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if n := rc.Exists(ctx, "announce:clients").Val(); n != 0 {
		t.Fatalf("the announcements are left after the last client withdrew (exists %d)", n)
	}
}
