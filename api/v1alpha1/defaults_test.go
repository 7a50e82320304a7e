package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestCRDDefaultTTLIsDefaultLockTTL: the API server's default for spec.lock.ttl and the operator's
// fallback for objects stored before that default are one duration, or a LockedJob's lease would
// depend on when it was created.
func TestCRDDefaultTTLIsDefaultLockTTL(t *testing.T) {
	ttl := crdLockSchema(t).Properties["ttl"]
	if ttl.Default == nil {
		t.Fatal("spec.lock.ttl has no default in the CRD")
	}
	var s string
	if err := json.Unmarshal(ttl.Default.Raw, &s); err != nil {
		t.Fatalf("spec.lock.ttl default %s is not a string: %v", ttl.Default.Raw, err)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("spec.lock.ttl default %q: %v", s, err)
	}
	if d != DefaultLockTTL {
		t.Fatalf("spec.lock.ttl defaults to %v in the CRD and to DefaultLockTTL %v in Go", d, DefaultLockTTL)
	}
}

// TestCRDDefaultLockLostPolicy: as for the ttl, the CRD's default for spec.lock.onLockLost and the
// operator's fallback are one policy.
func TestCRDDefaultLockLostPolicy(t *testing.T) {
	def := crdLockSchema(t).Properties["onLockLost"].Default
	if def == nil {
		t.Fatal("spec.lock.onLockLost has no default in the CRD")
	}
	var p LockLostPolicy
	if err := json.Unmarshal(def.Raw, &p); err != nil {
		t.Fatalf("spec.lock.onLockLost default %s: %v", def.Raw, err)
	}
	if p != DefaultLockLostPolicy {
		t.Fatalf("spec.lock.onLockLost defaults to %s in the CRD and to DefaultLockLostPolicy %s in Go", p, DefaultLockLostPolicy)
	}
}

// crdLockSchema is the schema of spec.lock in the generated CRD.
func crdLockSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "batch.lockedjob.dev_lockedjobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["lock"]
}
