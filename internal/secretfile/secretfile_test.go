package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]struct {
		path string
		want string
	}{
		"no path means no secret":        {"", ""},
		"as written":                     {write("plain", "s3cret"), "s3cret"},
		"trailing line ends are dropped": {write("echoed", "s3cret\r\n\n"), "s3cret"},
		"inner line ends stay":           {write("two-lines", "a\nb\n"), "a\nb"},
		"leading blanks stay":            {write("blank", " s3cret \n"), " s3cret "},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Read(tc.path)
			if err != nil || got != tc.want {
				t.Fatalf("Read(%q) = %q, %v; want %q, nil", tc.path, got, err, tc.want)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read(missing) error = %v, want fs.ErrNotExist", err)
	}
}
