#!/usr/bin/env bash
# Write the kustomization that `make deploy`, `make undeploy` and `make build-installer` build: a
# folder outside the tracked config/ with the image set in it, so deploying never edits a tracked
# file (kubebuilder's scaffold runs `kustomize edit set image` inside config/manager).
#
# Usage: hack/deploy-overlay.sh OUT_DIR
#   OUT_DIR/kustomization.yaml uses config/default, and for DEPLOY_OVERLAY=config/local also the
#   component config/local with OUT_DIR/local-cluster.yaml, the values read from the cluster; for
#   DEPLOY_OVERLAY=config/overlays/guard-webhook the component config/components/guard-webhook (the
#   admission gate served by the manager, for clusters before Kubernetes 1.36).
#
# Environment:
#   IMG              manager image (required)
#   DEPLOY_OVERLAY   config/default (any cluster; default), config/local (the project's local
#                    cluster with a real node: hack/cluster.sh) or config/overlays/guard-webhook
#                    (any cluster, the gate as a webhook)
#   KUSTOMIZE        kustomize binary (default bin/kustomize)
# For config/local only (each read from the cluster when unset):
#   KUBECTL, KUBECONFIG     the cluster to read the values from
#   DEPLOY_APISERVER_PORT   kube-apiserver port on 127.0.0.1 (default: the kubeconfig's server)
#   DEPLOY_NODE_IP          the real node's InternalIP, where probes and metrics bind (default:
#                           the node labelled lockedjob.dev/real-node=true)
#   DEPLOY_REDIS_ADDR       Redis as the node's host network reaches it (default 127.0.0.1:26379,
#                           the demo's redis-server)
#   DEPLOY_PROBE_PORT       health probe port on the node IP (default 18081)
#   DEPLOY_METRICS_PORT     metrics port on the node IP (default 18443)
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

OUT_DIR="${1:-}"
[[ -n "${OUT_DIR}" ]] || die "usage: hack/deploy-overlay.sh OUT_DIR"
[[ -n "${IMG:-}" ]] || die "IMG is not set (the manager image, e.g. lockedjob.local/manager:dev)"
OVERLAY="${DEPLOY_OVERLAY:-config/default}"
KUSTOMIZE="${KUSTOMIZE:-${LOCKEDJOB_ROOT}/bin/kustomize}"
KUBECTL="${KUBECTL:-kubectl}"
REAL_NODE_LABEL="lockedjob.dev/real-node=true"

case "${OVERLAY%/}" in
config/default | config/local | config/overlays/guard-webhook) ;;
*) die "DEPLOY_OVERLAY must be config/default, config/local or config/overlays/guard-webhook, not ${OVERLAY}" ;;
esac

# rel PATH: PATH (in the checkout) relative to OUT_DIR, since kustomize wants relative resources.
rel() { realpath --relative-to="${OUT_DIR}" "${LOCKEDJOB_ROOT}/$1"; }

port_ok() { [[ "$1" =~ ^[0-9]+$ && $1 -ge 1 && $1 -le 65535 ]]; }

# apiserver_port: the port of the kubeconfig's server, which must be on 127.0.0.1: the manager
# reaches it over the node's loopback.
apiserver_port() {
	local server
	server="$("${KUBECTL}" config view --minify -o jsonpath='{.clusters[0].cluster.server}')" ||
		die "cannot read the current cluster's server from the kubeconfig"
	[[ "${server}" =~ ^https://127\.0\.0\.1:([0-9]+)/?$ ]] ||
		die "config/local is for the local cluster, whose apiserver is https://127.0.0.1:<port>; the kubeconfig says ${server}"
	echo "${BASH_REMATCH[1]}"
}

real_node_ip() {
	local ip
	ip="$("${KUBECTL}" get nodes -l "${REAL_NODE_LABEL}" \
		-o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}')" ||
		die "cannot list the nodes labelled ${REAL_NODE_LABEL}"
	[[ -n "${ip}" ]] || die "no node labelled ${REAL_NODE_LABEL} in this cluster: the manager has nowhere to run (start the cluster with a real node, docs/local-cluster.md)"
	echo "${ip}"
}

write_local_values() {
	local port="${DEPLOY_APISERVER_PORT:-}" ip="${DEPLOY_NODE_IP:-}"
	local redis="${DEPLOY_REDIS_ADDR:-127.0.0.1:26379}"
	local probe="${DEPLOY_PROBE_PORT:-18081}" metrics="${DEPLOY_METRICS_PORT:-18443}"
	[[ -n "${port}" ]] || port="$(apiserver_port)"
	[[ -n "${ip}" ]] || ip="$(real_node_ip)"
	local p
	for p in "${port}" "${probe}" "${metrics}"; do port_ok "${p}" || die "not a port number: ${p}"; done
	[[ "${redis}" == *:* ]] || die "DEPLOY_REDIS_ADDR must be host:port, not ${redis}"
	cat >"${OUT_DIR}/local-cluster.yaml" <<EOF
# Written by hack/deploy-overlay.sh; see config/local/local-cluster.example.yaml.
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-cluster
  annotations:
    config.kubernetes.io/local-config: "true"
data:
  apiserverHost: 127.0.0.1
  apiserverPort: "${port}"
  redisAddr: ${redis}
  probeAddr: ${ip}:${probe}
  probePort: "${probe}"
  metricsAddr: ${ip}:${metrics}
  metricsPort: "${metrics}"
EOF
	log "config/local values: apiserver 127.0.0.1:${port}, Redis ${redis}, node ${ip} (probes :${probe}, metrics :${metrics})"
}

mkdir -p "${OUT_DIR}"
OUT_DIR="$(realpath "${OUT_DIR}")"
rm -f "${OUT_DIR}/kustomization.yaml" "${OUT_DIR}/local-cluster.yaml"
{
	echo "# Written by hack/deploy-overlay.sh (DEPLOY_OVERLAY=${OVERLAY}); not tracked, rewritten on every run."
	echo "resources:"
	echo "- $(rel config/default)"
	case "${OVERLAY%/}" in
	config/local)
		echo "- local-cluster.yaml"
		echo "components:"
		echo "- $(rel config/local)"
		;;
	config/overlays/guard-webhook)
		# The overlay is config/default with this component; the component is used here directly so
		# that the image is set in one place for every overlay.
		echo "components:"
		echo "- $(rel config/components/guard-webhook)"
		;;
	esac
} >"${OUT_DIR}/kustomization.yaml"
[[ "${OVERLAY%/}" != config/local ]] || write_local_values
(cd "${OUT_DIR}" && "${KUSTOMIZE}" edit set image "controller=${IMG}") ||
	die "kustomize edit set image controller=${IMG} failed in ${OUT_DIR}"
