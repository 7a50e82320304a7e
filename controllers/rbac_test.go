package controllers

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The operator's roles, as config/rbac deploys them, asked of the real RBAC authorizer: the
// operator reads only its own token-key Secret, creates Secrets only in its own namespace and has
// no rights on ConfigMaps (issue 9 item 24).
var _ = Describe("Operator RBAC", Ordered, ContinueOnFailure, func() {
	const (
		operatorNS = "lockedjob-system"
		saName     = "rbac-test-operator"
		prefix     = "rbac-test-"
	)
	user := "system:serviceaccount:" + operatorNS + ":" + saName
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: operatorNS}

	// install creates every ClusterRole and Role of a config/rbac file under a test name and binds
	// it to the test service account; Roles without a namespace go to the operator's namespace, as
	// kustomize puts them there.
	install := func(file string) {
		GinkgoHelper()
		b, err := os.ReadFile(filepath.Join("..", "config", "rbac", file))
		Expect(err).NotTo(HaveOccurred())
		for doc := range strings.SplitSeq(string(b), "\n---\n") {
			var meta metav1.TypeMeta
			Expect(yaml.Unmarshal([]byte(doc), &meta)).To(Succeed())
			switch meta.Kind {
			case "ClusterRole":
				role := &rbacv1.ClusterRole{}
				Expect(yaml.Unmarshal([]byte(doc), role)).To(Succeed())
				role.Name = prefix + file + "-" + role.Name
				Expect(k8sClient.Create(ctx, role)).To(Succeed())
				Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: role.Name},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
					Subjects:   []rbacv1.Subject{subject},
				})).To(Succeed())
			case "Role":
				role := &rbacv1.Role{}
				Expect(yaml.Unmarshal([]byte(doc), role)).To(Succeed())
				role.Name = prefix + file + "-" + role.Name
				if role.Namespace == "" {
					role.Namespace = operatorNS
				}
				Expect(k8sClient.Create(ctx, role)).To(Succeed())
				Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
					Subjects:   []rbacv1.Subject{subject},
				})).To(Succeed())
			default:
				Fail("unexpected kind " + meta.Kind + " in " + file)
			}
		}
	}

	review := func(attrs authorizationv1.ResourceAttributes) *authorizationv1.SubjectAccessReview {
		GinkgoHelper()
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNS, "system:authenticated"},
			ResourceAttributes: &attrs,
		}}
		Expect(k8sClient.Create(ctx, r)).To(Succeed())
		return r
	}
	tokenSecret := authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "get", Resource: "secrets", Name: "lockedjob-token-key"}
	createJobs := authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: "batch", Resource: "jobs"}
	updateLease := authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}

	BeforeAll(func() {
		err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNS}})
		Expect(err == nil || apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
		install("role.yaml")
		install("leader_election_role.yaml")
		// The authorizer learns of bindings through informers: once one right of each binding
		// counts, every answer below is final (a denial is not just a binding not yet seen).
		for _, attrs := range []authorizationv1.ResourceAttributes{tokenSecret, createJobs, updateLease} {
			Eventually(func() bool { return review(attrs).Status.Allowed }).Should(BeTrue(), "%+v never allowed", attrs)
		}
	})

	DescribeTable("the authorizer's answer",
		func(attrs authorizationv1.ResourceAttributes, allowed bool) {
			r := review(attrs)
			Expect(r.Status.Allowed).To(Equal(allowed), "%s %s/%s %q in %q: %s", attrs.Verb, attrs.Group, attrs.Resource, attrs.Name, attrs.Namespace, r.Status.Reason)
		},
		Entry("get the token-key Secret", tokenSecret, true),
		Entry("create a Secret in the operator's namespace", authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "create", Resource: "secrets"}, true),
		Entry("get another Secret", authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "get", Resource: "secrets", Name: "redis-password"}, false),
		Entry("list Secrets", authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "list", Resource: "secrets"}, false),
		Entry("get a Secret elsewhere", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets", Name: "lockedjob-token-key"}, false),
		Entry("create a Secret elsewhere", authorizationv1.ResourceAttributes{Namespace: "default", Verb: "create", Resource: "secrets"}, false),
		Entry("get a ConfigMap", authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "get", Resource: "configmaps"}, false),
		Entry("update a ConfigMap", authorizationv1.ResourceAttributes{Namespace: operatorNS, Verb: "update", Resource: "configmaps"}, false),
		Entry("update the leader-election Lease", updateLease, true),
		Entry("create Jobs", createJobs, true),
		// The Kueue AdmissionCheck: it reads Workloads and AdmissionChecks and writes only their status.
		Entry("watch Kueue Workloads", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "watch", Group: "kueue.x-k8s.io", Resource: "workloads"}, true),
		Entry("patch a Workload's status", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "patch", Group: "kueue.x-k8s.io", Resource: "workloads", Subresource: "status"}, true),
		Entry("patch a Workload", authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "patch", Group: "kueue.x-k8s.io", Resource: "workloads"}, false),
		Entry("patch an AdmissionCheck's status", authorizationv1.ResourceAttributes{Verb: "patch", Group: "kueue.x-k8s.io", Resource: "admissionchecks", Subresource: "status"}, true),
		Entry("update an AdmissionCheck", authorizationv1.ResourceAttributes{Verb: "update", Group: "kueue.x-k8s.io", Resource: "admissionchecks"}, false),
	)
})
