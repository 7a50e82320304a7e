package fencedstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/lockedjob/lockedjob/internal/fencedstore"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

func TestWriteRefusesALowerToken(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Start(t).Client(t)
	s := fencedstore.New(rdb, "{t}")

	if err := s.Write(ctx, 10, "a", "one"); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if err := s.Write(ctx, 10, "a", "two"); err != nil {
		t.Fatalf("same token again must be accepted: %v", err)
	}
	if err := s.Write(ctx, 11, "b", "three"); err != nil {
		t.Fatalf("higher token: %v", err)
	}
	err := s.Write(ctx, 10, "a", "late")
	if !errors.Is(err, fencedstore.ErrStaleToken) {
		t.Fatalf("lower token after a higher one: got %v, want ErrStaleToken", err)
	}
	if v := rdb.Get(ctx, "{t}:value").Val(); v != "three" {
		t.Fatalf("value = %q, want the newer holder's %q", v, "three")
	}

	h, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []fencedstore.Entry{
		{Result: "accepted", Token: 10, Writer: "a", Value: "one"},
		{Result: "accepted", Token: 10, Writer: "a", Value: "two"},
		{Result: "accepted", Token: 11, Writer: "b", Value: "three"},
		{Result: "refused", Token: 10, Writer: "a", Highest: 11},
	}
	if len(h) != len(want) {
		t.Fatalf("history has %d entries, want %d: %+v", len(h), len(want), h)
	}
	for i := range want {
		h[i].ID = ""
		if h[i] != want[i] {
			t.Errorf("history[%d] = %+v, want %+v", i, h[i], want[i])
		}
	}
}

// Tokens beyond 2^53 lose precision as Lua numbers; the script compares them as decimal strings.
func TestWriteComparesTokensPastFloatPrecision(t *testing.T) {
	ctx := context.Background()
	s := fencedstore.New(redisserver.Start(t).Client(t), "big")
	const high = int64(1) << 62
	if err := s.Write(ctx, high+1, "new", "x"); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, high, "old", "y"); !errors.Is(err, fencedstore.ErrStaleToken) {
		t.Fatalf("token one below the highest (past 2^53) was not refused: %v", err)
	}
	if err := s.Write(ctx, 9, "short", "z"); !errors.Is(err, fencedstore.ErrStaleToken) {
		t.Fatalf("a shorter decimal must compare lower: %v", err)
	}
}

func TestWriteRefusesNonPositiveTokens(t *testing.T) {
	s := fencedstore.New(redisserver.Start(t).Client(t), "z")
	for _, tok := range []int64{0, -5} {
		if err := s.Write(context.Background(), tok, "w", "v"); err == nil {
			t.Errorf("token %d accepted", tok)
		}
	}
}

// Writers racing with different tokens: once a token is accepted, no lower one ever is.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Start(t).Client(t)
	s := fencedstore.New(rdb, "race")
	var wg sync.WaitGroup
	for w := 1; w <= 8; w++ {
		wg.Go(func() {
			for i := range 50 {
				_ = s.Write(ctx, int64(w*100+i%7), fmt.Sprint(w), "v")
			}
		})
	}
	wg.Wait()
	h, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var highest int64
	for _, e := range h {
		switch e.Result {
		case fencedstore.ResultAccepted:
			if e.Token < highest {
				t.Fatalf("accepted token %d after %d", e.Token, highest)
			}
			highest = e.Token
		case fencedstore.ResultRefused:
			if e.Token >= e.Highest || e.Highest > highest {
				t.Fatalf("refused %+v while the highest accepted was %d", e, highest)
			}
		}
	}
	if len(h) != 400 {
		t.Fatalf("history has %d entries, want 400", len(h))
	}
}

func TestNoteLeavesTheValueAlone(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Start(t).Client(t)
	s := fencedstore.New(rdb, "n")
	if err := s.Write(ctx, 3, "a", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := s.Note(ctx, "a", "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, "n:value").Val(); v != "kept" {
		t.Fatalf("value = %q after a note", v)
	}
	h, _ := s.History(ctx)
	if len(h) != 2 || h[1].Result != fencedstore.ResultNote || h[1].Value != "SIGTERM" {
		t.Fatalf("history = %+v", h)
	}
}
