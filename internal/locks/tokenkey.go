package locks

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockedjob/lockedjob/internal/secretfile"
)

// The operator's rights on its token-key Secret. get is limited to that one name; a create cannot
// be limited by name (the name is not known to the authorizer before the object exists), so it is
// limited to the operator's namespace instead. No list or watch: the Secret is read once at start.
//
// +kubebuilder:rbac:groups="",namespace=lockedjob-system,resources=secrets,verbs=get,resourceNames=lockedjob-token-key
// +kubebuilder:rbac:groups="",namespace=lockedjob-system,resources=secrets,verbs=create
//
// The default cluster ID is the kube-system namespace's UID: get on that one namespace only.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get,resourceNames=kube-system

const (
	// TokenSecretName is the Secret, in the operator's namespace, that holds the token key under
	// data.key. The RBAC markers above name it too.
	TokenSecretName = "lockedjob-token-key"
	// tokenSecretDataKey is the Secret's data key that holds the token key.
	tokenSecretDataKey = "key"
	// minTokenKeyBytes refuses a key short enough to guess: whoever knows the key can compute the
	// token of any LockedJob and release or renew its lock.
	minTokenKeyBytes = 16
	// newTokenKeyBytes is the size of a key the operator creates itself: as long as an HMAC-SHA256
	// output, beyond which a longer key adds no strength.
	newTokenKeyBytes = 32
)

// IdentitySource says where the operator's Identity comes from (the flags --cluster-id,
// --token-key-file and --namespace).
type IdentitySource struct {
	// ClusterID names this cluster; empty derives it from the UID of the kube-system namespace.
	ClusterID string
	// TokenKeyFile holds the token key; empty reads (or on first start creates) the Secret
	// TokenSecretName in Namespace.
	TokenKeyFile string
	// Namespace is the operator's namespace, as it was told (never the kubeconfig's).
	Namespace string
}

// LoadIdentity derives the cluster ID and loads the token key, creating its Secret on first start.
// c must read from the API server directly: the manager's cache has not started yet.
//
// The Secret is read or created only in a namespace the operator was told, never in the
// kubeconfig's: that one is whatever the last context switch left, and a key made there would be
// a second key, unguarded, with which no held lock can be re-adopted.
func LoadIdentity(ctx context.Context, c client.Client, src IdentitySource) (Identity, error) {
	if src.TokenKeyFile == "" && src.Namespace == "" {
		return Identity{}, fmt.Errorf("token key Secret %s: set --namespace (or POD_NAMESPACE) to the operator's namespace, or use --token-key-file; the kubeconfig's namespace is not used for it", TokenSecretName)
	}
	clusterID, err := clusterIDOf(ctx, c, src.ClusterID)
	if err != nil {
		return Identity{}, err
	}
	key, err := loadTokenKey(ctx, c, src)
	if err != nil {
		return Identity{}, err
	}
	return Identity{ClusterID: clusterID, TokenKey: key}, nil
}

// clusterIDOf is the configured cluster ID or else the first 8 characters of the kube-system
// namespace's UID, which every cluster has and which stays the same for its life.
func clusterIDOf(ctx context.Context, c client.Client, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("derive cluster ID from the kube-system namespace (or set --cluster-id): %w", err)
	}
	return string(ns.UID)[:8], nil
}

func loadTokenKey(ctx context.Context, c client.Client, src IdentitySource) ([]byte, error) {
	if src.TokenKeyFile == "" {
		return ensureTokenSecret(ctx, c, src.Namespace)
	}
	key, err := secretfile.Read(src.TokenKeyFile)
	if err != nil {
		return nil, fmt.Errorf("token key file: %w", err)
	}
	if len(key) < minTokenKeyBytes {
		return nil, fmt.Errorf("token key file %s holds %d bytes, needs at least %d", src.TokenKeyFile, len(key), minTokenKeyBytes)
	}
	return []byte(key), nil
}

// ensureTokenSecret reads the token key from its Secret, creating it with random bytes on first
// start. Two replicas racing to create it agree on whichever write won.
func ensureTokenSecret(ctx context.Context, c client.Client, namespace string) ([]byte, error) {
	key, err := getOrCreateTokenSecret(ctx, c, namespace)
	if err != nil {
		return nil, fmt.Errorf("token key Secret %s/%s: %w", namespace, TokenSecretName, err)
	}
	return key, nil
}

func getOrCreateTokenSecret(ctx context.Context, c client.Client, namespace string) ([]byte, error) {
	secret := &corev1.Secret{}
	name := client.ObjectKey{Namespace: namespace, Name: TokenSecretName}
	err := c.Get(ctx, name, secret)
	if apierrors.IsNotFound(err) {
		secret, err = newTokenSecret(namespace)
		if err != nil {
			return nil, err
		}
		err = c.Create(ctx, secret)
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, name, secret)
		}
	}
	if err != nil {
		return nil, err
	}
	key := secret.Data[tokenSecretDataKey]
	if len(key) < minTokenKeyBytes {
		return nil, fmt.Errorf("data.%s holds %d bytes, needs at least %d", tokenSecretDataKey, len(key), minTokenKeyBytes)
	}
	return key, nil
}

func newTokenSecret(namespace string) (*corev1.Secret, error) {
	key := make([]byte, newTokenKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate token key: %w", err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TokenSecretName, Namespace: namespace},
		Data:       map[string][]byte{tokenSecretDataKey: key},
	}, nil
}
