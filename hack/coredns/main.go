// Command coredns is CoreDNS with the plugins a kind cluster's DNS uses and no others: those of
// the Corefile kubeadm writes (errors, health, ready, kubernetes, prometheus, forward, cache, loop,
// reload, loadbalance) and log. CoreDNS's own main links all of its ~60 plugins, with the cloud
// SDKs of route53, azure and clouddns; this one builds from a fraction of the modules, the way
// CoreDNS documents for custom builds (a main that imports coremain and the chosen plugins).
// hack/k8s-bin.sh builds it for the node image of hack/kind-node-image.sh.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the plugin chain's order: CoreDNS's own (core/dnsserver/zdirectives.go, from its
// plugin.cfg), less the plugins not built in. A Corefile naming another plugin fails to load.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
