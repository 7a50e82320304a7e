# The kind cluster of hack/kind.sh: kind (pinned in hack/kind) on the project's own Docker daemon
# and node image, offline, or on the user's Docker with KIND_NODE_IMAGE, and the e2e suite on it.
# Included by the root Makefile. See docs/e2e.md ("kind, offline" and "make test-kind").

##@ kind cluster

.PHONY: kind-node-image
kind-node-image: ## Build the node image of hack/kind.sh from Debian packages and the Go module proxy (cached in ~/.cache/lockedjob/kind-node-<version>; ~15 min the first time, then seconds).
	@bash "$(CURDIR)/hack/kind-node-image.sh"

.PHONY: kind-up
kind-up: ## Create the kind cluster (root: the project's own dockerd and node image; KIND_NODE_IMAGE=<image>: the user's Docker).
	@bash "$(CURDIR)/hack/kind.sh" up

.PHONY: kind-down
kind-down: ## Delete the kind cluster and stop and remove everything kind-up started.
	@bash "$(CURDIR)/hack/kind.sh" down

.PHONY: kind-status
kind-status: ## Show the kind cluster's daemon processes, nodes and kube-system pods.
	@bash "$(CURDIR)/hack/kind.sh" status

.PHONY: kind-env
kind-env: ## Print the kind cluster's kubeconfig path, e.g. for KUBECONFIG.
	@bash "$(CURDIR)/hack/kind.sh" env

# The offline mode (no KIND_NODE_IMAGE) first checks hack/kind.sh itself (test-kind-cluster: its
# cluster comes up with a worker and goes down leaving nothing); the user's Docker mode
# (KIND_NODE_IMAGE, e.g. on GitHub) has no project daemon to check.
KIND_OWN_CHECK = $(if $(KIND_NODE_IMAGE),,test-kind-cluster)

.PHONY: test-kind
test-kind: $(KIND_OWN_CHECK) images image-busybox ## Run the e2e suite (both lanes) on a kind cluster: up (a control plane and KIND_WORKERS=1 worker), load the images, make test-e2e, down (hack/test-kind.sh).
	@bash "$(CURDIR)/hack/test-kind.sh"

.PHONY: test-kind-cluster
test-kind-cluster: kind-node-image ## Run TestKindCluster: hack/kind.sh up in a temp folder, control plane and worker Ready, CoreDNS and kube-proxy running, pods resolving kubernetes.default and reaching a pod on the other node, down, nothing left.
	LOCKEDJOB_TEST_KIND=1 go test -count=1 -timeout 30m -run 'TestKindCluster$$' ./test/cluster/ -v
