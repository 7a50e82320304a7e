# The kind cluster of hack/kind.sh: kind (pinned in hack/kind) on the project's own Docker daemon
# and node image, offline, or on the user's Docker with KIND_NODE_IMAGE. Included by the root
# Makefile. See docs/e2e.md ("kind, offline").

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

# Not part of `make test` yet (issue 24, part 1): it builds the node image first (~15 min cold).
.PHONY: test-kind-cluster
test-kind-cluster: kind-node-image ## Run TestKindCluster: hack/kind.sh up in a temp folder, node Ready, CoreDNS and kube-proxy running, a loaded image's pod resolving kubernetes.default, down, nothing left.
	LOCKEDJOB_TEST_KIND=1 go test -count=1 -timeout 30m -run 'TestKindCluster$$' ./test/cluster/ -v
