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
	"compress/gzip"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// tree holds the explicit entries of an image, keyed by path.
type tree map[string]entry

// buildTree checks the entries against each other: one path, one meaning, and nothing inside a file.
func buildTree(entries []entry) (tree, error) {
	t := tree{}
	for _, e := range entries {
		if e.path == "" {
			return nil, fmt.Errorf("a file cannot be the image root")
		}
		if old, ok := t[e.path]; ok && !sameEntry(old, e) {
			return nil, fmt.Errorf("/%s is given twice, differently", e.path)
		}
		t[e.path] = e
	}
	for p := range t {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if parent, ok := t[dir]; ok && !parent.dir {
				return nil, fmt.Errorf("/%s is a file, so /%s cannot be inside it", dir, p)
			}
		}
	}
	return t, nil
}

// sameEntry lets two specs name one folder (say dir:/tmp:1777 beside nonroot-etc) as long as
// they agree on it.
func sameEntry(a, b entry) bool {
	return a.dir && b.dir && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid
}

// layerEntries returns, sorted by path, one layer's entries and every parent folder they need.
// Each layer carries its own parents so it never depends on another layer for a folder to
// exist; a parent named by any spec keeps that spec's mode and owner, so a file added under /tmp
// in the second layer does not turn the base layer's 1777 /tmp back into 0755 (in an overlay the
// upper layer's folder wins). Other parents are 0755 and owned by root.
func (t tree) layerEntries(base bool) []entry {
	set := map[string]entry{}
	for p, e := range t {
		if e.base != base {
			continue
		}
		set[p] = e
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			parent, ok := t[dir]
			if !ok {
				parent = entry{path: dir, dir: true, mode: 0o755}
			}
			set[dir] = parent
		}
	}
	out := make([]entry, 0, len(set))
	for _, e := range set {
		out = append(out, e)
	}
	// A parent's path is a prefix of its children's, so plain string order puts folders first.
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	return out
}

// writeLayer writes entries as a gzipped tar. Every header is fixed by the entry
// alone (mtime, owner, mode), and gzip writes no time or name, so equal input gives equal bytes.
func writeLayer(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("gzip writer: %w", err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := writeEntry(tw, e, mtime); err != nil {
			return nil, fmt.Errorf("write /%s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("close gzip: %w", err)
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, e entry, mtime time.Time) error {
	hdr := &tar.Header{
		Name:    e.path,
		Mode:    e.mode,
		Uid:     e.uid,
		Gid:     e.gid,
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	if e.dir {
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	} else {
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(e.data))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(e.data)
	return err
}
