package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The pod spec line of the plugin's manager template the hostNetwork block goes before: the first
// of its pod-level values (appliers/manager.go, templateTolerations).
const tolerationsWith = "      {{- with .Values.manager.tolerations }}\n"

// hostNetworkBlock runs the manager in its node's network namespace when asked: what config/local
// does for the project's local cluster, which has no Service network (no kube-proxy), so the
// manager reaches the API server and Redis on the node's loopback. dnsPolicy Default, as there:
// the node's resolver, since no cluster DNS answers either.
const hostNetworkBlock = "      {{- if .Values.hostNetwork }}\n" +
	"      hostNetwork: true\n" +
	"      dnsPolicy: Default\n" +
	"      {{- end }}\n"

// patchHostNetwork adds the hostNetwork block to the plugin's manager template once.
func patchHostNetwork(templates string) error {
	path := filepath.Join(templates, "manager", "manager.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	content := string(raw)
	if strings.Contains(content, hostNetworkBlock) {
		return nil
	}
	if n := strings.Count(content, tolerationsWith); n != 1 {
		return fmt.Errorf("%s holds %q %d times, want once: did the plugin change its manager template?", path, tolerationsWith, n)
	}
	return writeFile(path, strings.Replace(content, tolerationsWith, hostNetworkBlock+tolerationsWith, 1))
}

// hostNetworkValue is the value, appended to values.yaml as valuesBlock is.
const hostNetworkValue = `
## Run the manager in its node's network namespace, with the node's DNS (hack/chartguard): for a
## cluster without a Service network, as the project's local cluster with its real node. Set
## beside it what config/local sets there (docs/deploy.md, "The chart on the local cluster"):
## manager.nodeSelector and manager.tolerations for the node, manager.envOverrides
## KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT and LOCKEDJOB_REDIS_ADDR, and free ports in
## manager.healthProbe.port and metrics.port (the node's ports are the pod's).
##
hostNetwork: false
`
