// Command release writes the archives of a lockedjob release so that two runs from one commit
// give the same bytes (hack/release.sh runs it; `make release VERSION=vX.Y.Z`). Every archive entry
// has the commit's time, owner 0 and a fixed mode, entries come in name order, and gzip carries no
// time or name of its own: what `tar` and `helm package` would write differs in all of these.
//
//	release tgz -mtime T -o OUT.tar.gz NAME=FILE...   an archive of files, each under NAME
//	release normalize -mtime T IN.tgz OUT.tgz          the same entries, rewritten as above
//	release krew -version V -template T -dir D -o OUT  the krew manifest with D's archives' sha256
//	release sums -dir D -o SHA256SUMS                  sha256sum's format, every file of D
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: release tgz|normalize|krew|sums ...")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	mtime := fs.String("mtime", "", "time of every entry (RFC 3339): the commit's")
	out := fs.String("o", "", "file to write")
	version := fs.String("version", "", "release version (krew)")
	template := fs.String("template", "", "krew manifest template (krew)")
	dir := fs.String("dir", "", "folder of the release's files (krew, sums)")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "tgz":
		err = withTime(*mtime, func(t time.Time) error { return writeFiles(*out, t, fs.Args()) })
	case "normalize":
		if fs.NArg() != 2 {
			log.Fatal("usage: release normalize -mtime T IN.tgz OUT.tgz")
		}
		err = withTime(*mtime, func(t time.Time) error { return normalize(fs.Arg(0), fs.Arg(1), t) })
	case "krew":
		err = krew(*template, *version, *dir, *out)
	case "sums":
		err = sums(*dir, *out)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatalf("release %s: %v", os.Args[1], err)
	}
}

func withTime(s string, f func(time.Time) error) error {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return fmt.Errorf("-mtime: %w", err)
	}
	return f(t.UTC())
}

// entry is one file of an archive.
type entry struct {
	name string
	mode int64
	data []byte
}

// writeFiles archives NAME=FILE pairs; a file that is executable stays so.
func writeFiles(out string, t time.Time, pairs []string) error {
	var es []entry
	for _, p := range pairs {
		name, file, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("%q is not NAME=FILE", p)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		st, err := os.Stat(file)
		if err != nil {
			return err
		}
		es = append(es, entry{name: name, mode: modeOf(st.Mode()), data: data})
	}
	return writeArchive(out, t, es)
}

func modeOf(m os.FileMode) int64 {
	if m&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

// normalize rewrites an archive's regular files (a chart helm packaged) as writeArchive does.
func normalize(in, out string, t time.Time) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only: a failed close loses nothing
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	tr := tar.NewReader(gz)
	var es []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue // helm writes only files; directories are implied by their paths
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		es = append(es, entry{name: h.Name, mode: modeOf(os.FileMode(h.Mode)), data: data})
	}
	return writeArchive(out, t, es)
}

// writeArchive writes entries in name order with one time, no owner, and a gzip header without
// time or name.
func writeArchive(out string, t time.Time, es []entry) error {
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: t, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// krew fills the krew manifest template: VERSION, and SHA256_OS_ARCH with the sha256 of
// kubectl-lockedjob_VERSION_os_arch.tar.gz in dir. A placeholder left over fails.
func krew(template, version, dir, out string) error {
	raw, err := os.ReadFile(template)
	if err != nil {
		return err
	}
	text := string(raw)
	// The template's comment says how to fill it by hand; the release's manifest is filled.
	for strings.HasPrefix(text, "#") {
		_, text, _ = strings.Cut(text, "\n")
	}
	for _, platform := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		sum, err := sha256Of(filepath.Join(dir, "kubectl-lockedjob_"+version+"_"+platform+".tar.gz"))
		if err != nil {
			return err
		}
		text = strings.ReplaceAll(text, "SHA256_"+strings.ToUpper(platform), sum)
	}
	text = strings.ReplaceAll(text, "VERSION", version)
	if i := strings.Index(text, "SHA256_"); i >= 0 {
		return fmt.Errorf("%s: a checksum left unfilled near %q", template, text[i:min(len(text), i+30)])
	}
	return os.WriteFile(out, []byte(text), 0o644)
}

// sums writes sha256sum's format for every file of dir but out itself, in name order.
func sums(dir, out string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.IsDir() || filepath.Join(dir, e.Name()) == filepath.Clean(out) {
			continue
		}
		sum, err := sha256Of(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func sha256Of(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}
