// Package faultproxy is a TCP proxy for tests that puts network faults between a client and a real
// server: a partition that drops everything (Blackhole), a peer that resets connections (Reset) and
// added latency (Delay).
//
// Timeouts, retries and leases only show their flaws when the network misbehaves, and a paused
// server (SIGSTOP) is not the same fault: its kernel still accepts connections and acknowledges
// bytes. The proxy listens on 127.0.0.1 only.
//
// A mode change applies at once to the connections already open and to those accepted later, so a
// client's warm pool is hit just like a fresh dial.
//
// Blackhole loses what it drops. For a partition whose segments arrive once it heals, as TCP
// retransmission delivers them (and a stale command runs late), use Delay with a duration longer
// than the partition, then Pass: held bytes are delivered at once, in order.
package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds the dial to the target; the target is a local test server, so a slow dial
// means it is gone and the client connection is closed rather than left hanging.
const dialTimeout = 5 * time.Second

// chunkSize is the largest read forwarded as one piece; a Redis pipeline of a few thousand commands
// still goes through in a handful of chunks.
const chunkSize = 32 << 10

// queueDepth bounds how many chunks a direction may hold while they wait out a delay; a full queue
// stops reading, which pushes back on the sender as a slow link would.
const queueDepth = 4096

type mode int

const (
	modePass mode = iota
	modeBlackhole
	modeReset
)

// Proxy forwards connections from Addr to a target. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    mode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every mode change, to wake delayed writers
	pairs   map[*pair]struct{}
	closed  bool

	// waiting counts chunks held back by a delay right now; tests poll it to know a delay bites.
	waiting atomic.Int64
	dropped atomic.Int64

	wg sync.WaitGroup
}

// Start listens on 127.0.0.1:0 and forwards every accepted connection to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{
		ln:      ln,
		target:  target,
		changed: make(chan struct{}),
		pairs:   make(map[*pair]struct{}),
	}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the host:port to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass forwards normally, the default. It clears a delay, and bytes still waiting out a delay are
// sent at once.
func (p *Proxy) Pass() { p.set(modePass, 0) }

// Blackhole keeps connections open and silently drops the bytes in both directions, as a network
// partition does to a client that is not told: it sees only its own timeouts. New connections are
// accepted and blackholed too. Dropped bytes are lost for good (unlike TCP retransmission after a
// healed partition), so a client that timed out must discard its connection, as go-redis does.
// The proxy still dials the target for a new connection and closes it if that fails, and a target
// that closes its side closes the client's too.
func (p *Proxy) Blackhole() { p.set(modeBlackhole, 0) }

// Reset resets every open connection (RST, not FIN), and resets new ones at once until Pass or
// Delay.
func (p *Proxy) Reset() {
	p.set(modeReset, 0)
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.close(true)
	}
}

// Delay forwards with oneWay added in each direction, so a round trip grows by 2*oneWay. Order is
// kept: each direction delivers its bytes in the order they were read.
func (p *Proxy) Delay(oneWay time.Duration) { p.set(modePass, max(oneWay, 0)) }

// Dropped returns how many bytes Blackhole has dropped so far, both ways. A test polls it to know
// that a request is lost in the partition before it heals the partition or asserts on the outcome.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, pr := range pairs {
		pr.close(false)
	}
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: close: %w", err)
	}
	return nil
}

func (p *Proxy) set(m mode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, delay
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the current mode, delay and the channel closed at the next change.
func (p *Proxy) state() (mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a failed accept of one connection (e.g. EMFILE) must not stop the proxy
		}
		p.wg.Go(func() { p.serve(c.(*net.TCPConn)) })
	}
}

func (p *Proxy) serve(client *net.TCPConn) {
	if m, _, _ := p.state(); m == modeReset {
		resetConn(client)
		return
	}
	// The target is dialled even in Blackhole: the partition is between client and proxy, and a
	// connection accepted during it must work once it heals.
	d, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	pr := &pair{client: client, server: d.(*net.TCPConn), closed: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.close(false)
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	// Reset may have been called between the mode check above and the registration.
	if m, _, _ := p.state(); m == modeReset {
		pr.close(true)
	}

	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(pr, pr.client, pr.server) })
	wg.Go(func() { p.pipe(pr, pr.server, pr.client) })
	wg.Wait()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

type chunk struct {
	data   []byte
	readAt time.Time
}

// pipe copies src to dst through a queue, so delayed bytes keep flowing in order while later bytes
// are read. When src ends, what is queued is delivered and the whole pair closes: the clients this
// proxy serves do not half-close.
func (p *Proxy) pipe(pr *pair, src, dst *net.TCPConn) {
	queue := make(chan chunk, queueDepth)
	var wg sync.WaitGroup
	wg.Go(func() { p.deliver(pr, queue, dst) })
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			if m, _, _ := p.state(); m == modeBlackhole {
				p.dropped.Add(int64(n))
			} else {
				queue <- chunk{data: buf[:n], readAt: time.Now()}
			}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	wg.Wait()
	pr.close(false)
}

// deliver writes queued chunks to dst once each has waited out the delay in force when it is
// written, so Pass releases waiting bytes at once and Blackhole drops them.
func (p *Proxy) deliver(pr *pair, queue <-chan chunk, dst *net.TCPConn) {
	for c := range queue {
		if !p.waitOut(pr, c) {
			if m, _, _ := p.state(); m == modeBlackhole {
				p.dropped.Add(int64(len(c.data)))
			}
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			pr.close(false)
			// Keep draining so the reader never blocks on a full queue.
		}
	}
}

// waitOut blocks until c may be written and reports whether it should be (false: dropped).
func (p *Proxy) waitOut(pr *pair, c chunk) bool {
	for {
		m, delay, changed := p.state()
		if m == modeBlackhole {
			return false
		}
		wait := time.Until(c.readAt.Add(delay))
		if wait <= 0 {
			return true
		}
		if !p.sleep(pr, wait, changed) {
			return false
		}
	}
}

// sleep waits for d, a mode change or the pair closing (then it reports false).
func (p *Proxy) sleep(pr *pair, d time.Duration, changed <-chan struct{}) bool {
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-changed:
	case <-pr.closed:
		return false
	}
	return true
}

// pair is one proxied connection: the accepted client side and the dialled server side.
type pair struct {
	client, server *net.TCPConn
	closed         chan struct{}
	once           sync.Once
}

// close closes both sides; with rst the peers get a reset instead of an orderly close.
func (pr *pair) close(rst bool) {
	pr.once.Do(func() {
		if rst {
			resetConn(pr.client)
			resetConn(pr.server)
		} else {
			_ = pr.client.Close()
			_ = pr.server.Close()
		}
		close(pr.closed)
	})
}

// resetConn closes c with SO_LINGER 0, which makes the kernel send RST and drop unsent data.
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
