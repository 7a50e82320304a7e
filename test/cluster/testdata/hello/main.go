// Command hello is the workload TestRealNode runs in a real container: it prints one line with
// its host name (the pod's name), then waits for SIGTERM. With -once it prints and exits, for
// `kubectl exec`; with -dial it also sends that line to a TCP address (a listener on the host);
// with -resolve NAME it also prints NAME's addresses as the pod's resolver (the cluster's DNS)
// gives them, and fails if it cannot; with -listen ADDR it first waits for one connection on ADDR
// and prints the line it brings (TestKindCluster: a pod on one node dials a pod on another).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	once := flag.Bool("once", false, "print the line and exit")
	dial := flag.String("dial", "", "also send the line to this TCP address")
	resolve := flag.String("resolve", "", "also print this name's addresses")
	listen := flag.String("listen", "", "first take one connection on this TCP address and print what it sends")
	flag.Parse()
	if *listen != "" {
		if err := receive(*listen); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	line := fmt.Sprintf("hello from a real container on %s\n", host)
	fmt.Print(line)
	if *dial != "" {
		if err := send(*dial, line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *resolve != "" {
		addrs, err := net.LookupHost(*resolve)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("resolved %s: %s\n", *resolve, strings.Join(addrs, " "))
	}
	if *once {
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

func receive(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	defer func() { _ = l.Close() }()
	conn, err := l.Accept()
	if err != nil {
		return fmt.Errorf("accept on %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from %s: %w", conn.RemoteAddr(), err)
	}
	fmt.Printf("received from %s: %s", conn.RemoteAddr(), line)
	return nil
}

func send(addr, line string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.Write([]byte(line)); err != nil {
		return fmt.Errorf("write to %s: %w", addr, err)
	}
	return nil
}
