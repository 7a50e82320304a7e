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
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// managerArgs are the flags and specs the Makefile's go-image passes for the manager image
// (keep the two in step): non-root, distroless-like, nothing but the binary, /etc and certs.
func managerArgs(bin, out string) []string {
	return []string{
		"-tag", "lockedjob.local/manager:dev", "-out", out,
		"-entrypoint", `["/manager"]`, "-user", "65532:65532", "-workdir", "/",
		"nonroot-etc", "ca-certs", "file:" + bin + ":/manager:0755",
	}
}

// fileInfo is what a test checks of one file in an image.
type fileInfo struct {
	Type     byte
	Mode     int64
	UID, GID int
	Size     int64
}

func TestManagerImage(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "manager", "not really a manager", 0o755)
	out := filepath.Join(dir, "images", "manager.tar")

	runOK(t, managerArgs(bin, out))

	img, repoTags := readArchive(t, out, "lockedjob.local/manager:dev")
	if diff := cmp.Diff([]string{"lockedjob.local/manager:dev"}, repoTags); diff != "" {
		t.Errorf("manifest.json RepoTags (-want,+got):\n%s", diff)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	wantConfig := v1.Config{
		User:       "65532:65532",
		Entrypoint: []string{"/manager"},
		WorkingDir: "/",
		Env:        []string{defaultPath},
	}
	if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
		t.Errorf("image config (-want,+got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Equal(time.Unix(0, 0)) {
		t.Errorf("created = %v, want the Unix epoch (no SOURCE_DATE_EPOCH)", cf.Created)
	}

	want := map[string]fileInfo{
		"etc":          {tar.TypeDir, 0o755, 0, 0, 0},
		"etc/group":    {tar.TypeReg, 0o644, 0, 0, int64(len(nonrootGroup))},
		"etc/passwd":   {tar.TypeReg, 0o644, 0, 0, int64(len(nonrootPasswd))},
		"home":         {tar.TypeDir, 0o755, 0, 0, 0},
		"home/nonroot": {tar.TypeDir, 0o700, nonrootUID, nonrootGID, 0},
		"tmp":          {tar.TypeDir, 0o1777, 0, 0, 0},
		"manager":      {tar.TypeReg, 0o755, 0, 0, int64(len("not really a manager"))},
	}
	if certs, err := os.Stat(hostCACerts); err == nil {
		want["etc/ssl"] = fileInfo{tar.TypeDir, 0o755, 0, 0, 0}
		want["etc/ssl/certs"] = fileInfo{tar.TypeDir, 0o755, 0, 0, 0}
		want["etc/ssl/certs/ca-certificates.crt"] = fileInfo{tar.TypeReg, 0o644, 0, 0, certs.Size()}
	}
	got := flatFiles(t, img)
	// The full list, not a spot check: a shell or anything else that slipped in shows up here.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image files (-want,+got):\n%s", diff)
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, ok := got[shell]; ok {
			t.Errorf("the manager image has a shell: /%s", shell)
		}
	}
	if data := fileData(t, img, "etc/passwd"); !strings.Contains(data, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", data)
	}
}

func TestLayersAreBaseThenFiles(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "manager", "binary", 0o755)
	out := filepath.Join(dir, "manager.tar")

	runOK(t, []string{"-tag", "lockedjob.local/x:dev", "-out", out,
		"nonroot-etc", "file:" + bin + ":/tmp/cache/manager", "file:" + bin + ":/manager"})

	img, _ := readArchive(t, out, "lockedjob.local/x:dev")
	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("layers: %v", err)
	}
	if len(layers) != 2 {
		t.Fatalf("got %d layers, want 2 (base, files)", len(layers))
	}
	files := layerFiles(t, layers[1])
	// The files layer needs /tmp as a parent; it must repeat the base layer's 1777, since in an
	// overlay the upper layer's folder wins.
	wantFiles := map[string]fileInfo{
		"manager":           {tar.TypeReg, 0o755, 0, 0, 6},
		"tmp":               {tar.TypeDir, 0o1777, 0, 0, 0},
		"tmp/cache":         {tar.TypeDir, 0o755, 0, 0, 0},
		"tmp/cache/manager": {tar.TypeReg, 0o755, 0, 0, 6},
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("files layer (-want,+got):\n%s", diff)
	}
	if _, ok := layerFiles(t, layers[0])["manager"]; ok {
		t.Errorf("the base layer holds /manager")
	}
}

// TestBaseLayerGoesUnderTheSpecs: -base-layer puts a tar file (a root filesystem with libc) under
// the specs' layers as it is, and lets a dynamically linked binary in, which it can then run.
func TestBaseLayerGoesUnderTheSpecs(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "rootfs.tar")
	f, err := os.Create(base)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, h := range []*tar.Header{
		{Name: "lib/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "lib/libc.so.6", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("libc")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.tar")
	// Debian's ls needs ld-linux and libc: refused alone (TestRefusals), taken on a base layer.
	runOK(t, []string{"-tag", "lockedjob.local/x:v1", "-out", out, "-base-layer", base, "file:/bin/ls:/usr/local/bin/ls"})

	img, _ := readArchive(t, out, "lockedjob.local/x:v1")
	layers := mustLayers(t, img)
	if len(layers) != 2 {
		t.Fatalf("got %d layers, want 2 (the base layer, the files)", len(layers))
	}
	want := map[string]fileInfo{
		"lib":           {tar.TypeDir, 0o755, 0, 0, 0},
		"lib/libc.so.6": {tar.TypeReg, 0o644, 0, 0, 4},
	}
	if diff := cmp.Diff(want, layerFiles(t, layers[0])); diff != "" {
		t.Errorf("base layer (-want,+got):\n%s", diff)
	}
	if _, ok := layerFiles(t, layers[1])["usr/local/bin/ls"]; !ok {
		t.Errorf("the files layer lacks /usr/local/bin/ls")
	}
}

func TestImageConfigFlags(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "data.txt", "hello", 0o600)
	out := filepath.Join(dir, "x.tar")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")

	runOK(t, []string{"-tag", "lockedjob.local/x:v1", "-out", out,
		"-cmd", `["--flag","value"]`, "-user", "1000:1000", "-workdir", "/work",
		"-env", "PATH=/bin", "-env", "A=b=c", "-label", "org.opencontainers.image.source=lockedjob",
		"file:" + data + ":/work/data.txt", "dir:/work:0750:1000:1000", "dir:/empty"})

	img, _ := readArchive(t, out, "lockedjob.local/x:v1")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	wantConfig := v1.Config{
		Cmd:        []string{"--flag", "value"},
		User:       "1000:1000",
		WorkingDir: "/work",
		Env:        []string{"PATH=/bin", "A=b=c"},
		Labels:     map[string]string{"org.opencontainers.image.source": "lockedjob"},
	}
	if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
		t.Errorf("image config (-want,+got):\n%s", diff)
	}
	if !cf.Created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("created = %v, want SOURCE_DATE_EPOCH", cf.Created)
	}
	want := map[string]fileInfo{
		"empty":         {tar.TypeDir, 0o755, 0, 0, 0},
		"work":          {tar.TypeDir, 0o750, 1000, 1000, 0},
		"work/data.txt": {tar.TypeReg, 0o644, 0, 0, 5}, // not executable: 0644 whatever the source's 0600
	}
	if diff := cmp.Diff(want, flatFiles(t, img)); diff != "" {
		t.Errorf("image files (-want,+got):\n%s", diff)
	}
	for _, l := range mustLayers(t, img) {
		assertMtimes(t, l, time.Unix(1700000000, 0))
	}
}

// TestDigestReproducible builds the same image from copies of the inputs that differ in
// everything that must not matter (folder, mtime, permission bits beyond "executable").
func TestDigestReproducible(t *testing.T) {
	build := func(t *testing.T, content string, srcMode os.FileMode, mtime time.Time) (v1.Hash, [32]byte) {
		t.Helper()
		dir := t.TempDir()
		bin := writeFile(t, dir, "manager", content, srcMode)
		if err := os.Chtimes(bin, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "manager.tar")
		runOK(t, managerArgs(bin, out))
		img, _ := readArchive(t, out, "lockedjob.local/manager:dev")
		d, err := img.Digest()
		if err != nil {
			t.Fatalf("digest: %v", err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return d, sha256.Sum256(raw)
	}
	d1, f1 := build(t, "same", 0o755, time.Unix(1, 0))
	d2, f2 := build(t, "same", 0o700, time.Now())
	if d1 != d2 {
		t.Errorf("same inputs, different digests: %s and %s", d1, d2)
	}
	if f1 != f2 {
		t.Errorf("same inputs, different tarball bytes")
	}
	if d3, _ := build(t, "other", 0o755, time.Unix(1, 0)); d3 == d1 {
		t.Errorf("a changed file kept the digest %s", d1)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "86400")
	if d4, _ := build(t, "same", 0o755, time.Unix(1, 0)); d4 == d1 {
		t.Errorf("SOURCE_DATE_EPOCH did not change the digest %s", d1)
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	bin := writeFile(t, dir, "bin", "x", 0o755)
	out := filepath.Join(dir, "out.tar")
	base := []string{"-tag", "lockedjob.local/x:v1", "-out", out}
	cases := map[string]struct {
		args    []string
		wantErr string
	}{
		"no tag":             {[]string{"-out", out, "dir:/x"}, "-tag and -out are required"},
		"tag without tag":    {[]string{"-tag", "lockedjob.local/x", "-out", out, "dir:/x"}, "-tag"},
		"no spec":            {base, "no SPEC given"},
		"relative target":    {append(slices.Clone(base), "file:"+bin+":manager"), "must be absolute"},
		"mode not octal":     {append(slices.Clone(base), "file:"+bin+":/m:0799"), "want octal"},
		"owner without gid":  {append(slices.Clone(base), "dir:/d:0755:1"), "want DST[:MODE[:UID:GID]]"},
		"missing source":     {append(slices.Clone(base), "file:"+dir+"/nope:/m"), "read source"},
		"unknown kind":       {append(slices.Clone(base), "symlink:/a:/b"), `unknown kind "symlink"`},
		"root as a file":     {append(slices.Clone(base), "file:"+bin+":/"), "image root"},
		"twice, differently": {append(slices.Clone(base), "dir:/tmp:1777", "dir:/tmp:0755"), "given twice"},
		"inside a file":      {append(slices.Clone(base), "file:"+bin+":/a", "file:"+bin+":/a/b"), "/a is a file"},
		"entrypoint not json": {append(slices.Clone(base), "-entrypoint", "/manager", "dir:/x"),
			"-entrypoint: want a JSON list"},
		"bad env": {[]string{"-tag", "lockedjob.local/x:v1", "-out", out, "-env", "NOEQUALS", "dir:/x"}, "want K=V"},
		// Debian's ls needs ld-linux and libc, which no image here has.
		"dynamic binary": {append(slices.Clone(base), "file:/bin/ls:/ls"), "dynamically linked"},
	}
	for what, tc := range cases {
		t.Run(what, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tc.args, err, tc.wantErr)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused build left %s behind", out)
			}
		})
	}
}

func TestSameFolderFromTwoSpecs(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.tar")
	runOK(t, []string{"-tag", "lockedjob.local/x:v1", "-out", out, "nonroot-etc", "dir:/tmp:1777"})
	img, _ := readArchive(t, out, "lockedjob.local/x:v1")
	if got := flatFiles(t, img)["tmp"]; got.Mode != 0o1777 {
		t.Errorf("/tmp mode = %o, want 1777", got.Mode)
	}
}

func runOK(t *testing.T, args []string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(args, &stdout, &stderr); err != nil {
		t.Fatalf("run(%q): %v\nstderr: %s", args, err, stderr.String())
	}
	if !strings.Contains(stdout.String(), " id sha256:") {
		t.Errorf("report %q names no image id", stdout.String())
	}
}

func writeFile(t *testing.T, dir, file, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // WriteFile's mode passes through the umask
		t.Fatal(err)
	}
	return p
}

// readArchive opens a tarball the way a loader does: manifest.json first, then the image its
// RepoTags name.
func readArchive(t *testing.T, path, ref string) (v1.Image, []string) {
	t.Helper()
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatalf("read manifest.json of %s: %v", path, err)
	}
	if len(manifest) != 1 {
		t.Fatalf("manifest.json lists %d images, want 1", len(manifest))
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("open %s as %s: %v", path, ref, err)
	}
	return img, manifest[0].RepoTags
}

func mustLayers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatalf("layers: %v", err)
	}
	return layers
}

// flatFiles lists the image's filesystem as a container sees it (all layers merged).
func flatFiles(t *testing.T, img v1.Image) map[string]fileInfo {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	return tarFiles(t, rc)
}

func layerFiles(t *testing.T, l v1.Layer) map[string]fileInfo {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatalf("open layer: %v", err)
	}
	defer func() { _ = rc.Close() }()
	return tarFiles(t, rc)
}

func tarFiles(t *testing.T, r io.Reader) map[string]fileInfo {
	t.Helper()
	files := map[string]fileInfo{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		// Layers name folders "tmp/", mutate.Extract "tmp"; compare without the slash.
		files[strings.TrimSuffix(hdr.Name, "/")] = fileInfo{hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Size}
	}
}

func fileData(t *testing.T, img v1.Image, path string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not found in the image: %v", path, err)
		}
		if hdr.Name == path {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}

func assertMtimes(t *testing.T, l v1.Layer, want time.Time) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(want) {
			t.Errorf("%s mtime = %v, want %v", hdr.Name, hdr.ModTime, want)
		}
	}
}

// The tarball must carry the keys docker load and containerd's importer read.
func TestManifestJSONKeys(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.tar")
	runOK(t, []string{"-tag", "lockedjob.local/x:v1", "-out", out, "dir:/x"})
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no manifest.json in the tarball: %v", err)
		}
		if hdr.Name != "manifest.json" {
			continue
		}
		var m []map[string]any
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			t.Fatalf("decode manifest.json: %v", err)
		}
		for _, key := range []string{"Config", "RepoTags", "Layers"} {
			if _, ok := m[0][key]; !ok {
				t.Errorf("manifest.json has no %s: %v", key, m[0])
			}
		}
		return
	}
}
