/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command pause is the pod sandbox's first process, like the upstream pause image
// (kubernetes build/pause/linux/pause.c), written in Go so the project builds it without a C
// toolchain or an image pull. It holds the pod's namespaces open, reaps every child reparented
// to it (it is PID 1 of the pod when the pod shares one PID namespace), and exits 0 on SIGTERM
// or SIGINT so stopping a sandbox is never reported as a failure.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (lockedjob)")
		return
	}
	// Until Notify, the Go runtime would die of SIGTERM (not exit 0) and ignore SIGCHLD; so
	// handlers first, then reap what may have exited before them, then speak.
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	reap()
	if os.Getpid() != 1 {
		// The same warning as upstream: outside a pod it works, but reaps only its own children.
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %s\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child; one SIGCHLD can stand for several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
