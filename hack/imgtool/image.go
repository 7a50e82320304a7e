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
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageConfig is what the container runtime reads from the image besides its files.
type imageConfig struct {
	entrypoint []string
	cmd        []string
	user       string
	workdir    string
	env        []string
	labels     map[string]string
	// baseLayer is a tar file put under the layers the specs make, as it is (-base-layer).
	baseLayer string
	// created is the image's creation time and every file's mtime: SOURCE_DATE_EPOCH or 0,
	// never the clock, so the digest depends on the inputs alone.
	created time.Time
}

// buildImage assembles an image of at most two layers: the base layer (folders, /etc, CA
// certificates) first, so images with the same base share it on a node, then the files; under
// both the -base-layer tar, if one is given.
func buildImage(entries []entry, cfg imageConfig) (v1.Image, error) {
	t, err := buildTree(entries)
	if err != nil {
		return nil, err
	}
	img := empty.Image
	if cfg.baseLayer != "" {
		if img, err = appendTarLayer(img, cfg.baseLayer, cfg.created); err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		base      bool
		createdBy string
	}{{true, "imgtool base"}, {false, "imgtool files"}} {
		es := t.layerEntries(l.base)
		if len(es) == 0 {
			continue
		}
		if img, err = appendLayer(img, es, cfg.created, l.createdBy); err != nil {
			return nil, err
		}
	}
	return configure(img, cfg)
}

func appendLayer(img v1.Image, entries []entry, created time.Time, createdBy string) (v1.Image, error) {
	gz, err := writeLayer(entries, created)
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", createdBy, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", createdBy, err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("append %s layer: %w", createdBy, err)
	}
	return img, nil
}

// appendTarLayer appends the tar file path (plain or gzipped) as a layer, its entries as they are.
// Images built on the same file share that layer on a node.
func appendTarLayer(img v1.Image, path string, created time.Time) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(path, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("base layer %s: %w", path, err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "imgtool base-layer " + filepath.Base(path)},
	})
	if err != nil {
		return nil, fmt.Errorf("append base layer %s: %w", path, err)
	}
	return img, nil
}

func configure(img v1.Image, cfg imageConfig) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: cfg.created}
	// The binaries are built for the machine that builds the image (GOARCH unset).
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: cfg.entrypoint,
		Cmd:        cfg.cmd,
		User:       cfg.user,
		WorkingDir: cfg.workdir,
		Env:        cfg.env,
		Labels:     cfg.labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	return img, nil
}

// writeArchive writes img as a docker-archive tarball (manifest.json with RepoTags), the format
// that `docker load`, `ctr images import` and `kind load image-archive` all read. It writes to a
// temporary file first so a failed build never leaves a truncated tarball under the real name.
func writeArchive(out string, tag name.Tag, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create output folder: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return fmt.Errorf("create temporary output: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if err := tarball.Write(tag, img, f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", out, err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return fmt.Errorf("rename to %s: %w", out, err)
	}
	return nil
}

// report prints what `make image` shows: the tarball, its size, the reference and the image ID.
// The ID is the config's digest, which docker shows as IMAGE ID and the CRI (kubelet, crictl) as
// the image id; the manifest digest is not printed because containerd's importer writes its own
// manifest (same config and layers, other JSON), so that digest would differ on the node.
func report(w io.Writer, o options, img v1.Image) error {
	fi, err := os.Stat(o.out)
	if err != nil {
		return fmt.Errorf("stat %s: %w", o.out, err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("image id: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s %.1f MiB %s id %s\n", o.out, float64(fi.Size())/(1<<20), o.tag, id)
	return err
}
