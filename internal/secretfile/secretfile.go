// Package secretfile reads the secrets the operator takes from mounted files (the Redis password,
// the token key) rather than from flags, which any user of the node can read in the process list.
package secretfile

import (
	"os"
	"strings"
)

// Read returns the content of the file at path without trailing line ends, or "" for an empty
// path. The line ends go because `echo secret > file` and most editors add one that nobody means
// as part of the secret; a Secret volume adds none.
func Read(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
