// Package fencedstore is a small Redis-backed store that honours fencing tokens: a write is
// accepted only with a token at least as high as the highest the store has seen. It is the other
// half of lockedjob's promise: the lock makes one holder's Job run at a time, and a store like this
// one makes sure a holder that lost its lock without knowing it (paused, partitioned) cannot
// overwrite the work of the holder after it.
//
// Every write, accepted or refused, is appended to a history stream, so a test or a person can
// see afterwards who wrote what under which token.
package fencedstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed write.lua
var writeSrc string

var writeScript = redis.NewScript(writeSrc)

// ErrStaleToken is returned by Write when the store has seen a higher token than the writer's:
// someone acquired the lock after this writer did.
var ErrStaleToken = errors.New("fencedstore: stale fencing token")

// historyLen is roughly how many history entries a store keeps.
const historyLen = 10000

// Store is one fenced value in Redis, under the keys <name>:highest, <name>:value and
// <name>:history. Keep the three in one Redis Cluster slot by putting braces in the name.
type Store struct {
	rdb  redis.Cmdable
	name string
}

// New returns the store called name on rdb.
func New(rdb redis.Cmdable, name string) *Store { return &Store{rdb: rdb, name: name} }

func (s *Store) keys() []string {
	return []string{s.name + ":highest", s.name + ":value", s.name + ":history"}
}

// Write stores value under token on behalf of writer. It returns ErrStaleToken, wrapped with the
// highest token seen, when the store refuses the write.
func (s *Store) Write(ctx context.Context, token int64, writer, value string) error {
	if token <= 0 {
		return fmt.Errorf("write %s: fencing token %d is not positive", s.name, token)
	}
	res, err := writeScript.Run(ctx, s.rdb, s.keys(), strconv.FormatInt(token, 10), writer, value, historyLen).Slice()
	if err != nil {
		return fmt.Errorf("write %s: %w", s.name, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("write %s: unexpected reply %v", s.name, res)
	}
	if accepted, _ := res[0].(int64); accepted == 1 {
		return nil
	}
	return fmt.Errorf("write %s with token %d (highest seen %v): %w", s.name, token, res[1], ErrStaleToken)
}

// Note appends text to the history on behalf of writer without touching the value: a workload
// records there what it saw (a signal, its exit) where its pod's log may be gone with the pod.
func (s *Store) Note(ctx context.Context, writer, text string) error {
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.keys()[2], MaxLen: historyLen, Approx: true,
		Values: []string{"result", ResultNote, "writer", writer, "value", text},
	}).Err()
	if err != nil {
		return fmt.Errorf("note %s: %w", s.name, err)
	}
	return nil
}

// Results an Entry can have.
const (
	ResultAccepted = "accepted"
	ResultRefused  = "refused"
	ResultNote     = "note"
)

// Entry is one write (or note) in the history.
type Entry struct {
	ID      string // the stream entry id: time order
	Result  string // ResultAccepted, ResultRefused or ResultNote
	Token   int64  // writes
	Writer  string
	Value   string // accepted writes and notes
	Highest int64  // refused writes: the token that outranked this one
}

// History returns every entry the store remembers, oldest first.
func (s *Store) History(ctx context.Context) ([]Entry, error) {
	msgs, err := s.rdb.XRange(ctx, s.keys()[2], "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", s.name, err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e := Entry{ID: m.ID, Result: field(m, "result"), Writer: field(m, "writer"), Value: field(m, "value")}
		e.Token, _ = strconv.ParseInt(field(m, "token"), 10, 64)
		e.Highest, _ = strconv.ParseInt(field(m, "highest"), 10, 64)
		out = append(out, e)
	}
	return out, nil
}

func field(m redis.XMessage, k string) string {
	s, _ := m.Values[k].(string)
	return s
}
