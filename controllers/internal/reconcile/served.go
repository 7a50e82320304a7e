package reconcile

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// UnservedKind returns the first of kinds (of batch.lockedjob.dev/v1alpha1) that the API server does
// not serve, or "". A controller of an optional kind (the per-lock view, schedules) is left out
// while its CRD is missing: an operator upgraded before its CRDs must keep running LockedJobs, and a
// watch of a kind nobody serves would stop the whole manager when its cache never syncs.
func UnservedKind(mgr ctrl.Manager, kinds ...string) string {
	return UnservedKindOf(mgr, batchv1alpha1.SchemeGroupVersion, kinds...)
}

// UnservedKindOf returns the first of kinds of gv that the API server does not serve, or "": the
// same rule for another project's kinds (Kueue's, for the AdmissionCheck controller).
func UnservedKindOf(mgr ctrl.Manager, gv schema.GroupVersion, kinds ...string) string {
	for _, kind := range kinds {
		gk := gv.WithKind(kind).GroupKind()
		if _, err := mgr.GetRESTMapper().RESTMapping(gk, gv.Version); meta.IsNoMatchError(err) {
			return kind
		}
	}
	return ""
}

// SkipUnserved logs that the controller named what is off because kind is not served.
func SkipUnserved(what, kind string) {
	ctrl.Log.WithName("setup").Info("A CRD is not installed: "+what+" is off until it is and the operator restarts", "missing", kind)
}
