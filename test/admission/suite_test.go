// Package admission_test checks the admission gate of guarded Jobs (config/guard) against a real
// kube-apiserver (envtest, the binaries `make k8s-bin` builds), as `kustomize build` ships it
// (testkit.GuardPolicies, which the envtest and fault suites install too).
package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
	"github.com/lockedjob/lockedjob/test/testkit"
	"github.com/lockedjob/lockedjob/test/utils"
)

const (
	namespace = "default"
	// timeout bounds the wait for the policies to be in force (testkit.InstallGuard).
	timeout = 30 * time.Second
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
	root, err := utils.ProjectDir()
	if err != nil {
		return 0, err
	}
	if policies, err = testkit.GuardPolicies(root); err != nil {
		return 0, err
	}
	if err := testkit.InstallGuard(context.Background(), k8s, policies, namespace, timeout); err != nil {
		return 0, err
	}
	return m.Run(), nil
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

// policy is the object of config/guard of that name. By name, not by kind: config/guard has more
// than one policy of each kind, and kustomize orders them by name.
func policy(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range policies {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("config/guard has no object %s; it has %d objects", name, len(policies))
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
