package kueuecheck

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ActiveCheckReconciler keeps every AdmissionCheck of our controller name Active: Kueue makes a
// ClusterQueue that lists an inactive check inactive, and it admits nothing.
type ActiveCheckReconciler struct {
	Client client.Client
}

// Reconcile sets the check's Active condition True for its generation.
func (r *ActiveCheckReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ac := newObject(KindAdmissionCheck)
	if err := r.Client.Get(ctx, req.NamespacedName, ac); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ours(ac) {
		return ctrl.Result{}, nil
	}
	conds := conditions(ac)
	changed := meta.SetStatusCondition(&conds, metav1.Condition{
		Type: conditionActive, Status: metav1.ConditionTrue, Reason: conditionActive,
		Message: "lockedjob answers for this check", ObservedGeneration: ac.GetGeneration(),
	})
	if !changed {
		return ctrl.Result{}, nil
	}
	base := ac.DeepCopy()
	raw := make([]any, 0, len(conds))
	for i := range conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conds[i])
		if err != nil {
			return ctrl.Result{}, err
		}
		raw = append(raw, m)
	}
	if err := unstructured.SetNestedSlice(ac.Object, raw, "status", "conditions"); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Client.Status().Patch(ctx, ac, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("set admission check %s Active: %w", ac.GetName(), err)
	}
	ctrl.LoggerFrom(ctx).Info("Set admission check Active", "AdmissionCheck", ac.GetName())
	return ctrl.Result{}, nil
}

// ours reports whether o is an AdmissionCheck of our controller name.
func ours(o client.Object) bool {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "controllerName")
	return name == ControllerName
}

// SetupWithManager watches the AdmissionChecks of our controller name.
func (r *ActiveCheckReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("kueueadmissioncheck").
		For(newObject(KindAdmissionCheck), builder.WithPredicates(predicate.NewPredicateFuncs(ours))).
		Complete(r)
}
