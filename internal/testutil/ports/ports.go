// Package ports finds free loopback TCP ports for the tests and the test tools that start
// servers: redis-server, a manager's probe and metrics listeners, a local control plane. It has
// no Kubernetes import, so the lock library's tests can use it too.
//
// A port found here is released before the caller binds it, so another process may take it in
// between: a caller that starts a server must be ready to pick another port and try again.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// Random blocks are drawn from [lowest, highest): below Linux's ephemeral range (32768 and up),
// so a port the kernel hands out to an outgoing connection never lands in a block.
const (
	lowest  = 20000
	highest = 32700
	// step is the spacing of random blocks, and how close to avoid a block may not start.
	step = 10
)

// Free returns a loopback port the kernel chose, free a moment ago.
func Free() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns host:port of a loopback port the kernel chose, free a moment ago.
func FreeAddr() (string, error) {
	port, err := Free()
	if err != nil {
		return "", err
	}
	return Addr(port), nil
}

// Addr is the loopback address of port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// FreeBlock returns the first port of count consecutive free loopback ports: preferred if that
// block is free (preferred <= 0 means none), else a random block in 20000..32700, never one
// starting within 10 ports of avoid (a port base somebody else's cluster uses).
func FreeBlock(preferred, count, avoid int) (int, error) {
	if preferred > 0 && blockFree(preferred, count) {
		return preferred, nil
	}
	for range 100 {
		base := lowest + step*rand.IntN((highest-lowest)/step)
		if base > avoid-step && base < avoid+step {
			continue
		}
		if blockFree(base, count) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no block of %d free loopback ports found", count)
}

// blockFree reports whether every port of base..base+count-1 can be bound on loopback now.
func blockFree(base, count int) bool {
	for p := base; p < base+count; p++ {
		l, err := net.Listen("tcp", Addr(p))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}
