# shellcheck shell=bash
# Shared settings and small helpers for the hack/ scripts. Source, don't run.
# shellcheck disable=SC2034 # variables are used by the sourcing scripts
#
# The pinned versions below must match the wrapper modules' go.mod files
# (hack/k8s, hack/etcd, hack/kwok, hack/kueue, hack/kind, hack/coredns); k8s-bin.sh and kueue-bin.sh check that they do.

LOCKEDJOB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HACK_DIR="${LOCKEDJOB_ROOT}/hack"

K8S_VERSION="v1.37.2"
ETCD_VERSION="v3.6.16"
KWOK_VERSION="v0.8.0"
KUEUE_VERSION="v0.17.0"
KIND_VERSION="v0.33.0"
COREDNS_VERSION="v1.14.6"

LOCKEDJOB_CACHE="${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/lockedjob}"
# One folder holds every binary (etcd, kube-apiserver, kubectl, ... and kwok),
# so it doubles as KUBEBUILDER_ASSETS for controller-runtime's envtest.
K8S_BIN_DIR="${K8S_BIN_DIR:-${LOCKEDJOB_CACHE}/k8s-${K8S_VERSION}}"

K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
# Built only for a real node (hack/k8s-bin.sh --real-node, or hack/cluster.sh up when it adds
# one), so envtest and kwok-only users never pay for them.
REAL_NODE_BINARIES=(kubelet)
# Built only for the kind cluster of hack/kind.sh (hack/k8s-bin.sh --kind): what the project's
# node image carries (kubelet, kubeadm, kube-proxy's and CoreDNS's images) and kind itself.
KIND_BINARIES=(kubelet kubeadm kube-proxy coredns kind)

# Kueue's manager (hack/kueue-bin.sh) has a folder of its own: it is no part of the control
# plane, and its version moves apart from Kubernetes'.
KUEUE_BIN_DIR="${KUEUE_BIN_DIR:-${LOCKEDJOB_CACHE}/kueue-${KUEUE_VERSION}}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# port_free PORT: true if nothing accepts connections on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# now_ns: the wall clock in nanoseconds, the start that since measures from. Not EPOCHREALTIME:
# that one writes the locale's decimal separator, which awk may not read.
now_ns() { date +%s%N; }

# since T0 [DECIMALS]: seconds elapsed since T0 (a now_ns reading), with DECIMALS decimals
# (default 1).
since() { awk -v a="$1" -v b="$(now_ns)" -v d="${2:-1}" 'BEGIN { printf "%." d "f", (b - a) / 1e9 }'; }

# Environment for every go command run against the wrapper modules: build
# strictly from the committed go.mod/go.sum, never through a go.work file.
go_wrapper_env() {
	export GOWORK=off
	export GOFLAGS="-mod=readonly -buildvcs=false"
	export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"
}
