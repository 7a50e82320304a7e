package guardgate

import (
	"encoding/json"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// apply applies ops to obj as the API server applies a webhook's patch, into out.
func apply(t *testing.T, obj any, ops []jsonpatch.Operation, out any) {
	t.Helper()
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatchapply.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = patch.Apply(doc); err != nil {
		t.Fatalf("apply %s: %v", raw, err)
	}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
}

func env(pairs ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func withLockEnv(own ...corev1.EnvVar) []corev1.EnvVar { return append(own, LockEnv()...) }

func TestJobPatch(t *testing.T) {
	labels := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	job := func(l map[string]string, init, containers [][]corev1.EnvVar) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Labels: l}}
		for i, e := range init {
			j.Spec.Template.Spec.InitContainers = append(j.Spec.Template.Spec.InitContainers, corev1.Container{Name: "init" + string(rune('a'+i)), Env: e})
		}
		for i, e := range containers {
			j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, corev1.Container{Name: "c" + string(rune('a'+i)), Env: e})
		}
		return j
	}
	lock := labels(batchv1alpha1.LabelGuardLock, "db")
	for name, tc := range map[string]struct {
		job         *batchv1.Job
		wantGuarded bool
		wantInit    [][]corev1.EnvVar
		wantEnv     [][]corev1.EnvVar
	}{
		"no lock label": {
			job:     job(labels("team", "a"), nil, [][]corev1.EnvVar{nil}),
			wantEnv: [][]corev1.EnvVar{nil},
		},
		"a LockedJob's Job": {
			job:     job(labels(batchv1alpha1.LabelGuardLock, "db", batchv1alpha1.LabelLockedJob, "nightly"), nil, [][]corev1.EnvVar{nil}),
			wantEnv: [][]corev1.EnvVar{nil},
		},
		"an empty lock name is still guarded (the validating policy refuses it)": {
			job:         job(labels(batchv1alpha1.LabelGuardLock, ""), nil, [][]corev1.EnvVar{nil}),
			wantGuarded: true,
			wantEnv:     [][]corev1.EnvVar{LockEnv()},
		},
		"containers with and without env, init containers too": {
			job:         job(lock, [][]corev1.EnvVar{nil, env("INIT", "1")}, [][]corev1.EnvVar{nil, env("SIDE", "2")}),
			wantGuarded: true,
			wantInit:    [][]corev1.EnvVar{LockEnv(), withLockEnv(env("INIT", "1")...)},
			wantEnv:     [][]corev1.EnvVar{LockEnv(), withLockEnv(env("SIDE", "2")...)},
		},
		"a container's own entries of the four names are dropped, every one": {
			job: job(lock, nil, [][]corev1.EnvVar{env("A", "1", batchv1alpha1.EnvFencingToken, "12345", "B", "2",
				batchv1alpha1.EnvSlot, "9", batchv1alpha1.EnvFencingToken, "7")}),
			wantGuarded: true,
			wantEnv:     [][]corev1.EnvVar{withLockEnv(env("A", "1", "B", "2")...)},
		},
		"only the four names, repeated: the list gets shorter": {
			job: job(lock, nil, [][]corev1.EnvVar{env(batchv1alpha1.EnvFencingToken, "1", batchv1alpha1.EnvLock, "l",
				batchv1alpha1.EnvHolder, "h", batchv1alpha1.EnvSlot, "0", batchv1alpha1.EnvSlot, "1")}),
			wantGuarded: true,
			wantEnv:     [][]corev1.EnvVar{LockEnv()},
		},
	} {
		t.Run(name, func(t *testing.T) {
			ops := JobPatch(tc.job)
			if got := GuardsJob(tc.job); got != tc.wantGuarded {
				t.Fatalf("GuardsJob = %v, want %v", got, tc.wantGuarded)
			}
			if !tc.wantGuarded {
				if ops != nil {
					t.Fatalf("JobPatch = %v, want none", ops)
				}
				return
			}
			got := &batchv1.Job{}
			apply(t, tc.job, ops, got)
			if !ptr.Deref(got.Spec.Suspend, false) {
				t.Error("spec.suspend is not true")
			}
			var gotInit, gotEnv [][]corev1.EnvVar
			for _, c := range got.Spec.Template.Spec.InitContainers {
				gotInit = append(gotInit, c.Env)
			}
			for _, c := range got.Spec.Template.Spec.Containers {
				gotEnv = append(gotEnv, c.Env)
			}
			if d := cmp.Diff(tc.wantInit, gotInit); d != "" {
				t.Errorf("init containers' env (-want,+got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantEnv, gotEnv); d != "" {
				t.Errorf("containers' env (-want,+got):\n%s", d)
			}
		})
	}
}

func TestPodPatch(t *testing.T) {
	lockVar := func(i int) corev1.EnvVar { return LockEnv()[i] }
	owner := func(apiVersion, kind string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "u", Controller: ptr.To(controller)}
	}
	pod := func(opts ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{batchv1alpha1.LabelGuardLock: "db"}},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init"}},
				Containers:     []corev1.Container{{Name: "main"}, {Name: "side", Env: env("SIDE", "2")}},
			},
		}
		for _, o := range opts {
			o(p)
		}
		return p
	}
	gates := func(names ...string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			for _, n := range names {
				p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: n})
			}
		}
	}
	owned := func(refs ...metav1.OwnerReference) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.OwnerReferences = refs }
	}
	sideEnv := func(e ...corev1.EnvVar) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[1].Env = e }
	}
	const ours = batchv1alpha1.SchedulingGateGuard
	for name, tc := range map[string]struct {
		pod       *corev1.Pod
		wantGates []string // nil: the gate leaves the Pod alone
		wantSide  []corev1.EnvVar
	}{
		"no owner":                             {pod: pod(), wantGates: []string{ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"no lock label":                        {pod: pod(func(p *corev1.Pod) { p.Labels = map[string]string{"team": "a"} })},
		"a Job's pod":                          {pod: pod(owned(owner("batch/v1", "Job", true)))},
		"a Job's pod that a Workflow owns too": {pod: pod(owned(owner("argoproj.io/v1alpha1", "Workflow", false), owner("batch/v1", "Job", true)))},
		"a Job that is no controller": {pod: pod(owned(owner("batch/v1", "Job", false))),
			wantGates: []string{ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"a Job of another group": {pod: pod(owned(owner("example.com/v1", "Job", true))),
			wantGates: []string{ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"a Workflow's pod": {pod: pod(owned(owner("argoproj.io/v1alpha1", "Workflow", true))),
			wantGates: []string{ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"bound to a node (the validating policy refuses it)": {pod: pod(func(p *corev1.Pod) { p.Spec.NodeName = "n" })},
		"another gate stays first": {pod: pod(gates("example.com/quota")),
			wantGates: []string{"example.com/quota", ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"ours already: one of it": {pod: pod(gates(ours)),
			wantGates: []string{ours}, wantSide: withLockEnv(env("SIDE", "2")...)},
		"a container's own token is replaced where it stands": {
			pod:       pod(sideEnv(env("A", "1", batchv1alpha1.EnvFencingToken, "12345", "B", "2")...)),
			wantGates: []string{ours},
			wantSide:  append(append(env("A", "1"), lockVar(0)), append(env("B", "2"), lockVar(1), lockVar(2), lockVar(3))...),
		},
		"a repeated name: the last entry is replaced, the first stays": {
			pod:       pod(sideEnv(env(batchv1alpha1.EnvSlot, "1", "A", "1", batchv1alpha1.EnvSlot, "2")...)),
			wantGates: []string{ours},
			wantSide:  append(env(batchv1alpha1.EnvSlot, "1", "A", "1"), lockVar(3), lockVar(0), lockVar(1), lockVar(2)),
		},
	} {
		t.Run(name, func(t *testing.T) {
			ops := PodPatch(tc.pod)
			if tc.wantGates == nil {
				if ops != nil || GuardsPod(tc.pod) {
					t.Fatalf("PodPatch = %v, want none", ops)
				}
				return
			}
			got := &corev1.Pod{}
			apply(t, tc.pod, ops, got)
			var gotGates []string
			for _, g := range got.Spec.SchedulingGates {
				gotGates = append(gotGates, g.Name)
			}
			if d := cmp.Diff(tc.wantGates, gotGates); d != "" {
				t.Errorf("scheduling gates (-want,+got):\n%s", d)
			}
			if d := cmp.Diff(LockEnv(), got.Spec.InitContainers[0].Env); d != "" {
				t.Errorf("init container's env (-want,+got):\n%s", d)
			}
			if d := cmp.Diff(LockEnv(), got.Spec.Containers[0].Env); d != "" {
				t.Errorf("first container's env (-want,+got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantSide, got.Spec.Containers[1].Env); d != "" {
				t.Errorf("second container's env (-want,+got):\n%s", d)
			}
		})
	}
}
