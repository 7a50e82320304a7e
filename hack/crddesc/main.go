// Command crddesc trims the field descriptions controller-gen writes into the CRDs down to the ones
// lockedjob owns. `make manifests` runs it right after controller-gen.
//
// controller-gen can keep every description or none (crd:maxDescLen=0). All of them is too much:
// a LockedJob embeds a whole batch/v1 JobTemplateSpec, whose descriptions (the Kubernetes API's
// own, for every field of a Job and its pod template) make the CRD larger than the 256 KiB
// annotation client-side `kubectl apply` keeps, and `kubectl explain job` already shows them. None
// leaves `kubectl explain lockedjob.spec.lock.ttl` empty. So this step keeps the descriptions of
// every field lockedjob defines (spec, status, conditions) and of the jobTemplate field and its two
// children, metadata and spec, which lockedjob documents itself, and drops every description below
// them, inside the Kubernetes schema.
//
// It fails when a CRD, as the compact JSON `kubectl apply` would store, is still larger than the
// annotation limit, so a change that makes the CRDs unappliable fails `make manifests`, not a user.
//
// Usage: go run ./hack/crddesc config/crd/bases/*.yaml
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"sigs.k8s.io/yaml"
)

// embedded names the fields whose subtree is a Kubernetes type's schema: descriptions stop two
// levels below them (the field, then its metadata and spec, keep theirs).
const embedded = "jobTemplate"

// annotationLimit is the API server's limit on an object's annotations together
// (apimachinery's TotalAnnotationSizeLimitB); `kubectl apply` keeps the whole object in one.
const annotationLimit = 256 * 1024

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: crddesc CRD.yaml...")
	}
	for _, path := range os.Args[1:] {
		if err := trimFile(path); err != nil {
			log.Fatalf("crddesc: %s: %v", path, err)
		}
	}
}

func trimFile(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := trim(in)
	if err != nil {
		return err
	}
	if bytes.Equal(in, out) {
		return nil
	}
	return os.WriteFile(path, out, 0o644)
}

// trim returns the CRD with the descriptions below the embedded Kubernetes types removed. The YAML
// goes through sigs.k8s.io/yaml both ways, as controller-gen writes it, so nothing else changes.
func trim(in []byte) ([]byte, error) {
	// controller-gen starts every file with a document separator.
	header, body := splitHeader(in)
	var crd map[string]any
	if err := yaml.Unmarshal(body, &crd); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return nil, fmt.Errorf("no spec.versions")
	}
	for _, v := range versions {
		schema, _ := dig(v, "schema", "openAPIV3Schema").(map[string]any)
		if schema == nil {
			return nil, fmt.Errorf("a version without schema.openAPIV3Schema")
		}
		walk(schema)
	}
	compact, err := json.Marshal(crd)
	if err != nil {
		return nil, err
	}
	if len(compact) > annotationLimit {
		return nil, fmt.Errorf("%d bytes as JSON, over the %d bytes client-side kubectl apply can annotate: keep fewer descriptions", len(compact), annotationLimit)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	return append(header, out...), nil
}

func splitHeader(in []byte) (header, body []byte) {
	const sep = "---\n"
	if bytes.HasPrefix(in, []byte(sep)) {
		return []byte(sep), in[len(sep):]
	}
	return nil, in
}

// walk visits a schema and, at every property named embedded, keeps the descriptions of the
// property and its direct children and strips all below.
func walk(schema map[string]any) {
	for name, p := range props(schema) {
		if name == embedded {
			for _, child := range props(p) {
				for _, grandchild := range props(child) {
					strip(grandchild)
				}
				stripItems(child)
			}
			continue
		}
		walk(p)
	}
	if items, ok := schema["items"].(map[string]any); ok {
		walk(items)
	}
}

// strip removes every description in a schema.
func strip(schema map[string]any) {
	delete(schema, "description")
	for _, p := range props(schema) {
		strip(p)
	}
	stripItems(schema)
}

func stripItems(schema map[string]any) {
	if items, ok := schema["items"].(map[string]any); ok {
		strip(items)
	}
	if extra, ok := schema["additionalProperties"].(map[string]any); ok {
		strip(extra)
	}
}

// props returns a schema's properties as schemas.
func props(schema map[string]any) map[string]map[string]any {
	raw, _ := schema["properties"].(map[string]any)
	out := make(map[string]map[string]any, len(raw))
	for name, p := range raw {
		if m, ok := p.(map[string]any); ok {
			out[name] = m
		}
	}
	return out
}

// dig follows keys through nested maps.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
