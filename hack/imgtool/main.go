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

// Command imgtool writes a container image as a docker-archive tarball from local files only:
// no daemon, no registry, no base image. The project builds its manager, pause and workload
// images with it on machines without a container engine (docs/images.md).
//
//	imgtool -tag REF -out FILE [-base-layer TAR] [-entrypoint JSON] [-cmd JSON] [-user UID:GID]
//	        [-workdir DIR] [-env K=V]... [-label K=V]... SPEC...
//
// The same inputs give the same image digest: file times are SOURCE_DATE_EPOCH (or 0), entries
// are sorted, owners are 0:0 unless a SPEC says otherwise.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// defaultPath is distroless's PATH, set unless -env gives one, so exec of a bare name behaves as
// in an image built FROM distroless.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed, nothing failed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imgtool:", err)
		os.Exit(2)
	}
}

// listFlag collects a flag given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// options are the parsed command line.
type options struct {
	tag    name.Tag
	out    string
	config imageConfig
	specs  []string
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	entries, err := parseSpecs(o.specs, o.config.baseLayer != "", stderr)
	if err != nil {
		return err
	}
	img, err := buildImage(entries, o.config)
	if err != nil {
		return err
	}
	if err := writeArchive(o.out, o.tag, img); err != nil {
		return err
	}
	return report(stdout, o, img)
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("imgtool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                        options
		tag, entrypoint, cmdJSON string
		env, labels              listFlag
	)
	fs.StringVar(&tag, "tag", "", "image reference written into the tarball, e.g. lockedjob.local/manager:dev (required)")
	fs.StringVar(&o.out, "out", "", "tarball to write (required)")
	fs.StringVar(&entrypoint, "entrypoint", "", `entrypoint as a JSON list, e.g. '["/manager"]'`)
	fs.StringVar(&cmdJSON, "cmd", "", `default arguments as a JSON list`)
	fs.StringVar(&o.config.user, "user", "", "UID:GID the container runs as (default: root)")
	fs.StringVar(&o.config.workdir, "workdir", "", "working folder")
	fs.StringVar(&o.config.baseLayer, "base-layer", "", "a tar file (e.g. a Debian root filesystem) put under every other layer; dynamically linked binaries are then allowed")
	fs.Var(&env, "env", "K=V environment variable (repeatable); PATH defaults to distroless's")
	fs.Var(&labels, "label", "K=V image label (repeatable)")
	// Usage is help on stderr, as flag's own PrintDefaults writes it: a failed write has no one to tell.
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: imgtool -tag REF -out FILE [flags] SPEC...")
		fs.PrintDefaults()
		_, _ = fmt.Fprintln(stderr, specUsage)
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if tag == "" || o.out == "" {
		return o, errors.New("-tag and -out are required")
	}
	var err error
	// Strict: a tag must be spelled out, so the name a node finds is exactly the one given.
	if o.tag, err = name.NewTag(tag, name.StrictValidation); err != nil {
		return o, fmt.Errorf("-tag %q: want a reference with a tag, e.g. lockedjob.local/manager:dev: %w", tag, err)
	}
	if o.config.entrypoint, err = jsonList("-entrypoint", entrypoint); err != nil {
		return o, err
	}
	if o.config.cmd, err = jsonList("-cmd", cmdJSON); err != nil {
		return o, err
	}
	if o.config.env, err = withDefaultPath(env); err != nil {
		return o, err
	}
	if o.config.labels, err = keyValues("-label", labels); err != nil {
		return o, err
	}
	if o.config.created, err = sourceDateEpoch(); err != nil {
		return o, err
	}
	o.specs = fs.Args()
	if len(o.specs) == 0 {
		return o, errors.New("no SPEC given: an image needs at least one file")
	}
	return o, nil
}

func jsonList(flagName, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("%s: want a JSON list of strings: %w", flagName, err)
	}
	return l, nil
}

func withDefaultPath(env []string) ([]string, error) {
	hasPath := false
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-env %q: want K=V", kv)
		}
		hasPath = hasPath || k == "PATH"
	}
	if hasPath {
		return env, nil
	}
	return append([]string{defaultPath}, env...), nil
}

func keyValues(flagName string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want K=V", flagName, kv)
		}
		m[k] = v
	}
	return m, nil
}

// sourceDateEpoch follows https://reproducible-builds.org/specs/source-date-epoch/.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}
