//go:build scale

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Request costs (-request-costs N): what the control plane spends on each kind of request a
// guarded Job adds to a plain Job's, measured one kind at a time on the benchmark's cluster with
// the gate installed and no operator running. Each batch sends N requests of one kind, waits until
// the control plane is idle again (its reactions, such as the Job controller's status writes, are
// part of a request's cost), and divides the CPU kube-apiserver, etcd and kube-controller-manager
// used, less their idle rate, by N. The scenarios measure a guarded Job whole; this says what its
// extra time is made of, so the makespan's floor can be told from the operator's own overhead.

// costBatch is one kind of request: its name, and the request for the i-th object.
type costBatch struct {
	name string
	do   func(ctx context.Context, i int) error
}

// cpuOf is the CPU the control plane's processes used so far.
type cpuOf struct{ apiserver, etcd, kcm time.Duration }

func (c cpuOf) sub(o cpuOf) cpuOf {
	return cpuOf{c.apiserver - o.apiserver, c.etcd - o.etcd, c.kcm - o.kcm}
}

func (b *bench) controlPlaneCPU() (cpuOf, error) {
	var c cpuOf
	for name, dst := range map[string]*time.Duration{"kube-apiserver": &c.apiserver, "etcd": &c.etcd, "kube-controller-manager": &c.kcm} {
		pid, err := b.probes.cluster.PID(name)
		if err != nil {
			return c, err
		}
		if *dst, err = procCPU(pid); err != nil {
			return c, err
		}
	}
	return c, nil
}

// idleMeasure is how long the idle rate is measured.
const idleMeasure = 10 * time.Second

// idleWindow is how long the control plane must stay under idleRate of a core to count as idle;
// waiting out the window is the measurement of idleness, not a synchronisation.
const idleWindow = 2 * time.Second

// settle waits until the control plane is idle: kube-apiserver under twice its idle rate over
// idleWindow.
func (b *bench) settle(ctx context.Context, idle cpuOf) error {
	return poll(ctx, 5*time.Minute, 100*time.Millisecond, func() (bool, error) {
		before, err := b.controlPlaneCPU()
		if err != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(idleWindow):
		}
		after, err := b.controlPlaneCPU()
		if err != nil {
			return false, err
		}
		return after.sub(before).apiserver <= 2*idle.apiserver+10*time.Millisecond, nil
	})
}

// requestCosts runs the batches and prints one table.
func (b *bench) requestCosts(ctx context.Context, n int) error {
	ns := "scale-costs"
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	// The idle rate, once the cluster has settled after its start, subtracted from every batch.
	if err := b.settle(ctx, cpuOf{apiserver: 50 * time.Millisecond}); err != nil {
		return err
	}
	start, err := b.controlPlaneCPU()
	if err != nil {
		return err
	}
	began := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleMeasure): // the measurement itself
	}
	end, err := b.controlPlaneCPU()
	if err != nil {
		return err
	}
	idlePerSec := scale(end.sub(start), time.Second, time.Since(began))
	log.Printf("request costs: idle control plane %s", idlePerSec.String())

	job := func(prefix string, i int, labelled bool) *batchv1.Job {
		zero := int32(0)
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i), Namespace: ns},
			Spec:       batchv1.JobSpec{BackoffLimit: &zero, Template: podTemplate(time.Second)},
		}
		if labelled {
			j.Labels = map[string]string{batchv1alpha1.LabelGuardLock: fmt.Sprintf("cost-%05d", i)}
		} else {
			// Suspended as the gate would: the Job controller pays the same bookkeeping for both, and
			// no pod is created in either batch.
			j.Spec.Suspend = ptrTo(true)
		}
		return j
	}
	// patch sends one merge patch of a Job's annotations, its pod template's, and (unless keep) its
	// finalizers.
	patch := func(name string, annotations, template map[string]string, finalizers []string, keep bool) error {
		meta := map[string]any{"annotations": annotations}
		if !keep {
			meta["finalizers"] = finalizers // nil removes them
		}
		body := map[string]any{"metadata": meta}
		if template != nil {
			body["spec"] = map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": template}}}
		}
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		return b.k8s.Patch(ctx, j, client.RawPatch(types.MergePatchType, raw))
	}
	const holder = "scale/scale-costs/job:guarded/0123abcd"
	fence := func(i int) string { return fmt.Sprint(1_800_000_000_000_000 + i) }
	batches := []costBatch{
		{"POST job, suspended, no label (the baseline create)", func(ctx context.Context, i int) error {
			return b.k8s.Create(ctx, job("plain", i, false))
		}},
		{"POST job with the lock label (the gate: mutating + validating policies)", func(ctx context.Context, i int) error {
			return b.k8s.Create(ctx, job("guarded", i, true))
		}},
		{"PATCH job: the unsuspend write's fields, still suspended", func(_ context.Context, i int) error {
			return patch(fmt.Sprintf("guarded-%05d", i), map[string]string{
				batchv1alpha1.AnnotationGuard:        string(batchv1alpha1.GuardHeld),
				batchv1alpha1.AnnotationFencingToken: fence(i),
				batchv1alpha1.AnnotationHolder:       holder,
				batchv1alpha1.AnnotationGuardLockKey: "lockedjob:{scale-costs/cost}",
			}, map[string]string{
				batchv1alpha1.AnnotationFencingToken: fence(i),
				batchv1alpha1.AnnotationHolder:       holder,
				batchv1alpha1.AnnotationLock:         "cost",
			}, []string{batchv1alpha1.FinalizerReleaseLock}, false)
		}},
		{"PATCH job without the lock label: as many annotations, no finalizer (only the misplaced-label policy matches)", func(_ context.Context, i int) error {
			// Keys of the same size as the guard's, which the misplaced-label policy refuses on a Job
			// without the label.
			return patch(fmt.Sprintf("plain-%05d", i), map[string]string{
				"scale.example/guard":         string(batchv1alpha1.GuardHeld),
				"scale.example/fencing-token": fence(i),
				"scale.example/holder":        holder,
				"scale.example/lock-key":      "lockedjob:{scale-costs/cost}",
			}, map[string]string{
				"scale.example/fencing-token": fence(i),
				"scale.example/holder":        holder,
				"scale.example/lock":          "cost",
			}, nil, true)
		}},
		{"PATCH job: the release write (guard Released, finalizer removed)", func(_ context.Context, i int) error {
			return patch(fmt.Sprintf("guarded-%05d", i),
				map[string]string{batchv1alpha1.AnnotationGuard: string(batchv1alpha1.GuardReleased)}, nil, nil, false)
		}},
		{"POST event (events.k8s.io/v1) about a Job", func(ctx context.Context, i int) error {
			now := metav1.NewMicroTime(time.Now())
			return b.k8s.Create(ctx, &eventsv1.Event{
				ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("guarded-%05d.%d", i, now.UnixNano()), Namespace: ns},
				EventTime:           now,
				ReportingController: "batch.lockedjob.dev/guardedjob",
				ReportingInstance:   "scale-benchmark",
				Action:              "Acquire",
				Reason:              batchv1alpha1.ReasonAcquired,
				Regarding:           corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: ns, Name: fmt.Sprintf("guarded-%05d", i)},
				Note:                "Acquired lock cost with fencing token 1800000000000000; unsuspended",
				Type:                corev1.EventTypeNormal,
			})
		}},
		{"LIST pods of a Job by controller-uid (no pods)", func(ctx context.Context, i int) error {
			return b.k8s.List(ctx, &corev1.PodList{}, client.InNamespace(ns),
				client.MatchingLabels{batchv1.ControllerUidLabel: fmt.Sprintf("00000000-0000-0000-0000-%012d", i)})
		}},
	}
	var rows []string
	for _, batch := range batches {
		if err := b.settle(ctx, idlePerSec); err != nil {
			return fmt.Errorf("%s: %w", batch.name, err)
		}
		before, err := b.controlPlaneCPU()
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := parallel(ctx, n, createWorkers, batch.do); err != nil {
			return fmt.Errorf("%s: %w", batch.name, err)
		}
		sent := time.Since(t0)
		if err := b.settle(ctx, idlePerSec); err != nil {
			return fmt.Errorf("%s: %w", batch.name, err)
		}
		after, err := b.controlPlaneCPU()
		if err != nil {
			return err
		}
		took := time.Since(t0)
		used := after.sub(before).sub(scale(idlePerSec, took, time.Second))
		per := scale(used, 1, time.Duration(n))
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %.2f ms |", batch.name,
			ms(per.apiserver), ms(per.etcd), ms(per.kcm), float64(sent.Microseconds())/1000/float64(n)*createWorkers))
		log.Printf("request costs: %s: %s per request (sent in %s)", batch.name, per.String(), sent.Round(time.Millisecond))
	}
	fmt.Printf("\n## Control-plane CPU per request (%d of each, %d at once, idle rate subtracted)\n\n", n, createWorkers)
	fmt.Println("| request | kube-apiserver | etcd | kube-controller-manager | latency (mean) |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	fmt.Println(strings.Join(rows, "\n"))
	return nil
}

// scale returns c × num / den for every process.
func scale(c cpuOf, num, den time.Duration) cpuOf {
	f := func(d time.Duration) time.Duration { return time.Duration(float64(d) * float64(num) / float64(den)) }
	return cpuOf{f(c.apiserver), f(c.etcd), f(c.kcm)}
}

func (c cpuOf) String() string {
	return fmt.Sprintf("kube-apiserver %s, etcd %s, kube-controller-manager %s", ms(c.apiserver), ms(c.etcd), ms(c.kcm))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func ptrTo[T any](v T) *T { return &v }
