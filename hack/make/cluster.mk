# Local Kubernetes control plane (no Docker): binaries built from source at
# pinned versions, cached outside the checkout. Included by the root Makefile.
# See docs/local-cluster.md.

# Kubernetes version of the local binaries (informational: the pin lives in
# hack/lib/k8s-common.sh and the wrapper module hack/k8s/go.mod).
K8S_VERSION := $(shell sed -n 's/^K8S_VERSION="\(.*\)"/\1/p' "$(CURDIR)/hack/lib/k8s-common.sh")

# Folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl and kwok: ${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockedjob}/k8s-<version>.
ifeq ($(origin K8S_BIN_DIR),undefined)
K8S_BIN_DIR := $(shell LOCKEDJOB_CACHE="$(LOCKEDJOB_CACHE)" bash "$(CURDIR)/hack/k8s-bin.sh" --print-dir)
endif
export K8S_BIN_DIR

# Folder with Kueue's manager (test/kueue): ${LOCKEDJOB_CACHE:-...}/kueue-<version>.
ifeq ($(origin KUEUE_BIN_DIR),undefined)
KUEUE_BIN_DIR := $(shell LOCKEDJOB_CACHE="$(LOCKEDJOB_CACHE)" bash "$(CURDIR)/hack/kueue-bin.sh" --print-dir)
endif
export KUEUE_BIN_DIR

# controller-runtime envtest reads its binaries from here.
KUBEBUILDER_ASSETS ?= $(K8S_BIN_DIR)

# Admin kubeconfig of the local cluster (honours LOCKEDJOB_CLUSTER_DIR).
ifeq ($(origin CLUSTER_KUBECONFIG),undefined)
CLUSTER_KUBECONFIG := $(shell LOCKEDJOB_CACHE="$(LOCKEDJOB_CACHE)" LOCKEDJOB_CLUSTER_DIR="$(LOCKEDJOB_CLUSTER_DIR)" bash "$(CURDIR)/hack/cluster.sh" env)
endif

##@ Local cluster

.PHONY: k8s-bin
k8s-bin: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok into K8S_BIN_DIR (first time ~10 min, then seconds).
	@bash "$(CURDIR)/hack/k8s-bin.sh"

.PHONY: k8s-bin-real-node
k8s-bin-real-node: ## Also build kubelet for the local cluster's real node (hack/cluster.sh builds it when it needs it).
	@bash "$(CURDIR)/hack/k8s-bin.sh" --real-node

.PHONY: kueue-bin
kueue-bin: ## Build Kueue's manager into KUEUE_BIN_DIR for test/kueue (first time ~4 min, then seconds).
	@bash "$(CURDIR)/hack/kueue-bin.sh"

.PHONY: envtest-assets
envtest-assets: k8s-bin ## Print the KUBEBUILDER_ASSETS folder for envtest.
	@echo "$(K8S_BIN_DIR)"

.PHONY: cluster-up
cluster-up: k8s-bin ## Start the local control plane (etcd, apiserver, controller-manager, scheduler, kwok + 2 fake nodes) and, where the machine allows, a real node (LOCKEDJOB_REAL_NODE=auto|1|0).
	@bash "$(CURDIR)/hack/cluster.sh" up

.PHONY: cluster-down
cluster-down: ## Stop the real node and the local control plane (only what they started; also after a crash).
	@bash "$(CURDIR)/hack/cluster.sh" down

.PHONY: cluster-status
cluster-status: ## Show the local control plane's processes and nodes.
	@bash "$(CURDIR)/hack/cluster.sh" status

.PHONY: cluster-env
cluster-env: ## Print the local cluster's admin kubeconfig path (CLUSTER_KUBECONFIG), e.g. for KUBECONFIG.
	@echo "$(CLUSTER_KUBECONFIG)"

# Image tarballs cluster-load-image imports: by default every tarball `make images` wrote.
IMAGE_TARS ?= $(wildcard $(CURDIR)/bin/images/*.tar)

.PHONY: cluster-load-image
cluster-load-image: ## Import image tarballs (IMAGE_TARS, default bin/images/*.tar) into the real node's containerd.
	@[ -n "$(strip $(IMAGE_TARS))" ] || { echo "no image tarballs: run make images, or set IMAGE_TARS"; exit 1; }
	@bash "$(CURDIR)/hack/cluster.sh" load-image $(IMAGE_TARS)
