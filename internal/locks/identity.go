package locks

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// Identity derives, for a workload that asks for a lock (a Claimant), the lock's name in Redis,
// the holder name others see and the secret token that proves ownership. Everything is a pure
// function of the object and the operator's configuration, so an operator that restarted derives the same token and re-adopts the
// locks it held without having stored the token anywhere.
type Identity struct {
	// ClusterID names this cluster in holder names and tokens, so clusters that share one Redis
	// tell their holders apart.
	ClusterID string
	// TokenKey is the HMAC key for tokens. Anyone who can read a LockedJob knows its UID; only the
	// operator knows this key, so only it can act as the holder.
	TokenKey []byte
}

// LockKey is the lock's name handed to the lock library. A namespace-scoped key holds the cluster
// ID and the namespace, so neither tenants nor clusters that share one Redis block each other;
// Cluster scope is the one way to share a lock, across namespaces and clusters.
func (id Identity) LockKey(c Claimant) string {
	return id.KeyOf(c.Lock.Scope, c.Namespace, c.Lock.Name)
}

// KeyOf is the lock library's name of the lock called name, of the given scope, used from
// namespace (ignored for Cluster scope).
func (id Identity) KeyOf(scope batchv1alpha1.LockScope, namespace, name string) string {
	if scope == batchv1alpha1.LockScopeCluster {
		return "cluster/" + name
	}
	return "ns/" + id.ClusterID + "/" + namespace + "/" + name
}

// Parse inverts KeyOf for this cluster's keys: the scope, namespace ("" for Cluster scope) and lock
// name of key, and false for a key KeyOf does not make here (another cluster's namespaced key, a
// legacy key, anything else).
func (id Identity) Parse(key string) (scope batchv1alpha1.LockScope, namespace, name string, ok bool) {
	if name, ok := strings.CutPrefix(key, "cluster/"); ok && name != "" && !strings.Contains(name, "/") {
		return batchv1alpha1.LockScopeCluster, "", name, true
	}
	rest, ok := strings.CutPrefix(key, "ns/"+id.ClusterID+"/")
	if !ok {
		return "", "", "", false
	}
	namespace, name, ok = strings.Cut(rest, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", "", false
	}
	return batchv1alpha1.LockScopeNamespace, namespace, name, true
}

// LegacyLockKey is the key operators before the per-cluster namespace keys used for the same lock,
// and false for Cluster scope, whose key did not change. A LockedJob that acquired under it keeps
// it (status.lockKey) until it releases; until none is left, a fresh acquisition under LockKey
// must treat a holder of the legacy key as a holder of the lock (see docs/design.md, Migration).
func (id Identity) LegacyLockKey(c Claimant) (string, bool) {
	if c.Lock.Scope == batchv1alpha1.LockScopeCluster {
		return "", false
	}
	return "ns/" + c.Namespace + "/" + c.Lock.Name, true
}

// Holder is the name under which the claimant holds or waits for the lock (its format per kind is
// in Claimant's comment). The UID prefix tells a recreated object of the same name from its
// predecessor.
func (id Identity) Holder(c Claimant) string {
	uid := string(c.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return fmt.Sprintf("%s/%s/%s/%s", id.ClusterID, c.Namespace, c.ObjectName(), uid)
}

// HolderName is a holder name taken apart (ParseHolder).
type HolderName struct {
	ClusterID string
	Kind      Kind
	Namespace string
	Name      string // the object's name, without its kind's prefix
	UIDPrefix string
}

// ParseHolder inverts Holder for a holder of any cluster and kind; false for a name Holder does not
// make (among them an object name with a prefix no kind has).
func ParseHolder(holder string) (HolderName, bool) {
	parts := strings.SplitN(holder, "/", 4)
	if len(parts) != 4 {
		return HolderName{}, false
	}
	h := HolderName{ClusterID: parts[0], Kind: KindLockedJob, Namespace: parts[1], Name: parts[2], UIDPrefix: parts[3]}
	if prefix, name, ok := strings.Cut(parts[2], ":"); ok {
		h.Kind, h.Name = kindOfPrefix(prefix+":"), name
		if h.Kind == "" {
			return HolderName{}, false
		}
	}
	return h, true
}

// kindOfPrefix is the kind whose holder names carry prefix, or "".
func kindOfPrefix(prefix string) Kind {
	for kind, p := range holderPrefix {
		if p != "" && p == prefix {
			return kind
		}
	}
	return ""
}

// Token is the claimant's lock token: HMAC-SHA256 over cluster and UID. Never log it.
func (id Identity) Token(c Claimant) string {
	mac := hmac.New(sha256.New, id.TokenKey)
	mac.Write([]byte(id.ClusterID + "\x00" + string(c.UID)))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// QueueScore orders waiters: higher priority first, then older first. Priorities lie in
// [-1000, 1000] and creation times have second precision, so the score stays an exact float64.
func (id Identity) QueueScore(c Claimant) float64 {
	return float64(1000-int64(c.Lock.Priority))*1e10 + float64(c.Created.Unix())
}

// QueueCompare orders waiters as the lock library's queue serves them: by QueueScore, a sorted set
// in Redis, which breaks equal scores by the member, the holder name cluster/namespace/name/uid;
// within one cluster that is namespace, then name (with its kind's prefix), then UID, which is
// what breaks ties here. It is the order for readers without an Identity (the plugin); the
// operator hands the score itself to the lock library.
func QueueCompare(a, b Claimant) int {
	var id Identity // the score does not depend on the cluster or the key
	return cmp.Or(
		cmp.Compare(id.QueueScore(a), id.QueueScore(b)),
		strings.Compare(a.Namespace+"/"+a.ObjectName()+"/"+string(a.UID), b.Namespace+"/"+b.ObjectName()+"/"+string(b.UID)),
	)
}
