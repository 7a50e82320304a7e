package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// testSchemeForUnit is a scheme for plain unit tests, which run without the envtest suite.
func testSchemeForUnit(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
