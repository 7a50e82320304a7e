#!/usr/bin/env bash
# Build the local Kubernetes control-plane binaries at pinned versions:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok
# and, with --real-node, kubelet (for hack/cluster.sh's real node); with --kind, kubelet,
# kubeadm, kube-proxy, CoreDNS and kind (for hack/kind.sh and its node image)
# into ${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockedjob}/k8s-<version>/
# (outside the checkout). Sources come from the Go module proxy through the
# wrapper modules hack/k8s, hack/etcd, hack/kwok, hack/coredns and hack/kind; their committed go.sum
# verifies every module (go runs with -mod=readonly).
#
# A binary is rebuilt only if it is missing or its stamp (versions, wrapper
# go.mod/go.sum hash, Go version) changed, so a second run takes seconds.
#
# Usage: hack/k8s-bin.sh [--print-dir] [--force] [--real-node] [--kind] [--only NAME]...
#   --print-dir  only print the binary folder (no build)
#   --force      rebuild everything
#   --real-node  also build kubelet (~1 min; not needed by envtest or kwok)
#   --kind       also build kubelet, kubeadm, kube-proxy, coredns and kind (~10 min cold)
#   --only NAME  build only NAME (repeatable), e.g. --only kind
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

FORCE=0
BINARIES=("${K8S_BINARIES[@]}")
ONLY=()
while [[ $# -gt 0 ]]; do
	arg="$1"
	shift
	case "${arg}" in
	--print-dir) echo "${K8S_BIN_DIR}"; exit 0 ;;
	--force) FORCE=1 ;;
	--real-node) BINARIES+=("${REAL_NODE_BINARIES[@]}") ;;
	--kind) BINARIES+=("${KIND_BINARIES[@]}") ;;
	--only)
		[[ $# -gt 0 ]] || die "--only needs a binary name"
		ONLY+=("$1")
		shift
		;;
	-h | --help) sed -n '2,19p' "$0"; exit 0 ;;
	*) die "unknown argument: ${arg}" ;;
	esac
done

[[ ${#ONLY[@]} -eq 0 ]] || BINARIES=("${ONLY[@]}")

command -v go >/dev/null 2>&1 || die "go is not on PATH"
go_wrapper_env

# Check that a wrapper go.mod pins the expected version of a module.
check_pin() { # wrapper module version
	local gomod="${HACK_DIR}/$1/go.mod"
	[[ -f "${gomod}" && -f "${HACK_DIR}/$1/go.sum" ]] || die "missing ${gomod} or its go.sum"
	grep -Eq "^[[:space:]]*(require[[:space:]]+)?$2[[:space:]]+$3([[:space:]]|$)" "${gomod}" ||
		die "${gomod} does not require $2 $3 (update hack/lib/k8s-common.sh and the wrapper together)"
}
check_pin k8s k8s.io/kubernetes "${K8S_VERSION}"
check_pin etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}"
check_pin kwok sigs.k8s.io/kwok "${KWOK_VERSION}"
check_pin coredns github.com/coredns/coredns "${COREDNS_VERSION}"
check_pin kind sigs.k8s.io/kind "${KIND_VERSION}"

GO_VERSION="$(go env GOVERSION)"
# A wrapper's go.mod, go.sum and Go files (hack/coredns has a main of its own).
wrapper_hash() {
	cat "${HACK_DIR}/$1/go.mod" "${HACK_DIR}/$1/go.sum" "${HACK_DIR}/$1/"*.go 2>/dev/null | sha256sum | cut -c1-16
}

# name -> wrapper, package, version, expected duration
declare -A WRAPPER=(
	[etcd]=etcd [kube-apiserver]=k8s [kube-controller-manager]=k8s
	[kube-scheduler]=k8s [kubectl]=k8s [kwok]=kwok [kubelet]=k8s
	[kubeadm]=k8s [kube-proxy]=k8s [coredns]=coredns [kind]=kind
)
declare -A PKG=(
	[etcd]=go.etcd.io/etcd/server/v3
	[kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
	[kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
	[kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
	[kubectl]=k8s.io/kubernetes/cmd/kubectl
	[kwok]=sigs.k8s.io/kwok/cmd/kwok
	[kubelet]=k8s.io/kubernetes/cmd/kubelet
	[kubeadm]=k8s.io/kubernetes/cmd/kubeadm
	[kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
	# The wrapper's own main: CoreDNS with the plugins a kind cluster's Corefile uses.
	[coredns]=github.com/lockedjob/lockedjob/hack/coredns
	[kind]=sigs.k8s.io/kind
)
declare -A VERSION=(
	[etcd]="${ETCD_VERSION}" [kube-apiserver]="${K8S_VERSION}"
	[kube-controller-manager]="${K8S_VERSION}" [kube-scheduler]="${K8S_VERSION}"
	[kubectl]="${K8S_VERSION}" [kwok]="${KWOK_VERSION}" [kubelet]="${K8S_VERSION}"
	[kubeadm]="${K8S_VERSION}" [kube-proxy]="${K8S_VERSION}" [coredns]="${COREDNS_VERSION}"
	[kind]="${KIND_VERSION}"
)
declare -A HINT=(
	[etcd]="~1 min" [kube-apiserver]="first time takes 4-9 min"
	[kube-controller-manager]="~3 min after kube-apiserver" [kube-scheduler]="~30 s after kube-apiserver"
	[kubectl]="~1 min" [kwok]="~1 min" [kubelet]="~1 min after kube-apiserver"
	[kubeadm]="~4 min" [kube-proxy]="~30 s after kube-apiserver" [coredns]="~1 min" [kind]="~30 s"
)

stamp_of() { # name
	local n="$1"
	printf '%s %s %s %s %s\n' "${n}" "${PKG[$n]}" "${VERSION[$n]}" \
		"$(wrapper_hash "${WRAPPER[$n]}")" "${GO_VERSION}"
}

ldflags_for() { # name
	local n="$1" v="${VERSION[$1]}"
	local flags="-s -w"
	case "${WRAPPER[$n]}" in
	k8s)
		local major minor date
		major="$(echo "${v#v}" | cut -d. -f1)"
		minor="$(echo "${v#v}" | cut -d. -f2)"
		date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
		local p
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			flags+=" -X ${p}.gitVersion=${v} -X ${p}.gitMajor=${major} -X ${p}.gitMinor=${minor}"
			flags+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${date}"
		done
		;;
	kwok) flags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${v#v}" ;;
	esac
	echo "${flags}"
}

for n in "${BINARIES[@]}"; do
	[[ -n "${PKG[$n]:-}" ]] || die "unknown binary ${n} (known: ${!PKG[*]})"
done

mkdir -p "${K8S_BIN_DIR}"
START_ALL=${SECONDS}
built=0
verified=""
for n in "${BINARIES[@]}"; do
	bin="${K8S_BIN_DIR}/${n}"
	stamp="${K8S_BIN_DIR}/.${n}.stamp"
	want="$(stamp_of "${n}")"
	if [[ ${FORCE} -eq 0 && -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
		log "${n} ${VERSION[$n]}: up to date"
		continue
	fi
	w="${WRAPPER[$n]}"
	if [[ " ${verified} " != *" ${w} "* ]]; then
		log "verifying modules of hack/${w} against its go.sum..."
		(cd "${HACK_DIR}/${w}" && go mod download && go mod verify >/dev/null) ||
			die "module verification failed for hack/${w}"
		verified+=" ${w}"
	fi
	log "building ${n} ${VERSION[$n]} (${HINT[$n]})..."
	t0=${SECONDS}
	tmp="${bin}.tmp.$$"
	rm -f "${stamp}"
	(cd "${HACK_DIR}/${w}" && go build -mod=readonly -trimpath -p 2 \
		-ldflags "$(ldflags_for "${n}")" -o "${tmp}" "${PKG[$n]}") ||
		{ rm -f "${tmp}"; die "building ${n} failed"; }
	mv -f "${tmp}" "${bin}"
	echo "${want}" >"${stamp}"
	built=$((built + 1))
	log "built ${n} in $((SECONDS - t0))s"
done

log "k8s binaries ready in ${K8S_BIN_DIR} (${built} built, $((SECONDS - START_ALL))s)"
