package ports

import (
	"net"
	"strconv"
	"testing"
)

// listen binds addr, failing the test if it cannot, and closes it when the test ends.
func listen(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = l.Close() })
}

func TestFreeAddrCanBeBound(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr() = %q, want a 127.0.0.1 address (%v)", addr, err)
	}
	listen(t, addr)
}

func TestFreeBlockTakesThePreferredBlockWhenFree(t *testing.T) {
	preferred, err := FreeBlock(0, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FreeBlock(preferred, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != preferred {
		t.Fatalf("FreeBlock(%d, 3, 0) = %d, want the free preferred block", preferred, got)
	}
	for p := got; p < got+3; p++ {
		listen(t, Addr(p))
	}
}

func TestFreeBlockMovesAwayFromABusyPort(t *testing.T) {
	preferred, err := FreeBlock(0, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The block's last port is taken: the whole block is refused, and so is anything near avoid.
	listen(t, Addr(preferred+2))
	for range 20 {
		got, err := FreeBlock(preferred, 3, preferred)
		if err != nil {
			t.Fatal(err)
		}
		if got > preferred-step && got < preferred+step {
			t.Fatalf("FreeBlock(%d, 3, avoid %d) = %d: within %d ports of avoid", preferred, preferred, got, step)
		}
		if got < lowest || got+3 > highest {
			t.Fatalf("FreeBlock = %d, outside %d..%d", got, lowest, highest)
		}
	}
}

func TestFreeIsAPortNumber(t *testing.T) {
	p, err := Free()
	if err != nil {
		t.Fatal(err)
	}
	if p <= 0 || p > 65535 {
		t.Fatalf("Free() = %d", p)
	}
	listen(t, "127.0.0.1:"+strconv.Itoa(p))
}
