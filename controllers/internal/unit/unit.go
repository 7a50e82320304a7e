// Package unit holds what the reconcilers' plain unit tests share: a scheme, a lock book over a
// real redis-server, a LockedJob to start from, an Event recorder that keeps what it heard, and the
// check that a status string or Event note fits the API. Only tests import it.
package unit

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/lockbook"
	"github.com/lockedjob/lockedjob/internal/redislock"
	"github.com/lockedjob/lockedjob/internal/testutil/redisserver"
)

// Scheme is a scheme for plain unit tests, which run without the envtest suite.
func Scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Locks starts a real redis-server and returns a lock client over it (leaving release marks for
// lockbook.ReleaseMarkRetention, as the operator's does, then opts), a lock book stopped at the end
// of the test, and a plain client for looking at Redis directly.
func Locks(t *testing.T, opts ...redislock.Option) (*lockbook.Book, *redislock.Client, *redis.Client) {
	t.Helper()
	rc := redisserver.Start(t).Client(t)
	lockClient, err := redislock.New(rc, append([]redislock.Option{redislock.WithReleaseMarkRetention(lockbook.ReleaseMarkRetention)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return Book(t, lockClient), lockClient, rc
}

// Book returns a lock book over c, stopped at the end of the test.
func Book(t *testing.T, c *redislock.Client) *lockbook.Book {
	t.Helper()
	book := lockbook.New(c)
	t.Cleanup(book.Stop)
	return book
}

// LockedJob is a LockedJob of lock "db" in namespace "ns" for the plain unit tests.
func LockedJob(name string, uid types.UID) *batchv1alpha1.LockedJob {
	return &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, Generation: 1},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock: batchv1alpha1.LockSpec{Name: "db"},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			}}},
		},
	}
}

// Events keeps the reasons and notes of the Events a reconciler emits.
type Events struct {
	mu      sync.Mutex
	reasons []string
	notes   []string
}

// Eventf records one Event.
func (r *Events) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
	r.notes = append(r.notes, fmt.Sprintf(note, args...))
}

// Count is how many Events had reason.
func (r *Events) Count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, x := range r.reasons {
		if x == reason {
			n++
		}
	}
	return n
}

// Reasons are the Events' reasons, in order.
func (r *Events) Reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// Notes are the Events' notes, in order.
func (r *Events) Notes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notes...)
}

// APILimit is the API server's bound on status.message (the CRD's maxLength) and on an Event's
// note (events.k8s.io): what the cut must keep within, whatever reconcile.MaxMessage says.
const APILimit = 1024

// LongCause is a 5 kB cause of multi-byte text, as a Job API refusal or a kubelet may give.
var LongCause = "ungültig: " + strings.Repeat("é", 2560)

// CheckCut fails t when s is over the API's limit or not valid UTF-8.
func CheckCut(t *testing.T, what, s string) {
	t.Helper()
	if len(s) > APILimit || !utf8.ValidString(s) {
		t.Errorf("%s: %d bytes, valid UTF-8 %t: want at most %d bytes of valid UTF-8", what, len(s), utf8.ValidString(s), APILimit)
	}
}

var scriptCallsRe = regexp.MustCompile(`cmdstat_(?:evalsha|eval):calls=(\d+)`)

// ScriptCalls counts the scripts Redis ran: every lock verb is one.
func ScriptCalls(t *testing.T, rc *redis.Client) int {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range scriptCallsRe.FindAllStringSubmatch(info, -1) {
		c, _ := strconv.Atoi(m[1])
		n += c
	}
	return n
}
