// Command hello is the workload TestRealNode runs in a real container: it prints one line with
// its host name (the pod's name), then waits for SIGTERM. With -once it prints and exits, for
// `kubectl exec`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	once := flag.Bool("once", false, "print the line and exit")
	flag.Parse()
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	fmt.Printf("hello from a real container on %s\n", host)
	if *once {
		return
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
