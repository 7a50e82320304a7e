// Package utils holds the few process and file helpers the e2e suite needs.
// It has no Ginkgo or Kubernetes dependencies.
package utils

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// CRDFiles lists the project's CRDs (config/crd/bases), which every suite installs as
// config/default does: LockedJob and the kinds beside it.
func CRDFiles(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no CRDs in %s", filepath.Join(root, "config", "crd", "bases"))
	}
	return files, err
}

// HelmEnv is the environment, beyond the caller's own, under which helm keeps its cache,
// configuration and data in home: a test never reads or writes the user's helm repositories or
// plugins.
func HelmEnv(home string) []string {
	return []string{
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
	}
}
