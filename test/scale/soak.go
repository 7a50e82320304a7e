//go:build scale

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/ports"
	"github.com/lockedjob/lockedjob/test/scale/measure"
)

// The soak (issue 28, scenario 6): many LockedJob lives through one operator, a few hundred at a
// time, each created, run to its end and deleted, while the operator's resident memory,
// goroutines and open connections and Redis' keys are sampled. A leak shows as a rise that keeps
// going after the warm-up; a lock whose keys outlive its LockedJobs shows in Redis.

// soakOptions are the soak's flags.
type soakOptions struct {
	lives    int
	inflight int
	locks    int
	sample   time.Duration
}

// soakWarmup is the share of lives after which caches, pools and queues have reached their
// working size: the samples before it are not judged.
const soakWarmup = 0.2

// eventCacheSweep is how often client-go's events broadcaster (k8s.io/client-go/tools/events,
// finishTime) drops the Events it keeps to merge repeats into series: each Event the operator
// emits stays in its memory for one to two sweeps. The cache therefore fills for two sweeps, then
// rises and falls with a period of one sweep, in proportion to the rate of Events, not to the
// lives so far. A soak judges memory only after two sweeps, and over whole sweeps.
const eventCacheSweep = 6 * time.Minute

// soakGrowthLimit is the rise, from the first to the last sweep of the judged samples, beyond
// which a series is not flat.
const soakGrowthLimit = 0.10

// soakJudge says which samples of a soak of lives lives count, and over which windows: window is
// the period of the slowest bounded cycle in the operator's memory (eventCacheSweep).
type soakJudge struct {
	lives  int
	window time.Duration
}

// warm says whether s comes after the warm-up: soakWarmup of the lives ended, and two windows run.
func (j soakJudge) warm(s soakSample) bool {
	return float64(s.ended) >= soakWarmup*float64(j.lives) && s.at >= 2*j.window
}

type soakSample struct {
	at           time.Duration
	ended        int
	rss          int64
	goroutines   int
	heapInuse    int64 // the Go heap the operator's runtime reports in use (go_memstats_heap_inuse_bytes)
	fds          int
	sockets      int
	redisClients int
	lockKeys     int // keys of the soak's locks in Redis beyond their durable ones
}

// lifeWaiter hands each LockedJob's end, as the watch sees it, to the worker that waits for it.
type lifeWaiter struct {
	mu    sync.Mutex
	ended map[string]chan batchv1alpha1.LockedJobPhase
}

func (w *lifeWaiter) expect(name string) <-chan batchv1alpha1.LockedJobPhase {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan batchv1alpha1.LockedJobPhase, 1)
	w.ended[name] = ch
	return ch
}

func (w *lifeWaiter) seen(lj *batchv1alpha1.LockedJob) {
	switch lj.Status.Phase {
	case batchv1alpha1.PhaseSucceeded, batchv1alpha1.PhaseFailed, batchv1alpha1.PhaseLockLost:
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.ended[lj.Name]; ok {
		ch <- lj.Status.Phase
		delete(w.ended, lj.Name)
	}
}

// runSoak runs the soak scenario s: s.objects lives on s.locks locks, -soak-inflight at a time.
func (b *bench) runSoak(ctx context.Context, s scenario) (measure.Result, error) {
	so := b.opts.soak
	res := measure.Result{Scenario: s.name, Objects: s.objects, Locks: s.locks, Goal: string(batchv1alpha1.PhaseSucceeded)}
	ns := "scale-" + s.name
	waiter := &lifeWaiter{ended: map[string]chan batchv1alpha1.LockedJobPhase{}}
	rec, stopWatches, err := b.record(ctx, s, ns, waiter.seen)
	if err != nil {
		return res, err
	}
	defer stopWatches()

	metricsPort, err := ports.Free()
	if err != nil {
		return res, err
	}
	pprofPort, err := ports.Free()
	if err != nil {
		return res, err
	}
	args := append(b.operatorArgs(), "--metrics-bind-address", ports.Addr(metricsPort), "--metrics-secure=false",
		"--pprof-bind-address", ports.Addr(pprofPort))
	heapURL := "http://" + ports.Addr(pprofPort) + "/debug/pprof/heap?gc=1"
	heapAt := func(when string) {
		path := fmt.Sprintf("%s/operator-heap-%s.pprof", b.work, when)
		if err := saveURL(ctx, heapURL, path); err != nil {
			log.Printf("%s: heap profile %s: %v", s.name, when, err) // a profile is a help, not a result
		}
	}
	judge := soakJudge{lives: s.objects, window: eventCacheSweep}
	op, err := startSupervisor(ctx, b.operatorBin, args, nil, fmt.Sprintf("%s/operator-%s", b.work, s.name), b.opts.killEvery)
	if err != nil {
		return res, err
	}
	defer op.stop()
	log.Printf("%s: operator pid %d up; %d lives on %d locks, %d at a time", s.name, op.pid(), s.objects, s.locks, so.inflight)

	var ended, failed atomic.Int64
	sampler := &soakSampler{b: b, op: op, ns: ns, metricsURL: "http://" + ports.Addr(metricsPort) + "/metrics", ended: &ended,
		judge: judge, warm: func() { heapAt("warm") }}
	samplerCtx, stopSampler := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { sampler.run(samplerCtx, so.sample) })

	before, err := b.probes.snapshot(ctx, op)
	if err != nil {
		stopSampler()
		return res, err
	}
	_ = op.takeMaxRSS()
	start := time.Now()
	var next atomic.Int64
	err = parallel(ctx, so.inflight, so.inflight, func(ctx context.Context, worker int) error {
		lock := s.lockOf(worker)
		for {
			i := int(next.Add(1) - 1)
			if i >= s.objects {
				return nil
			}
			phase, err := b.live(ctx, waiter, ns, i, lock, s.run)
			if err != nil {
				return err
			}
			if phase != batchv1alpha1.PhaseSucceeded {
				failed.Add(1)
			}
			if n := ended.Add(1); n%1000 == 0 {
				log.Printf("%s: %d/%d lives ended (%d failed), %s", s.name, n, s.objects, failed.Load(), time.Since(start).Round(time.Second))
			}
			if err := op.failed(); err != nil {
				return err
			}
		}
	})
	res.Wall = time.Since(start)
	stopSampler()
	sampling.Wait()
	if err != nil {
		return res, fmt.Errorf("%s: %w", s.name, err)
	}
	heapAt("end")
	log.Printf("%s: what the heap gained after the warm-up: go tool pprof -top -base %[2]s/operator-heap-warm.pprof %[2]s/operator-heap-end.pprof", s.name, b.work)
	after, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return res, err
	}
	res.Usage = usage(before, after, op.takeMaxRSS())
	res.Done, res.Failed = int(ended.Load()-failed.Load()), int(failed.Load())
	log.Printf("%s: %d lives ended in %s", s.name, ended.Load(), res.Wall.Round(time.Second))

	if res.Delete, err = b.waitEmpty(ctx, op, ns); err != nil {
		return res, err
	}
	if err := b.conclude(ctx, s, ns, op, rec, stopWatches, start, &res); err != nil {
		return res, err
	}

	samples := sampler.taken()
	if err := writeSoakSamples(fmt.Sprintf("%s/soak-samples.tsv", b.work), samples); err != nil {
		return res, err
	}
	fmt.Print(soakReport(samples, judge, s.locks))
	return res, nil
}

// live is one LockedJob's life: created, run to its end as the watch sees it, deleted.
func (b *bench) live(ctx context.Context, waiter *lifeWaiter, ns string, i int, lock string, run time.Duration) (batchv1alpha1.LockedJobPhase, error) {
	zero := int32(0)
	lj := &batchv1alpha1.LockedJob{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("soak-%05d", i), Namespace: ns},
		Spec: batchv1alpha1.LockedJobSpec{
			Lock:        batchv1alpha1.LockSpec{Name: lock},
			JobTemplate: batchv1alpha1.JobTemplate{Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: podTemplate(run)}},
		},
	}
	ended := waiter.expect(lj.Name)
	if err := b.k8s.Create(ctx, lj); err != nil {
		return "", fmt.Errorf("create %s: %w", lj.Name, err)
	}
	var phase batchv1alpha1.LockedJobPhase
	select {
	case phase = <-ended:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(b.timeout):
		return "", fmt.Errorf("%s did not end within %s", lj.Name, b.timeout)
	}
	err := b.k8s.Delete(ctx, lj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil {
		return "", fmt.Errorf("delete %s: %w", lj.Name, err)
	}
	return phase, nil
}

// waitEmpty waits until the namespace holds no LockedJob, Job or pod.
func (b *bench) waitEmpty(ctx context.Context, op *supervisor, ns string) (*measure.Phase, error) {
	before, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := b.waitNamespaceEmpty(ctx, ns); err != nil {
		return nil, err
	}
	after, err := b.probes.snapshot(ctx, op)
	if err != nil {
		return nil, err
	}
	return &measure.Phase{Wall: time.Since(start), Usage: usage(before, after, op.takeMaxRSS())}, nil
}

// soakSampler takes a sample every interval until its context ends.
type soakSampler struct {
	b          *bench
	op         *supervisor
	ns         string
	metricsURL string
	ended      *atomic.Int64
	judge      soakJudge
	warm       func() // called once, at the first sample the judge counts
	start      time.Time
	warmed     bool

	mu      sync.Mutex
	samples []soakSample
}

func (s *soakSampler) run(ctx context.Context, every time.Duration) {
	s.start = time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pid, alive := s.op.livePID()
		if !alive {
			continue // between two lives of a chaos run: nothing to read
		}
		smp, err := s.take(ctx, pid)
		if err != nil {
			if ctx.Err() == nil {
				log.Printf("soak sample: %v", err)
			}
			continue
		}
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
		if !s.warmed && s.judge.warm(smp) {
			s.warmed = true
			s.warm()
		}
	}
}

func (s *soakSampler) taken() []soakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

func (s *soakSampler) take(ctx context.Context, pid int) (soakSample, error) {
	smp := soakSample{at: time.Since(s.start), ended: int(s.ended.Load())}
	var err error
	if smp.rss, err = procRSS(pid); err != nil {
		return smp, err
	}
	if smp.fds, smp.sockets, err = openFiles(pid); err != nil {
		return smp, err
	}
	gauges, err := scrapeGauges(ctx, s.metricsURL, "go_goroutines", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return smp, err
	}
	smp.goroutines, smp.heapInuse = int(gauges["go_goroutines"]), int64(gauges["go_memstats_heap_inuse_bytes"])
	info, err := s.b.probes.rdb.Info(ctx, "clients").Result()
	if err != nil {
		return smp, fmt.Errorf("redis INFO clients: %w", err)
	}
	if smp.redisClients, err = infoField(info, "connected_clients"); err != nil {
		return smp, err
	}
	iter := s.b.probes.rdb.Scan(ctx, 0, "lockedjob:{ns/"+clusterID+"/"+s.ns+"/*", 1000).Iterator()
	for iter.Next(ctx) {
		if !durable(iter.Val()) {
			smp.lockKeys++
		}
	}
	return smp, iter.Err()
}

// openFiles counts pid's open file descriptors, and of them the sockets (Redis and API server
// connections, listeners).
func openFiles(pid int) (fds, sockets int, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		fds++
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			sockets++
		}
	}
	return fds, sockets, nil
}

// scrapeGauges reads unlabelled gauges from a Prometheus text endpoint, in one request.
// saveURL writes what a GET of url answers to path (a profile of the operator).
func saveURL(ctx context.Context, url, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	return os.WriteFile(path, body, 0o644)
}

func scrapeGauges(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", name, v, err)
		}
		out[name] = f
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("scrape %s: no %s", url, n)
		}
	}
	return out, nil
}

// infoField reads one integer field of a Redis INFO reply.
func infoField(info, field string) (int, error) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("redis INFO: no %s", field)
}

func writeSoakSamples(path string, samples []soakSample) error {
	var b strings.Builder
	b.WriteString("seconds\tended\trss_bytes\theap_inuse_bytes\tgoroutines\tfds\tsockets\tredis_clients\tlock_keys\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.at.Seconds(), s.ended, s.rss, s.heapInuse, s.goroutines,
			s.fds, s.sockets, s.redisClients, s.lockKeys)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write soak samples: %w", err)
	}
	log.Printf("soak samples: %s", path)
	return nil
}

// keysPerLock bounds the keys one plain lock has in Redis besides its fence: the lock, its
// metadata, its queue, its waiters' deadlines and their tickets (docs/design.md, The lock).
const keysPerLock = 5

// soakSeries names the sampled series the soak judges, and how to read each from a sample. A
// series with a bound is judged by it (the lock keys count the locks in use at that moment, which
// rise and fall with the queues); the others by their growth after the warm-up.
var soakSeries = []struct {
	name  string
	of    func(soakSample) float64
	bound func(locks int) float64
}{
	{"operator RSS (MiB)", func(s soakSample) float64 { return float64(s.rss) / (1 << 20) }, nil},
	{"operator Go heap in use (MiB)", func(s soakSample) float64 { return float64(s.heapInuse) / (1 << 20) }, nil},
	{"operator goroutines", func(s soakSample) float64 { return float64(s.goroutines) }, nil},
	{"operator open fds", func(s soakSample) float64 { return float64(s.fds) }, nil},
	{"operator sockets", func(s soakSample) float64 { return float64(s.sockets) }, nil},
	{"Redis connected clients", func(s soakSample) float64 { return float64(s.redisClients) }, nil},
	{"lock keys in Redis (not fences)", func(s soakSample) float64 { return float64(s.lockKeys) },
		func(locks int) float64 { return float64(keysPerLock * locks) }},
}

// soakReport prints, per series, its mean over the first and the last window of the samples after
// the warm-up, the growth between them, and its highest value. A series is flat if it grew by at
// most soakGrowthLimit, or, if it has a bound, if it never passed it. Whole windows, because a
// cache swept every window rises and falls within one: a quarter of the samples would catch it
// at a peak in one place and at a trough in another.
func soakReport(samples []soakSample, j soakJudge, locks int) string {
	var judged []soakSample
	for _, s := range samples {
		if j.warm(s) {
			judged = append(judged, s)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Soak: %d lives, %d samples, %d judged (after %.0f%% of the lives and %s), windows of %s\n\n",
		j.lives, len(samples), len(judged), 100*soakWarmup, 2*j.window, j.window)
	if len(judged) < 8 || judged[len(judged)-1].at-judged[0].at < 2*j.window {
		fmt.Fprintf(&b, "too short to judge: the samples after the warm-up must span two windows (%s); run more lives\n", 2*j.window)
		return b.String()
	}
	first := window(judged, judged[0].at, judged[0].at+j.window)
	last := window(judged, judged[len(judged)-1].at-j.window, judged[len(judged)-1].at)
	cells := [][]string{{"series", "first window (mean)", "last window (mean)", "growth", "max", "flat"}}
	for _, sr := range soakSeries {
		a, z := mean(first, sr.of), mean(last, sr.of)
		growth := 0.0
		if a > 0 {
			growth = (z - a) / a
		}
		most := 0.0
		for _, s := range judged {
			most = max(most, sr.of(s))
		}
		flat := "yes"
		switch {
		case sr.bound != nil && most > sr.bound(locks):
			flat = fmt.Sprintf("NO (over %.0f)", sr.bound(locks))
		case sr.bound != nil:
			flat = fmt.Sprintf("yes (at most %.0f)", sr.bound(locks))
		case growth > soakGrowthLimit:
			flat = "NO"
		}
		cells = append(cells, []string{sr.name, fmt.Sprintf("%.1f", a), fmt.Sprintf("%.1f", z),
			fmt.Sprintf("%+.1f%%", 100*growth), fmt.Sprintf("%.0f", most), flat})
	}
	b.WriteString(measure.Markdown(cells))
	return b.String()
}

// window is the samples taken in [from, to].
func window(ss []soakSample, from, to time.Duration) []soakSample {
	var out []soakSample
	for _, s := range ss {
		if s.at >= from && s.at <= to {
			out = append(out, s)
		}
	}
	return out
}

func mean(ss []soakSample, of func(soakSample) float64) float64 {
	sum := 0.0
	for _, s := range ss {
		sum += of(s)
	}
	return sum / float64(len(ss))
}
