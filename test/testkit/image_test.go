package testkit

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestJobImageIsTheOneMakeWrites: the suites' Jobs run JobImage, which no registry serves: only
// `make image-busybox` writes it (BUSYBOX_IMG) and the suites load that tarball. A rename on one
// side alone would leave every Job of the suites in ErrImagePull.
func TestJobImageIsTheOneMakeWrites(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^BUSYBOX_IMG \?= (\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no BUSYBOX_IMG ?= line")
	}
	if got := string(m[1]); got != JobImage {
		t.Fatalf("the Makefile writes BUSYBOX_IMG %s, the suites run JobImage %s", got, JobImage)
	}
}
