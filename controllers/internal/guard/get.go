package guard

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Get reads a guarded object from its reconciler's cache, else from the API server (an object just
// created may not be cached yet), into obj. It returns false when neither has it or ours says it is
// not the reconciler's to act on.
func Get[T client.Object](ctx context.Context, cached, api client.Reader, key client.ObjectKey, obj T, ours func(T) bool) (bool, error) {
	err := cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = api.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get %s %s: %w", kindWord(obj), key.Name, err)
	}
	return ours(obj), nil
}

// kindWord names obj's Go type in an error ("job", "pod").
func kindWord(obj client.Object) string {
	name := fmt.Sprintf("%T", obj)
	return strings.ToLower(name[strings.LastIndex(name, ".")+1:])
}
