package reconcile

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// apiLimit is the API server's bound on status.message (the CRD's maxLength) and on an Event's
// note (events.k8s.io): what the cut must keep within, whatever MaxMessage says.
const apiLimit = 1024

// TestCutMessage: a message is cut to the API's limit on a rune boundary, marked with an ellipsis,
// and is valid UTF-8 whatever came in.
func TestCutMessage(t *testing.T) {
	a := strings.Repeat
	for name, tc := range map[string]struct {
		in, want string
	}{
		"a short message is kept":                                   {in: "Job j runs", want: "Job j runs"},
		"a message of exactly the limit is kept":                    {in: a("x", apiLimit), want: a("x", apiLimit)},
		"multi-byte text of exactly the limit is kept":              {in: a("€", 341) + "x", want: a("€", 341) + "x"},
		"a longer message is cut to the limit, with an ellipsis":    {in: a("x", 5000), want: a("x", apiLimit-3) + "..."},
		"a two-byte rune across the cut is left out whole":          {in: a("x", apiLimit-4) + "é" + a("y", 100), want: a("x", apiLimit-4) + "..."},
		"a four-byte rune across the cut is left out whole":         {in: a("x", apiLimit-5) + "😀" + a("y", 100), want: a("x", apiLimit-5) + "..."},
		"a rune that ends right at the cut is kept":                 {in: a("x", apiLimit-5) + "é" + a("y", 100), want: a("x", apiLimit-5) + "é..."},
		"invalid UTF-8 is replaced":                                 {in: "bad \xff byte", want: "bad \uFFFD byte"},
		"invalid UTF-8 counts at its replacement's length":          {in: a("x", apiLimit-1) + "\xff", want: a("x", apiLimit-3) + "..."},
		"a message of only multi-byte runes stays within the limit": {in: a("é", 2560), want: a("é", (apiLimit-3)/2) + "..."},
	} {
		t.Run(name, func(t *testing.T) {
			got := CutMessage(tc.in)
			if got != tc.want {
				t.Errorf("CutMessage: %d bytes %q..., want %d bytes %q...", len(got), tail(got), len(tc.want), tail(tc.want))
			}
			if len(got) > apiLimit || !utf8.ValidString(got) {
				t.Errorf("CutMessage: %d bytes, valid UTF-8 %t: want at most %d bytes of valid UTF-8", len(got), utf8.ValidString(got), apiLimit)
			}
		})
	}
}

// tail is the end of a long string, where a cut shows.
func tail(s string) string { return s[max(len(s)-12, 0):] }
