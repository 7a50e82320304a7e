package lockedjob

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// TestOutlivesFailover: a leader may die just before it renews, so a lease survives a leader
// change only if what is left of it after a renewal (ttl − interval) outlasts the failover. A ttl
// of 20s renewed every third outlived a 15s leader lease by the old rule (ttl > failover) and
// expired in the chaos run's arithmetic (13.3s left).
func TestOutlivesFailover(t *testing.T) {
	lj := func(ttl, interval time.Duration) *batchv1alpha1.LockedJob {
		l := &batchv1alpha1.LockedJob{}
		l.Spec.Lock.TTL = &metav1.Duration{Duration: ttl}
		if interval > 0 {
			l.Spec.Lock.RenewInterval = &metav1.Duration{Duration: interval}
		}
		return l
	}
	const failover = 15 * time.Second
	for _, c := range []struct {
		name     string
		lj       *batchv1alpha1.LockedJob
		failover time.Duration
		want     bool
	}{
		{"defaults: 30s renewed every 10s leaves 20s", lj(30*time.Second, 0), failover, true},
		{"20s renewed every third leaves 13.3s", lj(20*time.Second, 0), failover, false},
		{"20s renewed every 2s leaves 18s", lj(20*time.Second, 2*time.Second), failover, true},
		{"exactly the failover is not enough", lj(30*time.Second, 15*time.Second), failover, false},
		{"failover not known", lj(3*time.Second, 0), 0, true},
	} {
		if got := outlivesFailover(ttlOf(c.lj), renewalPeriod(c.lj), c.failover); got != c.want {
			t.Errorf("%s: outlivesFailover = %t, want %t", c.name, got, c.want)
		}
	}
}
