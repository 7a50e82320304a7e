# shellcheck shell=bash
# Shared settings for hack/k8s-bin.sh and hack/cluster.sh. Source, don't run.
# shellcheck disable=SC2034 # variables are used by the sourcing scripts
#
# The pinned versions below must match the wrapper modules' go.mod files
# (hack/k8s, hack/etcd, hack/kwok); k8s-bin.sh checks that they do.

LOCKEDJOB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HACK_DIR="${LOCKEDJOB_ROOT}/hack"

K8S_VERSION="v1.37.2"
ETCD_VERSION="v3.6.16"
KWOK_VERSION="v0.8.0"

LOCKEDJOB_CACHE="${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/lockedjob}"
# One folder holds every binary (etcd, kube-apiserver, kubectl, ... and kwok),
# so it doubles as KUBEBUILDER_ASSETS for controller-runtime's envtest.
K8S_BIN_DIR="${K8S_BIN_DIR:-${LOCKEDJOB_CACHE}/k8s-${K8S_VERSION}}"

K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
# Built only for a real node (hack/k8s-bin.sh --real-node, or hack/cluster.sh up when it adds
# one), so envtest and kwok-only users never pay for them.
REAL_NODE_BINARIES=(kubelet)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Environment for every go command run against the wrapper modules: build
# strictly from the committed go.mod/go.sum, never through a go.work file.
go_wrapper_env() {
	export GOWORK=off
	export GOFLAGS="-mod=readonly -buildvcs=false"
	export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
}
