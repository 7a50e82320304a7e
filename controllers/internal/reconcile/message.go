package reconcile

import (
	"strings"
	"unicode/utf8"
)

// MaxMessage bounds every free-text string the operator writes: status.message (the CRD's
// maxLength 1024), the Event note (events.k8s.io refuses more than 1024 bytes) and condition
// messages, which quote status.message. Messages quote foreign text (the Job API's field errors, a
// kubelet's waiting message, Redis errors) of any length, and one string over its bound makes the
// API server refuse the whole status write or Event.
const MaxMessage = 1024

// Ellipsis ends a message that was cut.
const Ellipsis = "..."

// CutMessage is the one cut of every status string and Event note: at most MaxMessage bytes, cut on
// a rune boundary and marked with an ellipsis. Bytes, not characters: the Event note's bound counts
// bytes, and a schema's maxLength counts characters, of which there are never more than bytes.
// Invalid UTF-8 is replaced before measuring: JSON encoding would replace it after the cut, and
// with longer sequences.
func CutMessage(s string) string {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	if len(s) <= MaxMessage {
		return s
	}
	end := MaxMessage - len(Ellipsis)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + Ellipsis
}
