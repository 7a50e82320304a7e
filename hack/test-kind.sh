#!/usr/bin/env bash
# make test-kind: the e2e suite, both lanes, on a kind cluster, as a user's CI runs it. Creates
# the cluster (hack/kind.sh up: offline on the project's own dockerd and node image, or on the
# user's Docker with KIND_NODE_IMAGE), loads the image tarballs of `make images image-busybox`
# into its nodes, runs `make test-e2e` against it with the address its pods reach this machine's
# redis-servers at, and deletes it again, whatever the suite's outcome.
#
# Environment: those of hack/kind.sh (LOCKEDJOB_KIND_DIR, KIND_CLUSTER_NAME, KIND_WORKERS,
# KIND_NODE_IMAGE), IMAGES_DIR (default bin/images), MAKE, and
#   KIND_KEEP=1  leave the cluster up after the run (hack/kind.sh down removes it)
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

KIND="${HACK_DIR}/kind.sh"
IMAGES_DIR="${IMAGES_DIR:-${LOCKEDJOB_ROOT}/bin/images}"
TARBALLS=()
for img in manager fencedwriter busybox; do
	TARBALLS+=("${IMAGES_DIR}/${img}.tar")
	[[ -f "${IMAGES_DIR}/${img}.tar" ]] ||
		die "${IMAGES_DIR}/${img}.tar is missing: run make images image-busybox (make test-kind does)"
done

# gone: after down, hack/kind.sh status finds no cluster and no daemon of the folder (TestKindCluster
# checks the same down in depth: processes, mounts, bridge, veths, cgroups).
gone() {
	local out
	if out="$("${KIND}" status 2>&1)"; then
		log "after down the kind cluster is still up:"$'\n'"${out}"
		return 1
	fi
	if [[ "${out}" == *"docker daemon:"* && "${out}" != *"not started"* ]]; then
		log "after down the project's Docker daemon is still recorded:"$'\n'"${out}"
		return 1
	fi
}

finish() {
	local rc=$?
	if [[ "${KIND_KEEP:-}" == 1 ]]; then
		log "KIND_KEEP=1: the kind cluster stays up (KUBECONFIG=$("${KIND}" env); hack/kind.sh down removes it)"
	else
		"${KIND}" down && gone || rc=1
	fi
	log "make test-kind: exit ${rc} after $(since "${T0}")s"
	exit "${rc}"
}
T0="$(now_ns)"
trap finish EXIT

"${KIND}" up >/dev/null
t="$(now_ns)"
"${KIND}" load-image "${TARBALLS[@]}"
log "loaded ${#TARBALLS[@]} images in $(since "${t}")s"
kubeconfig="$("${KIND}" env)"
pod_host="$("${KIND}" pod-host)"
"${KUBECTL:-${K8S_BIN_DIR}/kubectl}" --kubeconfig "${kubeconfig}" get nodes -o wide >&2

t="$(now_ns)"
log "running the e2e suite on kind (E2E_KUBECONFIG=${kubeconfig}, E2E_POD_REDIS_HOST=${pod_host})"
"${MAKE:-make}" -C "${LOCKEDJOB_ROOT}" --no-print-directory test-e2e \
	E2E_KUBECONFIG="${kubeconfig}" E2E_POD_REDIS_HOST="${pod_host}" IMAGES_DIR="${IMAGES_DIR}" \
	E2E_LOAD_IMAGE="bash ${KIND} load-image"
log "the e2e suite passed on kind in $(since "${t}")s"
