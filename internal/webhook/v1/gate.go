/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// gate answers the admission review of one kind with guardgate's ops for the object: the same
// answer for Jobs and Pods, only the patch differs.
type gate[T metav1.Object] struct {
	kind      string // as the answer and the log name it
	answer    string // the answer's message when it patches
	newObject func() T
	patch     func(T) []jsonpatch.Operation
	log       logr.Logger
}

// Handle returns the patch of the object under review, nothing for one the gate leaves alone.
func (g *gate[T]) Handle(_ context.Context, req admission.Request) admission.Response {
	obj := g.newObject()
	if err := decode(req, obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	ops := g.patch(obj)
	if ops == nil {
		return admission.Allowed("not a guarded " + g.kind)
	}
	g.log.V(1).Info("Gating guarded "+g.kind, "namespace", req.Namespace, "name", obj.GetName(), "generateName", obj.GetGenerateName())
	return admission.Patched(g.answer, ops...)
}

// decode reads the object under review. The request names its kind; the JSON is the object as
// sent, defaulted, so the ops' indexes are the object's own.
func decode(req admission.Request, into any) error {
	if len(req.Object.Raw) == 0 {
		return fmt.Errorf("admission request %s has no object", req.UID)
	}
	if err := json.Unmarshal(req.Object.Raw, into); err != nil {
		return fmt.Errorf("decode %s: %w", req.Kind.Kind, err)
	}
	return nil
}
