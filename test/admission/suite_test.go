// Package admission_test checks the admission gate of guarded Jobs (config/guard) against a real
// kube-apiserver (envtest, the binaries `make k8s-bin` builds), as `kustomize build` ships it.
package admission_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	namespace = "default"
	// timeout bounds the wait for the policies to be in force: the API server compiles them and
	// starts using them a moment after they are created.
	timeout  = 30 * time.Second
	interval = 100 * time.Millisecond
)

var (
	k8s client.Client
	// policies are the objects of config/guard, as kustomize built them.
	policies []*unstructured.Unstructured
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	assets, err := k8sassets.Dir()
	if err != nil {
		return 0, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme}); err != nil {
		return 0, err
	}
	if policies, err = build(); err != nil {
		return 0, err
	}
	ctx := context.Background()
	for _, o := range policies {
		if err := k8s.Create(ctx, o.DeepCopy()); err != nil {
			return 0, fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := awaitPolicies(ctx); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// build runs the project's pinned kustomize over config/guard, as the Makefile resolves it.
func build() ([]*unstructured.Unstructured, error) {
	root, err := utils.ProjectDir()
	if err != nil {
		return nil, err
	}
	kustomize := filepath.Join(root, "bin", "kustomize")
	if k := os.Getenv("KUSTOMIZE"); k != "" {
		kustomize = k
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kustomize, "build", filepath.Join(root, "config", "guard"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s (run `make kustomize` first; make test-unit does): %w\n%s", cmd, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode kustomize build config/guard: %w", err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decode %s: %w", raw, err)
		}
		objs = append(objs, o)
	}
}

// awaitPolicies waits until both policies act on a probe Job, sent as a dry run so it leaves
// nothing behind: the mutating one suspends it, the validating one refuses a bad annotation.
func awaitPolicies(ctx context.Context) error {
	var failure string
	g := NewGomega(func(message string, _ ...int) { failure = message })
	ok := g.Eventually(func(g Gomega) {
		probe := guardedJob()
		g.Expect(k8s.Create(ctx, probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Spec.Suspend).To(HaveValue(BeTrue()), "the mutating policy is not in force")
		bad := guardedJob(annotate(batchv1alpha1.AnnotationGuardScope, "Everywhere"))
		g.Expect(k8s.Create(ctx, bad, client.DryRunAll)).To(MatchError(ContainSubstring(batchv1alpha1.AnnotationGuardScope)),
			"the validating policy is not in force")
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	if !ok {
		return fmt.Errorf("the policies of config/guard are not in force after %v: %s", timeout, failure)
	}
	return nil
}

// guardedJob is a Job labelled with a lock: two init containers and two containers, the first of
// each with no env and the second with an env list of its own.
func guardedJob(opts ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "guarded-",
			Namespace:    namespace,
			Labels:       map[string]string{batchv1alpha1.LabelGuardLock: "db-migrate"},
		},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "init-bare", Image: "busybox"},
				{Name: "init-env", Image: "busybox", Env: []corev1.EnvVar{{Name: "INIT", Value: "1"}}},
			},
			Containers: []corev1.Container{
				{Name: "main", Image: "busybox"},
				{Name: "side", Image: "busybox", Env: []corev1.EnvVar{
					{Name: "SIDE", Value: "2"},
					// A token copied into the template must not shadow the fence.
					{Name: batchv1alpha1.EnvFencingToken, Value: "12345"},
					{Name: "AFTER", Value: "3"},
				}},
			},
		}}},
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func label(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Labels[k] = v }
}

// unguard takes the lock label off.
func unguard(j *batchv1.Job) { delete(j.Labels, batchv1alpha1.LabelGuardLock) }

func annotate(k, v string) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		if j.Annotations == nil {
			j.Annotations = map[string]string{}
		}
		j.Annotations[k] = v
	}
}

// policy is the object of config/guard of that kind.
func policy(t *testing.T, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range policies {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("config/guard has no %s; it has %d objects", kind, len(policies))
	return nil
}

// expressions are every CEL expression of a policy, joined.
func expressions(t *testing.T, o *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(o.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Variables   []struct{ Expression string } `json:"variables"`
		Validations []struct{ Expression string } `json:"validations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, v := range spec.Variables {
		all = append(all, v.Expression)
	}
	for _, v := range spec.Validations {
		all = append(all, v.Expression)
	}
	return strings.Join(all, "\n")
}
