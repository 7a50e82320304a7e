package locks

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockedjob/lockedjob/internal/testutil/k8sassets"
)

// TestLoadIdentity runs LoadIdentity against a real kube-apiserver: where the token key comes
// from, when it is refused, and where the cluster ID comes from. One API server serves every case;
// each case has its own namespace.
func TestLoadIdentity(t *testing.T) {
	c := startTokenKeyAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	namespace := func(t *testing.T) string {
		t.Helper()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tokenkey-"}}
		NewWithT(t).Expect(c.Create(ctx, ns)).To(Succeed())
		return ns.Name
	}
	secretIn := func(ns string) (*corev1.Secret, error) {
		s := &corev1.Secret{}
		return s, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: TokenSecretName}, s)
	}

	t.Run("first start creates the Secret, later starts read it", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		first, err := LoadIdentity(ctx, c, IdentitySource{Namespace: ns})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(first.TokenKey).To(HaveLen(newTokenKeyBytes))
		secret, err := secretIn(ns)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(secret.Data[tokenSecretDataKey]).To(Equal(first.TokenKey))

		again, err := LoadIdentity(ctx, c, IdentitySource{Namespace: ns})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again.TokenKey).To(Equal(first.TokenKey), "a restart must derive the same tokens")
	})

	t.Run("a replica that loses the create race takes the winner's key", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		winner, err := LoadIdentity(ctx, c, IdentitySource{Namespace: ns})
		g.Expect(err).NotTo(HaveOccurred())
		// The loser's first Get ran before the winner's Create landed.
		missedOnce := false
		loser := interceptor.NewClient(c, interceptor.Funcs{
			Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Secret); ok && !missedOnce {
					missedOnce = true
					return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
				}
				return cl.Get(ctx, key, obj, opts...)
			},
		})
		got, err := LoadIdentity(ctx, loser, IdentitySource{Namespace: ns})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(missedOnce).To(BeTrue())
		g.Expect(got.TokenKey).To(Equal(winner.TokenKey))
	})

	t.Run("a Secret with a short key is refused, not replaced", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		g.Expect(c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: TokenSecretName},
			Data:       map[string][]byte{tokenSecretDataKey: []byte("short")},
		})).To(Succeed())
		_, err := LoadIdentity(ctx, c, IdentitySource{Namespace: ns})
		g.Expect(err).To(MatchError(ContainSubstring("token key Secret " + ns + "/" + TokenSecretName + ": data.key holds 5 bytes, needs at least 16")))
		secret, err := secretIn(ns)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(secret.Data[tokenSecretDataKey]).To(Equal([]byte("short")))
	})

	t.Run("a key file is used instead of the Secret", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		key := bytes.Repeat([]byte("k"), minTokenKeyBytes)
		id, err := LoadIdentity(ctx, c, IdentitySource{Namespace: ns, TokenKeyFile: writeKeyFile(t, string(key)+"\n")})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(id.TokenKey).To(Equal(key), "the trailing line end is not part of the key")
		_, err = secretIn(ns)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Secret beside a key file: get = %v", err)
	})

	t.Run("a short key file is refused with its size", func(t *testing.T) {
		g := NewWithT(t)
		path := writeKeyFile(t, "short\n")
		_, err := LoadIdentity(ctx, c, IdentitySource{ClusterID: "c", TokenKeyFile: path})
		g.Expect(err).To(MatchError("token key file " + path + " holds 5 bytes, needs at least 16"))
		g.Expect(err.Error()).NotTo(ContainSubstring("<nil>"))
	})

	t.Run("a missing key file is refused with the reason", func(t *testing.T) {
		g := NewWithT(t)
		_, err := LoadIdentity(ctx, c, IdentitySource{ClusterID: "c", TokenKeyFile: filepath.Join(t.TempDir(), "absent")})
		g.Expect(err).To(MatchError(fs.ErrNotExist))
	})

	t.Run("without a namespace or a key file nothing is created", func(t *testing.T) {
		g := NewWithT(t)
		_, err := LoadIdentity(ctx, c, IdentitySource{})
		g.Expect(err).To(MatchError(ContainSubstring("set --namespace (or POD_NAMESPACE)")))
		g.Expect(err.Error()).To(ContainSubstring("--token-key-file"))
	})

	t.Run("the cluster ID is the configured one, else kube-system's UID", func(t *testing.T) {
		g := NewWithT(t)
		path := writeKeyFile(t, strings.Repeat("k", minTokenKeyBytes))
		id, err := LoadIdentity(ctx, c, IdentitySource{ClusterID: "east", TokenKeyFile: path})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(id.ClusterID).To(Equal("east"))

		// The API server creates kube-system shortly after it starts serving.
		kubeSystem := &corev1.Namespace{}
		g.Eventually(func() error {
			return c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, kubeSystem)
		}).WithTimeout(20 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		id, err = LoadIdentity(ctx, c, IdentitySource{TokenKeyFile: path})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(id.ClusterID).To(Equal(string(kubeSystem.UID)[:8]))
	})
}

// startTokenKeyAPIServer starts a kube-apiserver of its own, so the identity tests run without
// the controller suite, and returns an admin client that reads from it directly.
func startTokenKeyAPIServer(t *testing.T) client.WithWatch {
	t.Helper()
	assets, err := k8sassets.Dir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeKeyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token-key")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
