// Package utils holds the few process and file helpers the e2e suite needs.
// It has no Ginkgo or Kubernetes dependencies.
package utils

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Run runs cmd and returns its combined stdout and stderr. A failure names
// the command line and carries the output, so callers can print one error.
func Run(cmd *exec.Cmd) (string, error) {
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out := buf.String()
	if err != nil {
		return out, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return out, nil
}

// ProjectDir returns the repository root: the nearest folder above the working
// directory that holds go.mod and hack/cluster.sh.
func ProjectDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "hack", "cluster.sh")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod + hack/cluster.sh) not found above the working directory")
		}
		dir = parent
	}
}

// TailFile returns the last n lines of the file at path, or a note saying why
// it could not be read.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePortBlock returns the first port of count consecutive free loopback
// ports: preferred if that block is free, else a random block in
// 20000..32700 (below Linux's ephemeral range), never within 10 ports of avoid.
func FreePortBlock(preferred, count, avoid int) (int, error) {
	if preferred > 0 && blockFree(preferred, count) {
		return preferred, nil
	}
	for range 100 {
		base := 20000 + 10*rand.IntN(1270)
		if base > avoid-10 && base < avoid+10 {
			continue
		}
		if blockFree(base, count) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no block of %d free loopback ports found", count)
}

func blockFree(base, count int) bool {
	for p := base; p < base+count; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
