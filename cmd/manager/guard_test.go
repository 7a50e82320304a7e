package main

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestGuardAdmission: policy serves nothing, webhook needs the operator's namespace (its Secret
// and Service live there), and anything else is refused by name.
func TestGuardAdmission(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		o       options
		want    bool   // a gate is built
		wantErr string // empty: none
	}{
		"policy":                   {o: options{guardAdmission: guardAdmissionPolicy}},
		"unset (options in tests)": {o: options{}},
		"webhook":                  {o: options{guardAdmission: guardAdmissionWebhook, namespace: "lockedjob-system"}, want: true},
		"webhook without a namespace": {o: options{guardAdmission: guardAdmissionWebhook},
			wantErr: "namespace is not known"},
		"a misspelling": {o: options{guardAdmission: "webhooks"}, wantErr: `--guard-admission "webhooks"`},
	} {
		t.Run(name, func(t *testing.T) {
			gate, err := guardGate(cfg, tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (gate != nil) != tc.want {
				t.Fatalf("gate = %v, want one: %v", gate, tc.want)
			}
		})
	}
}
