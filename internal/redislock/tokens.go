package redislock

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
)

// tokenBytes is the entropy of a generated token: 128 bits cannot be guessed or collide.
const tokenBytes = 16

// attemptBytes is the entropy of an attempt id: 96 bits, so nobody can guess the id of a waiter's
// attempt to forge its handoff, and two attempts never share a grant mark.
const attemptBytes = 12

func newToken() (string, error) { return randomID("token", tokenBytes) }

// newAttemptID runs once per attempt, so it builds the id in fixed buffers: one allocation.
func newAttemptID() (string, error) {
	var b [attemptBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redislock: generate attempt id: %w", err)
	}
	var text [(attemptBytes*8 + 5) / 6]byte
	base64.RawURLEncoding.Encode(text[:], b[:])
	return string(text[:]), nil
}

func randomID(what string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("redislock: generate %s: %w", what, err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// memberToken is the token of a queued waiter that brings none: stable for one member of one Client,
// so a lock that a release handed to member is claimed by member's next Acquire, and unguessable
// for anyone without the Client's secret.
func (c *Client) memberToken(member string) string {
	m, _ := c.memberMACs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, c.memberSecret[:])
	}
	m.Reset()
	m.Write([]byte(member))
	var sum [sha256.Size]byte
	token := base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:tokenBytes])
	c.memberMACs.Put(m)
	return token
}
