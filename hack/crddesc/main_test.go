package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  versions:
  - name: v1alpha1
    schema:
      openAPIV3Schema:
        description: ours, the kind
        properties:
          spec:
            description: ours, spec
            properties:
              jobTemplate:
                description: ours, the template
                properties:
                  metadata:
                    description: ours, its metadata
                    properties:
                      labels:
                        additionalProperties:
                          description: theirs, a label value
                          type: string
                        description: theirs, labels
                        type: object
                    type: object
                  spec:
                    description: ours, its spec
                    properties:
                      template:
                        description: theirs, the pod template
                        properties:
                          containers:
                            description: theirs, containers
                            items:
                              description: theirs, a container
                              properties:
                                name:
                                  description: theirs, a name
                                  type: string
                              type: object
                            type: array
                        type: object
                    type: object
                type: object
              items:
                description: ours, a list
                items:
                  description: ours, an item
                  properties:
                    jobTemplate:
                      description: ours, a nested template
                      properties:
                        spec:
                          description: ours, its spec
                          properties:
                            parallelism:
                              description: theirs, parallelism
                              type: integer
                          type: object
                      type: object
                  type: object
                type: array
            type: object
        type: object
`

// TestTrim keeps every description lockedjob writes (down to jobTemplate's metadata and spec, also
// inside arrays) and drops every one of the Kubernetes types below them; it changes nothing else.
func TestTrim(t *testing.T) {
	out, err := trim([]byte(crd))
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	if !strings.HasPrefix(text, "---\n") {
		t.Errorf("the document separator is gone:\n%s", text)
	}
	if n := strings.Count(text, "theirs"); n != 0 {
		t.Errorf("%d descriptions of Kubernetes types kept:\n%s", n, text)
	}
	if n, want := strings.Count(text, "ours"), strings.Count(crd, "ours"); n != want {
		t.Errorf("%d of lockedjob's %d descriptions kept:\n%s", n, want, text)
	}
	var before, after map[string]any
	if err := yaml.Unmarshal([]byte(crd), &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	strip(before["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any))
	strip(after["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any))
	b, _ := yaml.Marshal(before)
	a, _ := yaml.Marshal(after)
	if string(a) != string(b) {
		t.Errorf("more than descriptions changed:\n%s\nwant\n%s", a, b)
	}
	again, err := trim(out)
	if err != nil || string(again) != text {
		t.Errorf("a second run changed the output (err %v)", err)
	}
}

// TestTrimRefusesTooLarge fails a CRD that client-side kubectl apply could not annotate.
func TestTrimRefusesTooLarge(t *testing.T) {
	big := strings.Replace(crd, "ours, the kind", strings.Repeat("x", annotationLimit), 1)
	if _, err := trim([]byte(big)); err == nil || !strings.Contains(err.Error(), "kubectl apply") {
		t.Errorf("trim of a %d-byte CRD: err %v, want one naming kubectl apply", len(big), err)
	}
}
