# lockedjob: a Kubernetes operator that runs batch Jobs under a Redis lock.
# `make help` lists the targets. Nothing here downloads anything but Go modules
# and Debian packages: the Kubernetes binaries are built from source (hack/k8s-bin.sh)
# and cached outside the checkout.

# The manager image. `make image` writes it as a tarball without a container engine,
# `make docker-build` builds it with one (docs/images.md).
IMG ?= lockedjob.local/manager:dev
# The pod sandbox image of the local real node and the workload image of the tests.
PAUSE_IMG ?= lockedjob.local/pause:v1
FENCEDWRITER_IMG ?= lockedjob.local/fencedwriter:dev
# The image of the e2e suite's plain Jobs (sh -c 'sleep N'), real containers on a kind cluster;
# the name must match test/testkit's JobImage.
BUSYBOX_IMG ?= lockedjob.local/busybox:dev
# Where `make images` writes the image tarballs (and the static binaries inside them).
IMAGES_DIR ?= $(LOCALBIN)/images

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# Extra flags for `go test` (e.g. GO_TEST_ARGS=-v).
GO_TEST_ARGS ?=
# Runs a test command and, when it fails, ends its output with why (hack/why-failed.sh): a CI log is
# read from its tail, where Go and Ginkgo name only the file and line of a failure.
WHY_FAILED = bash $(CURDIR)/hack/why-failed.sh

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate ClusterRole, CustomResourceDefinition and MutatingWebhookConfiguration objects.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true paths="./api/..." paths="./controllers/..." paths="./internal/locks/..." output:crd:artifacts:config=config/crd/bases
	go run ./hack/crddesc config/crd/bases/*.yaml
	"$(CONTROLLER_GEN)" webhook paths="./internal/webhook/..." output:webhook:artifacts:config=config/webhook

# The header hack/boilerplate.go.txt carries a fixed year, as kubebuilder's `init` writes it: a year
# filled in at generation time rewrote every generated file on 1 January (test/generate checks).
.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt -w on the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet (the operator and hack/imgtool).
	go vet ./...
	cd hack/imgtool && GOWORK=off go vet -mod=readonly ./...

.PHONY: lint
lint: actionlint helm-lint golangci-lint ## Check formatting (gofmt), go vet, golangci-lint (.golangci.yml), the shell scripts (shellcheck), the GitHub workflows and the Helm chart; fails instead of rewriting.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	bash hack/ensure-command.sh shellcheck shellcheck
	shellcheck -x $$(git ls-files 'hack/*.sh' 'hack/lib/*.sh') .ci/run
	go vet ./...
	go vet -tags scale ./test/scale/
	cd hack/imgtool && GOWORK=off go vet -mod=readonly ./...
	$(call golangci-lint-run)

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint with --fix: applies the fixes its linters offer (review the diff).
	$(call golangci-lint-run,--fix)

.PHONY: lint-config
lint-config: golangci-lint ## Check .golangci.yml against the pinned golangci-lint's schema.
	"$(GOLANGCI_LINT)" config verify

# golangci-lint-run lints every Go module that has Go files, with flags $(1): the root one with the
# build tags of its suites (e2e, fault, scale), so their files are linted too, then hack/imgtool
# and test/bench, which have their own go.mod. All three read the one .golangci.yml.
define golangci-lint-run
"$(GOLANGCI_LINT)" run --config "$(CURDIR)/.golangci.yml" --build-tags e2e,fault,scale $(1) ./...
cd hack/imgtool && GOWORK=off "$(GOLANGCI_LINT)" run --config "$(CURDIR)/.golangci.yml" $(1) ./...
cd test/bench && GOWORK=off "$(GOLANGCI_LINT)" run --config "$(CURDIR)/.golangci.yml" $(1) ./...
endef

.PHONY: actionlint
actionlint: actionlint-bin ## Check the GitHub workflows in .github/workflows (actionlint).
	"$(ACTIONLINT)"

.PHONY: verify
verify: manifests generate helm-chart dashboards ## Fail if generated files (CRD, RBAC, webhook configuration, deepcopy, dist/chart, Grafana dashboards) are out of date, or if `make generate` on another day would change them.
	@git diff --exit-code -- config/crd config/rbac config/webhook config/grafana api dist/chart || { echo "generated files changed: run 'make manifests generate helm-chart dashboards' and commit"; exit 1; }
	go test -count=1 ./test/generate/

.PHONY: verify-model
verify-model: ## Explore the lock protocol's models exhaustively within their bounds and check that every mutation (a fixed defect put back) is found (internal/model, docs/model.md); test-unit runs it too.
	go test -count=1 -v ./internal/model/
	go test -count=1 -v -run 'TestOperatorModel' ./controllers/lockedjob/  # the reconciler's own decide in the operator model

.PHONY: redis
redis: ## Make sure redis-server is installed (installs the Debian package when root).
	@bash hack/ensure-redis.sh

.PHONY: test
test: test-unit test-release test-race test-e2e test-fault test-kind ## Run every test: lock library on real Redis, envtest, local cluster, the release build, the race detector, end to end, faults, end to end on kind.

# The builds that take long the first time, in three lanes that share the cores: while one lane
# downloads modules, links (one core) or unpacks Debian packages, another compiles. Cold on 2 cores:
# 16 min in lanes, about 21 one after the other (docs/e2e.md, "make test-kind"). Each step is a
# no-op once its output is cached outside the checkout. The cluster lane builds its binaries in one hack/k8s-bin.sh call: two at once would
# write the same files.
.PHONY: prebuild
prebuild: ## Build, in parallel lanes, what the suites need that takes long the first time: the code generators and linters, the control plane and node binaries with the kind node image, Kueue.
	@$(MAKE) --no-print-directory -j3 -O prebuild-tools prebuild-cluster kueue-bin

.PHONY: prebuild-tools
prebuild-tools: controller-gen kustomize kubebuilder helm actionlint-bin golangci-lint krew

.PHONY: prebuild-cluster
prebuild-cluster:
	@bash "$(CURDIR)/hack/k8s-bin.sh" --real-node --kind
	@$(MAKE) --no-print-directory kind-node-image

test-unit: manifests generate lint redis k8s-bin kueue-bin kustomize helm ## Run unit and envtest tests (real Redis, real kube-apiserver), the local-cluster smoke test, the deploy tests (test/deploy) and Kueue on envtest (test/kueue).
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" $(WHY_FAILED) unit go test $(GO_TEST_ARGS) $$(go list ./... | grep -v /test/e2e)
	$(WHY_FAILED) scale-unit go test $(GO_TEST_ARGS) -tags scale ./test/scale/  # the scale benchmark's own unit tests (recorder, soak judgement)
	cd hack/imgtool && GOWORK=off $(WHY_FAILED) imgtool go test -mod=readonly $(GO_TEST_ARGS) ./...

# The race detector over the code that is shared between goroutines: the lock library (keeper, release
# channel), the lock book, and the controllers' unit tests. The envtest suite (TestControllers) runs
# without it in test-unit: under the race detector a real kube-apiserver on 2 cores takes too long.
.PHONY: test-race
test-race: redis ## Run the lock library's, the lock book's and the controllers' unit tests with the race detector (not the operator model: one goroutine, and 1.2 GB without it).
	$(WHY_FAILED) race go test -race -count=1 $(GO_TEST_ARGS) ./internal/redislock/ ./internal/lockbook/ ./controllers/... -skip 'TestControllers$$|TestOperatorModel'

# E2E_KUBECONFIG: run the e2e suite against that cluster instead of a local control plane it starts itself.
# E2E_IMG / E2E_WORKLOAD_IMG: the manager and workload images of the in-cluster lane (loaded into the
# local cluster's real node from IMAGES_DIR; on another cluster, load them there first).
# E2E_POD_REDIS_HOST: on another cluster, the address its pods reach this machine at (make test-kind
# sets it from hack/kind.sh pod-host).
# E2E_LOAD_IMAGE: on another cluster, the command that loads an image tarball into its nodes, for the
# release lane's images (make test-kind: hack/kind.sh load-image). E2E_RELEASE_FROM: the commit
# whose release the release lane installs before it upgrades to this checkout's.
E2E_KUBECONFIG ?=
E2E_POD_REDIS_HOST ?=
E2E_LOAD_IMAGE ?=
E2E_RELEASE_FROM ?=
E2E_IMG ?= $(IMG)
E2E_WORKLOAD_IMG ?= $(FENCEDWRITER_IMG)
.PHONY: test-e2e
test-e2e: redis k8s-bin kustomize helm images ## Run the end-to-end suite (local control plane with kwok nodes and a real node, or E2E_KUBECONFIG).
	E2E_KUBECONFIG="$(E2E_KUBECONFIG)" E2E_POD_REDIS_HOST="$(E2E_POD_REDIS_HOST)" E2E_LOAD_IMAGE="$(E2E_LOAD_IMAGE)" E2E_RELEASE_FROM="$(E2E_RELEASE_FROM)" E2E_IMG="$(E2E_IMG)" E2E_WORKLOAD_IMG="$(E2E_WORKLOAD_IMG)" E2E_IMAGES_DIR="$(IMAGES_DIR)" HELM="$(HELM)" \
		$(WHY_FAILED) e2e go test -tags=e2e -timeout 40m -count=1 ./test/e2e/ -v -ginkgo.v

.PHONY: test-fault
test-fault: redis k8s-bin kustomize ## Run the fault suite: two local clusters sharing one Redis, one fault at a time, judged from the recorded history (docs/fault.md).
	$(WHY_FAILED) fault go test -tags=fault -timeout 30m -count=1 ./test/fault/ -v

.PHONY: bench
bench: redis ## Run the lock library's benchmarks (side by side with redsync and bsm/redislock in test/bench).
	cd test/bench && go test -run '^$$' -bench . -benchmem -count 6 ./...

# SCALE_ARGS are the scale benchmark's flags, e.g. SCALE_ARGS='-n 100 -scenarios plain,shared -kcm-qps 500'
# (go run -tags scale ./test/scale -h lists them).
SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: redis k8s-bin kustomize kueue-bin ## Run the scale benchmark (issue 13): its own local cluster, plain Jobs vs LockedJobs and guarded Jobs, one table (docs/benchmarks.md, Scale). Takes many minutes.
	go run -tags scale ./test/scale $(SCALE_ARGS)

##@ Demo

.PHONY: demo
demo: redis k8s-bin ## Run the product end to end: local cluster, Redis, operator, three LockedJobs contending for one lock.
	@bash hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop everything the demo started (and only that).
	@bash hack/demo.sh down

##@ Build

# What the binaries say they are (internal/version: --version, the start-up log,
# lockedjob_build_info, `kubectl lockedjob version`). VERSION is a release's (empty: "devel"); the
# commit and its date come from git, not the clock, so two builds of one commit are the same.
VERSION ?=
VERSION_PKG := github.com/lockedjob/lockedjob/internal/version
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
GIT_DATE := $(shell git log -1 --format=%cI 2>/dev/null)
VERSION_LDFLAGS := -X $(VERSION_PKG).commit=$(GIT_COMMIT) -X $(VERSION_PKG).date=$(GIT_DATE)$(if $(VERSION), -X $(VERSION_PKG).version=$(VERSION))

.PHONY: build
build: manifests generate ## Build the manager binary.
	go build -ldflags '$(VERSION_LDFLAGS)' -o bin/manager ./cmd/manager

.PHONY: plugin
plugin: ## Build the kubectl plugin bin/kubectl-lockedjob (`kubectl lockedjob ...` once it is on PATH; docs/plugin.md).
	go build -ldflags '$(VERSION_LDFLAGS)' -o bin/kubectl-lockedjob ./cmd/kubectl-lockedjob

# RUN_NAMESPACE: the operator's namespace for `make run` (lease, token-key Secret); the operator
# does not take it from the kubeconfig.
RUN_NAMESPACE ?= lockedjob-system
.PHONY: run
run: manifests generate ## Run the manager from your host against the current KUBECONFIG (namespace RUN_NAMESPACE).
	"$(KUBECTL)" get namespace "$(RUN_NAMESPACE)" >/dev/null 2>&1 || "$(KUBECTL)" create namespace "$(RUN_NAMESPACE)"
	go run ./cmd/manager --namespace "$(RUN_NAMESPACE)"

.PHONY: docker-build
docker-build: ## Build the manager image (needs a container engine; not available on the dev machines).
	docker build -t ${IMG} .

.PHONY: image
image: imgtool ## Write the manager image IMG as a tarball, IMAGES_DIR/manager.tar, without a container engine.
	$(call go-image,./cmd/manager,$(IMG),$(IMAGES_DIR)/manager.tar)

.PHONY: image-pause
image-pause: imgtool ## Write the pod sandbox image PAUSE_IMG as IMAGES_DIR/pause.tar.
	@mkdir -p "$(IMAGES_DIR)/bin"
	cd hack/imgtool && GOWORK=off CGO_ENABLED=0 GOOS=linux go build -mod=readonly -trimpath -ldflags '-s -w' -o "$(IMAGES_DIR)/bin/pause" ./pause
	"$(IMGTOOL)" -tag "$(PAUSE_IMG)" -out "$(IMAGES_DIR)/pause.tar" -entrypoint '["/pause"]' -user 65535:65535 \
		"file:$(IMAGES_DIR)/bin/pause:/pause:0755"

.PHONY: image-fencedwriter
image-fencedwriter: imgtool ## Write the workload image FENCEDWRITER_IMG as IMAGES_DIR/fencedwriter.tar.
	$(call go-image,./cmd/fencedwriter,$(FENCEDWRITER_IMG),$(IMAGES_DIR)/fencedwriter.tar)

.PHONY: image-busybox
image-busybox: imgtool ## Write the e2e suite's Job image BUSYBOX_IMG (Debian's static busybox: sh, sleep) as IMAGES_DIR/busybox.tar.
	@bash hack/ensure-busybox.sh
	"$(IMGTOOL)" -tag "$(BUSYBOX_IMG)" -out "$(IMAGES_DIR)/busybox.tar" -entrypoint '["/bin/sh"]' -env PATH=/bin \
		dir:/tmp:1777 "file:/bin/busybox:/bin/busybox:0755" "file:/bin/busybox:/bin/sh:0755" "file:/bin/busybox:/bin/sleep:0755"

.PHONY: images
images: image image-pause image-fencedwriter ## Write every image tarball: manager, pause, fencedwriter.

# go-image writes Go package $(1) as image $(2) to tarball $(3), shaped like an image built FROM
# gcr.io/distroless/static:nonroot: a static binary at /<last path element>, run as 65532:65532,
# with /etc/passwd, CA certificates and /tmp, and no shell. Adding an image is one line.
define go-image
@[ -d "$(1)" ] || { echo "$(1) does not exist: nothing to build into $(2)"; exit 1; }
@mkdir -p "$(IMAGES_DIR)/bin"
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w $(VERSION_LDFLAGS)' -o "$(IMAGES_DIR)/bin/$(notdir $(1))" $(1)
"$(IMGTOOL)" -tag "$(2)" -out "$(3)" -entrypoint '["/$(notdir $(1))"]' -user 65532:65532 -workdir / \
	nonroot-etc ca-certs "file:$(IMAGES_DIR)/bin/$(notdir $(1)):/$(notdir $(1)):0755"
endef

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests ## Install the CRDs into the cluster of the current KUBECONFIG.
	"$(KUBECTL)" apply -k config/crd

.PHONY: uninstall
uninstall: manifests ## Uninstall the CRDs from the cluster of the current KUBECONFIG.
	"$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -k config/crd

# DEPLOY_OVERLAY: what `make deploy` applies. config/default on any cluster; config/local (docs/deploy.md)
# on the project's local cluster, chosen by itself when KUBECONFIG is that cluster's
# (CLUSTER_KUBECONFIG, `make cluster-env`).
DEPLOY_LOCAL = $(and $(realpath $(KUBECONFIG)),$(filter $(realpath $(KUBECONFIG)),$(realpath $(CLUSTER_KUBECONFIG))))
DEPLOY_OVERLAY ?= $(if $(DEPLOY_LOCAL),config/local,config/default)
# DEPLOY_DIR: the generated kustomization (image IMG) that deploy and undeploy build; untracked.
DEPLOY_DIR ?= $(LOCALBIN)/deploy/$(notdir $(patsubst %/,%,$(DEPLOY_OVERLAY)))
# DEPLOY_IMAGE_TAR: the image tarball `make deploy` imports into the local cluster's real node.
DEPLOY_IMAGE_TAR ?= $(IMAGES_DIR)/manager.tar

.PHONY: deploy-overlay
deploy-overlay: manifests kustomize ## Write DEPLOY_DIR/kustomization.yaml: DEPLOY_OVERLAY with image IMG (values of config/local read from the cluster).
	IMG="$(IMG)" DEPLOY_OVERLAY="$(DEPLOY_OVERLAY)" KUSTOMIZE="$(KUSTOMIZE)" KUBECTL="$(KUBECTL)" bash hack/deploy-overlay.sh "$(DEPLOY_DIR)"

.PHONY: deploy
deploy: deploy-overlay ## Deploy the manager (image IMG) into the cluster of KUBECONFIG; on the local cluster also import DEPLOY_IMAGE_TAR into its real node.
	$(if $(filter config/local,$(patsubst %/,%,$(DEPLOY_OVERLAY))),@[ -f "$(DEPLOY_IMAGE_TAR)" ] || { echo "$(DEPLOY_IMAGE_TAR) not found: run 'make image IMG=$(IMG)' first"; exit 1; })
	$(if $(filter config/local,$(patsubst %/,%,$(DEPLOY_OVERLAY))),bash hack/cluster.sh load-image "$(DEPLOY_IMAGE_TAR)")
	"$(KUSTOMIZE)" build "$(DEPLOY_DIR)" | "$(KUBECTL)" apply -f -

# config/local adds no object (test/deploy checks it), so config/default's list is its deploy's, and
# undeploy reads nothing from the cluster: it works with the real node gone. The webhook overlay
# adds objects (its webhook configuration, which would refuse every labelled Job once its manager is
# gone), so undeploy builds the overlay deploy was given: DEPLOY_OVERLAY=config/overlays/guard-webhook.
UNDEPLOY_OVERLAY = $(if $(filter config/local,$(patsubst %/,%,$(DEPLOY_OVERLAY))),config/default,$(DEPLOY_OVERLAY))
.PHONY: undeploy
undeploy: manifests kustomize ## Remove everything `make deploy` applied (CRD included: its LockedJobs go with it); give it the DEPLOY_OVERLAY deploy had.
	IMG="$(IMG)" DEPLOY_OVERLAY="$(UNDEPLOY_OVERLAY)" KUSTOMIZE="$(KUSTOMIZE)" bash hack/deploy-overlay.sh "$(DEPLOY_DIR)/undeploy"
	"$(KUSTOMIZE)" build "$(DEPLOY_DIR)/undeploy" | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

# RELEASE_DIR: where `make release` writes. REGISTRY: where its images are named (nothing is pushed).
RELEASE_DIR ?= dist/release
REGISTRY ?= ghcr.io/lockedjob
.PHONY: release
release: manifests kustomize helm imgtool ## Write release VERSION (vX.Y.Z) of the current commit into RELEASE_DIR, offline and reproducibly: install.yaml, the Helm chart, the image tarballs, the kubectl plugin archives, the krew manifest, SHA256SUMS.
	VERSION="$(VERSION)" REGISTRY="$(REGISTRY)" KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)" IMGTOOL="$(IMGTOOL)" bash hack/release.sh "$(RELEASE_DIR)"

.PHONY: test-release
test-release: manifests kustomize helm imgtool krew k8s-bin ## Build one release twice from the current commit: byte-identical, complete, naming itself, its plugin installed by krew offline (hack/release-check.sh).
	KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)" IMGTOOL="$(IMGTOOL)" KREW="$(KREW)" KREW_VALIDATE="$(KREW_VALIDATE)" KUBECTL="$(KUBECTL)" \
		$(WHY_FAILED) release bash hack/release-check.sh

.PHONY: build-installer
build-installer: manifests generate kustomize ## Write dist/install.yaml: everything config/default installs, image IMG (input of `make helm-chart`).
	mkdir -p dist
	IMG="$(IMG)" DEPLOY_OVERLAY=config/default KUSTOMIZE="$(KUSTOMIZE)" bash hack/deploy-overlay.sh "$(LOCALBIN)/deploy/installer"
	"$(KUSTOMIZE)" build "$(LOCALBIN)/deploy/installer" > dist/install.yaml

include hack/make/cluster.mk
include hack/make/kind.mk

##@ Dependencies

## Location to install tools to: bin/ holds symlinks into TOOLS_CACHE, which lives outside the
## checkout so a fresh clone (CI) reuses tools built once on that machine.
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"
LOCKEDJOB_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/lockedjob
TOOLS_CACHE ?= $(LOCKEDJOB_CACHE)/tools

## kubectl: the one built with the local control plane, unless one is on PATH
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo "$(K8S_BIN_DIR)/kubectl")
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUBEBUILDER ?= $(LOCALBIN)/kubebuilder
HELM ?= $(LOCALBIN)/helm
ACTIONLINT ?= $(LOCALBIN)/actionlint
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
IMGTOOL ?= $(LOCALBIN)/imgtool
KREW ?= $(LOCALBIN)/krew
KREW_VALIDATE ?= $(LOCALBIN)/validate-krew-manifest

KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_TOOLS_VERSION ?= v0.23.0
# KUBEBUILDER_VERSION must match cliVersion in PROJECT: the Helm chart is generated by its plugin.
KUBEBUILDER_VERSION ?= v4.16.0
HELM_VERSION ?= v3.22.0
ACTIONLINT_VERSION ?= v1.7.12
GOLANGCI_LINT_VERSION ?= v2.15.0
KREW_VERSION ?= v0.4.3

.PHONY: kustomize
kustomize: $(LOCALBIN) ## Build kustomize locally if necessary.
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(LOCALBIN) ## Build controller-gen locally if necessary.
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kubebuilder
kubebuilder: $(LOCALBIN) ## Build kubebuilder (for its Helm plugin) locally if necessary.
	$(call go-install-tool,$(KUBEBUILDER),sigs.k8s.io/kubebuilder/v4,$(KUBEBUILDER_VERSION))

.PHONY: helm
helm: $(LOCALBIN) ## Build helm locally if necessary.
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

.PHONY: krew
krew: $(LOCALBIN) ## Build krew and krew-index's manifest validator locally if necessary (for test-release).
	$(call go-install-tool,$(KREW),sigs.k8s.io/krew/cmd/krew,$(KREW_VERSION))
	$(call go-install-tool,$(KREW_VALIDATE),sigs.k8s.io/krew/cmd/validate-krew-manifest,$(KREW_VERSION))

.PHONY: actionlint-bin
actionlint-bin: $(LOCALBIN) ## Build actionlint locally if necessary.
	$(call go-install-tool,$(ACTIONLINT),github.com/rhysd/actionlint/cmd/actionlint,$(ACTIONLINT_VERSION))

.PHONY: golangci-lint
golangci-lint: $(LOCALBIN) ## Build golangci-lint locally if necessary.
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# imgtool is built from its own module (hack/imgtool, pinned by its go.sum) whenever a source
# file changes, so go-containerregistry never enters the operator's go.mod.
IMGTOOL_SRCS := $(filter-out %_test.go,$(wildcard hack/imgtool/*.go)) hack/imgtool/go.mod hack/imgtool/go.sum
.PHONY: imgtool
imgtool: $(IMGTOOL) ## Build the image writer (hack/imgtool) locally if its sources changed.
$(IMGTOOL): $(IMGTOOL_SRCS) | $(LOCALBIN)
	cd hack/imgtool && GOWORK=off go build -mod=readonly -trimpath -o "$(IMGTOOL)" .

# The go-install-tool targets are phony and cheap (a test and a readlink), so a changed *_VERSION takes effect
# without deleting bin/.
# go-install-tool 'go install's a pinned tool once into $(TOOLS_CACHE)/<name>-<version> and points
# the symlink $(LOCALBIN)/<name> at it; a changed version gets its own file, never an overwrite.
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@cached="$(TOOLS_CACHE)/$$(basename "$(1)")-$(3)"; \
[ -x "$${cached}" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Installing $${package} into $(TOOLS_CACHE)" ;\
tmp="$$(mktemp -d)" ;\
GOBIN="$${tmp}" go install $${package} ;\
mkdir -p "$(TOOLS_CACHE)" ;\
mv "$${tmp}/$$(basename "$(1)")" "$${cached}" ;\
rmdir "$${tmp}" ;\
} ;\
[ "$$(readlink -- "$(1)" 2>/dev/null)" = "$${cached}" ] || ln -sfn "$${cached}" "$(1)"
endef

##@ Helm Deployment

# Appended by `kubebuilder edit --plugins=helm/v2-alpha` on its first run (it never appends again
# once PROJECT has the plugin's entry). Changed: HELM is the pinned bin/helm (see Dependencies) and
# install-helm builds it instead of downloading an installer script.
## Namespace to deploy the Helm release
HELM_NAMESPACE ?= lockedjob-system
## Name of the Helm release
HELM_RELEASE ?= lockedjob
## Path to the Helm chart directory
HELM_CHART_DIR ?= dist/chart
## Additional arguments to pass to helm commands
HELM_EXTRA_ARGS ?=

.PHONY: install-helm
install-helm: helm ## Build the pinned helm into bin/ (HELM_VERSION).

# The plugin writes the policy path (config/default); hack/chartguard then adds the value
# guard.admission and the webhook path (config/overlays/guard-webhook), which the plugin cannot
# carry (docs/deploy.md, "The chart's guard.admission").
.PHONY: helm-chart
helm-chart: kubebuilder kustomize controller-gen ## Regenerate dist/chart from `make build-installer` (dist/install.yaml) with kubebuilder's Helm plugin, then the guard.admission value (hack/chartguard).
	"$(KUBEBUILDER)" edit --plugins=helm/v2-alpha
	go run ./hack/chartguard -kustomize "$(KUSTOMIZE)" -chart $(HELM_CHART_DIR)

.PHONY: dashboards
dashboards: kubebuilder ## Regenerate the Grafana dashboards in config/grafana (kubebuilder's Grafana plugin, hack/dashboards.sh).
	KUBEBUILDER="$(KUBEBUILDER)" bash hack/dashboards.sh

.PHONY: helm-lint
helm-lint: helm ## Lint dist/chart (helm lint --strict).
	"$(HELM)" lint --strict $(HELM_CHART_DIR)

.PHONY: helm-deploy
helm-deploy: install-helm ## Deploy manager to the K8s cluster via Helm. Specify an image with IMG.
	IMG="$(IMG)"; $(HELM) upgrade --install $(HELM_RELEASE) $(HELM_CHART_DIR) \
		--namespace $(HELM_NAMESPACE) \
		--create-namespace \
		--set manager.image.repository=$${IMG%:*} \
		--set manager.image.tag=$${IMG##*:} \
		--wait \
		--timeout 5m \
		$(HELM_EXTRA_ARGS)

.PHONY: helm-uninstall
helm-uninstall: ## Uninstall the Helm release from the K8s cluster.
	$(HELM) uninstall $(HELM_RELEASE) --namespace $(HELM_NAMESPACE)

.PHONY: helm-status
helm-status: ## Show Helm release status.
	$(HELM) status $(HELM_RELEASE) --namespace $(HELM_NAMESPACE)

.PHONY: helm-history
helm-history: ## Show Helm release history.
	$(HELM) history $(HELM_RELEASE) --namespace $(HELM_NAMESPACE)

.PHONY: helm-rollback
helm-rollback: ## Rollback to previous Helm release.
	$(HELM) rollback $(HELM_RELEASE) --namespace $(HELM_NAMESPACE)
