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

package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// The distroless "nonroot" user, so the images run under the same UID as a
// gcr.io/distroless/static:nonroot based image built by the Dockerfile.
const (
	nonrootUID = 65532
	nonrootGID = 65532
)

// hostCACerts is Debian's CA bundle; Go's crypto/x509 finds it at the same path in the image.
const hostCACerts = "/etc/ssl/certs/ca-certificates.crt"

// nonrootPasswd and nonrootGroup match distroless/static's files, so tools that look a UID up
// by name (and Go's os/user) behave the same in both images.
const (
	nonrootPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	nonrootGroup = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
)

// entry is one file or folder of an image's filesystem.
type entry struct {
	path string // clean, relative to the image root, no leading slash
	dir  bool
	mode int64 // permission bits including setuid, setgid and sticky
	uid  int
	gid  int
	data []byte // file content; nil for a folder
	// base marks an entry that belongs to the base layer, which images built from the same
	// base specs share, so a node stores it once.
	base bool
}

// specUsage documents the SPEC forms for -help and error messages.
const specUsage = `SPEC (each may repeat; paths must not contain ':'):
  file:SRC:DST[:MODE[:UID:GID]]  copy the local file SRC to DST (MODE octal; default 0755 if SRC
                                 is executable, else 0644; owner 0:0 unless given)
  dir:DST[:MODE[:UID:GID]]       a folder (default 0755, owner 0:0)
  nonroot-etc                    /etc/passwd and /etc/group with root, nobody and nonroot (65532),
                                 /home/nonroot (0700, 65532:65532) and /tmp (1777), like distroless
  ca-certs                       ` + hostCACerts + ` from this machine (skipped with a
                                 warning when absent)
file specs go into the image's second layer; everything else into its first (base) layer.`

// parseSpecs turns SPEC arguments into entries. withLibc says a base layer (-base-layer) brings a
// loader and libc, so dynamically linked binaries may come too. warn receives notes that do not
// stop the build.
func parseSpecs(specs []string, withLibc bool, warn io.Writer) ([]entry, error) {
	var entries []entry
	for _, s := range specs {
		es, err := parseSpec(s, withLibc, warn)
		if err != nil {
			return nil, fmt.Errorf("spec %q: %w", s, err)
		}
		entries = append(entries, es...)
	}
	return entries, nil
}

func parseSpec(s string, withLibc bool, warn io.Writer) ([]entry, error) {
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case "file":
		return parseFileSpec(rest, withLibc)
	case "dir":
		return parseDirSpec(rest)
	case "nonroot-etc":
		if rest != "" {
			return nil, errors.New("nonroot-etc takes no arguments")
		}
		return nonrootEtc(), nil
	case "ca-certs":
		if rest != "" {
			return nil, errors.New("ca-certs takes no arguments")
		}
		return caCerts(warn)
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
}

func parseFileSpec(rest string, withLibc bool) ([]entry, error) {
	parts := strings.Split(rest, ":")
	if len(parts) < 2 || parts[0] == "" {
		return nil, errors.New("want file:SRC:DST[:MODE[:UID:GID]]")
	}
	src := parts[0]
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("read source: %w", err)
	}
	if !withLibc {
		if err := refuseDynamicELF(src); err != nil {
			return nil, err
		}
	}
	mode, err := defaultFileMode(src)
	if err != nil {
		return nil, err
	}
	e := entry{data: data, mode: mode}
	if err := fillTarget(&e, parts[1:]); err != nil {
		return nil, err
	}
	return []entry{e}, nil
}

func parseDirSpec(rest string) ([]entry, error) {
	parts := strings.Split(rest, ":")
	e := entry{dir: true, mode: 0o755, base: true}
	if err := fillTarget(&e, parts); err != nil {
		return nil, err
	}
	if e.path == "" {
		return nil, errors.New("the image root is not a folder one can add")
	}
	return []entry{e}, nil
}

// fillTarget reads DST[:MODE[:UID:GID]] into e.
func fillTarget(e *entry, parts []string) error {
	if len(parts) == 0 || len(parts) > 4 || len(parts) == 3 {
		return errors.New("want DST[:MODE[:UID:GID]]")
	}
	p, err := imagePath(parts[0])
	if err != nil {
		return err
	}
	e.path = p
	if len(parts) >= 2 {
		m, err := strconv.ParseInt(parts[1], 8, 64)
		if err != nil || m < 0 || m > 0o7777 {
			return fmt.Errorf("mode %q: want octal 0000-7777", parts[1])
		}
		e.mode = m
	}
	if len(parts) == 4 {
		if e.uid, err = parseID(parts[2]); err != nil {
			return err
		}
		if e.gid, err = parseID(parts[3]); err != nil {
			return err
		}
	}
	return nil
}

// imagePath makes an absolute destination path relative to the image root; a relative one is
// refused because it would silently depend on no working folder at all.
func imagePath(dst string) (string, error) {
	if !strings.HasPrefix(dst, "/") {
		return "", fmt.Errorf("destination %q must be absolute", dst)
	}
	return strings.TrimPrefix(path.Clean(dst), "/"), nil
}

func parseID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("id %q: want a non-negative number", s)
	}
	return n, nil
}

// defaultFileMode takes only "executable or not" from the source, so the umask of whoever
// built the source file cannot change the image digest.
func defaultFileMode(src string) (int64, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return 0, fmt.Errorf("stat source: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", src)
	}
	if fi.Mode().Perm()&0o100 != 0 {
		return 0o755, nil
	}
	return 0o644, nil
}

// refuseDynamicELF fails for an executable that needs a dynamic loader: the images have no libc,
// so it would only fail at container start with a confusing "no such file or directory".
func refuseDynamicELF(src string) error {
	f, err := elf.Open(src)
	if err != nil {
		return nil // not an ELF file: data, a script, a certificate
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build it with CGO_ENABLED=0, or give a -base-layer with libc): the image has no loader or libc", src)
		}
	}
	return nil
}

func nonrootEtc() []entry {
	return []entry{
		{path: "etc/passwd", mode: 0o644, data: []byte(nonrootPasswd), base: true},
		{path: "etc/group", mode: 0o644, data: []byte(nonrootGroup), base: true},
		{path: "home/nonroot", dir: true, mode: 0o700, uid: nonrootUID, gid: nonrootGID, base: true},
		{path: "tmp", dir: true, mode: 0o1777, base: true},
	}
}

func caCerts(warn io.Writer) ([]entry, error) {
	data, err := os.ReadFile(hostCACerts)
	if errors.Is(err, os.ErrNotExist) {
		_, _ = fmt.Fprintf(warn, "imgtool: %s not found, the image has no CA certificates (install the Debian package ca-certificates)\n", hostCACerts)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CA certificates: %w", err)
	}
	return []entry{{path: strings.TrimPrefix(hostCACerts, "/"), mode: 0o644, data: data, base: true}}, nil
}
