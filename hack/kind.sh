#!/usr/bin/env bash
# A kind cluster (sigs.k8s.io/kind, pinned by the wrapper module hack/kind and built by
# hack/k8s-bin.sh) on this machine. docs/e2e.md ("kind, offline") explains it.
#
# Two ways, chosen by KIND_NODE_IMAGE:
#   unset  offline, as root: the project's own dockerd (hack/lib/dockerd.sh: its own folders,
#          socket and bridge, no iptables, stopped by PID) and the project's node image
#          (make kind-node-image: built from Debian packages and the Go module proxy only).
#   set    the user's Docker (docker on PATH, DOCKER_HOST) and that node image, e.g. kind's
#          official one; KIND_NODE_IMAGE=default takes the one kind v0.33.0 defaults to.
#
# Usage: hack/kind.sh up|down|status|env|pod-host|load-image FILE.tar...
#   up          create the cluster (idempotent) and wait until it takes pods (the default
#               ServiceAccount exists, CoreDNS is Ready); prints the kubeconfig's path at the end
#   down        delete it and stop and remove everything up started (also after a crash)
#   status      the daemon's processes, the cluster's nodes and kube-system pods
#   env         print the kubeconfig's path
#   pod-host    print the address at which the cluster's pods reach this machine (the gateway of
#               the Docker network kind's nodes are on): bind a redis-server there for them
#   load-image  load image tarballs (make images) into the nodes (kind load image-archive)
#
# Environment:
#   LOCKEDJOB_KIND_DIR  the cluster's folder: kubeconfig, logs, the daemon's state
#                       (default ${LOCKEDJOB_CACHE}/kind-cluster)
#   KIND_CLUSTER_NAME   the kind cluster's name (default lockedjob)
#   KIND_WORKERS        worker nodes beside the control plane (default 1; with 0 the control
#                       plane takes pods itself)
#   KIND_NODE_IMAGE     see above
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"
# shellcheck source=hack/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
# shellcheck source=hack/lib/net.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/net.sh"

KIND_DIR="${LOCKEDJOB_KIND_DIR:-${LOCKEDJOB_CACHE}/kind-cluster}"
mkdir -p "${KIND_DIR}"
KIND_DIR="$(cd "${KIND_DIR}" && pwd)"
CLUSTER_NAME="${KIND_CLUSTER_NAME:-lockedjob}"
WORKERS="${KIND_WORKERS:-1}"
# The offline mode's pods; the controller-manager gives each node a /24 of it.
POD_SUBNET="10.244.0.0/16"
[[ "${WORKERS}" =~ ^[0-9]+$ ]] || die "KIND_WORKERS=${WORKERS}: want a number of worker nodes"
KUBECONFIG_FILE="${KIND_DIR}/kubeconfig"
KIND_BIN="${K8S_BIN_DIR}/kind"
KUBECTL_BIN="${K8S_BIN_DIR}/kubectl"
# The mode a cluster was created in is recorded, so down and status act on that one.
MODE_FILE="${KIND_DIR}/mode"

KD_DIR="${KIND_DIR}"
# shellcheck source=hack/lib/dockerd.sh
source "${HACK_DIR}/lib/dockerd.sh"

# mode: "own" (the project's dockerd and node image) or "user" (KIND_NODE_IMAGE on the user's
# Docker); a cluster that exists keeps the mode it was created in.
mode() {
	if [[ -f "${MODE_FILE}" ]]; then
		cat "${MODE_FILE}"
	elif [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
		echo user
	else
		echo own
	fi
}

# kind_ ARGS...: kind against the mode's Docker.
kind_() {
	if [[ "$(mode)" == own ]]; then
		PATH="${KD_DIR}/client:${PATH}" DOCKER_HOST="unix://${KD_SOCK}" KIND_EXPERIMENTAL_PROVIDER=docker \
			"${KIND_BIN}" "$@"
	else
		KIND_EXPERIMENTAL_PROVIDER=docker "${KIND_BIN}" "$@"
	fi
}

kubectl_() { "${KUBECTL_BIN}" --kubeconfig "${KUBECONFIG_FILE}" "$@"; }

cluster_exists() {
	[[ -x "${KIND_BIN}" ]] || return 1
	if [[ "$(mode)" == own ]]; then
		kd_running || return 1
	fi
	kind_ get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"
}

# write_config IMAGE: the kind configuration of the offline mode, KIND_DIR/kind-config.yaml.
write_config() {
	local image="$1"
	cat >"${KIND_DIR}/kind-config.yaml" <<EOF
# Written by hack/kind.sh: a one-node kind cluster of the project's node image.
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  # kindnetd is not served offline: wire_pods gives each node a bridge CNI configuration for
  # the pod CIDR the controller-manager gave it (a /24 of podSubnet) and routes to the others'.
  disableDefaultCNI: true
  podSubnet: ${POD_SUBNET}
  # The node image's entrypoint refuses forwarded packets to this range until kube-proxy's rules
  # rewrite them (hack/kind/node/entrypoint).
  serviceSubnet: 10.96.0.0/16
  apiServerAddress: 127.0.0.1
nodes:
$(node_list "${image}")
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  # The node image's preloaded images (make kind-node-image) carry these names: nothing is
  # pulled, and a missing one fails with the kubelet's ErrImagePull instead.
  imageRepository: lockedjob.local
  etcd:
    local:
      imageTag: ${ETCD_VERSION}
  dns:
    imageTag: ${COREDNS_VERSION}
- |
  kind: KubeletConfiguration
  # kubelet 1.37 refuses cgroup v1 unless told; these hosts are cgroup v1 (hybrid).
  failCgroupV1: false
EOF
}

# write_user_config IMAGE: the kind configuration of the user's Docker.
write_user_config() {
	local image="$1"
	{
		echo "# Written by hack/kind.sh: a one-node kind cluster on the user's Docker."
		echo "kind: Cluster"
		echo "apiVersion: kind.x-k8s.io/v1alpha4"
		echo "nodes:"
		if [[ "${image}" == default ]]; then
			node_list
		else
			node_list "${image}"
		fi
	} >"${KIND_DIR}/kind-config.yaml"
}

# node_list [IMAGE]: the nodes of the kind configuration: a control plane and WORKERS workers,
# of IMAGE (or kind's default image).
node_list() {
	local role i
	for role in control-plane $(for ((i = 0; i < WORKERS; i++)); do echo worker; done); do
		echo "- role: ${role}"
		[[ -z "${1:-}" ]] || echo "  image: $1"
	done
}

# wire_pods: the pod network of the offline mode, what kindnetd does in kind's own image: each
# node gets hack/kind/pod-network.conflist for its pod CIDR (a bridge with host-local addresses;
# containerd loads it and the node turns Ready), a route to every other node's pod CIDR through
# that node's address on the Docker network, which all nodes share, and a masquerade of what its
# pods send outside POD_SUBNET (the host has no route back to pods). Pods reach pods, on any node,
# by their own addresses, as Kubernetes' network model wants.
wire_pods() {
	local -a nodes cidrs ips
	local node i j deadline=$((SECONDS + 120))
	mapfile -t nodes < <(kind_ get nodes --name "${CLUSTER_NAME}" | sort)
	[[ ${#nodes[@]} -gt 0 ]] || die "kind cluster ${CLUSTER_NAME} has no nodes"
	for i in "${!nodes[@]}"; do
		node="${nodes[i]}"
		# The controller-manager gives a node its pod CIDR soon after the node registers.
		until cidrs[i]="$(kubectl_ get node "${node}" -o jsonpath='{.spec.podCIDR}' 2>/dev/null)" && [[ -n "${cidrs[i]}" ]]; do
			((SECONDS < deadline)) || die "node ${node} got no pod CIDR within 120s"
			sleep 0.5
		done
		ips[i]="$(kd_docker inspect -f "{{(index .NetworkSettings.Networks \"${KD_NETWORK}\").IPAddress}}" "${node}")" ||
			die "no address of node ${node} on the Docker network ${KD_NETWORK}"
	done
	for i in "${!nodes[@]}"; do
		sed "s|@POD_CIDR@|${cidrs[i]}|" "${HACK_DIR}/kind/pod-network.conflist" |
			kd_docker exec -i "${nodes[i]}" sh -c 'cat >/etc/cni/net.d/10-lockedjob.conflist' ||
			die "writing the pod network configuration of node ${nodes[i]} failed"
		local masq=(POSTROUTING -s "${cidrs[i]}" ! -d "${POD_SUBNET}" -j MASQUERADE)
		kd_docker exec "${nodes[i]}" iptables -t nat -C "${masq[@]}" 2>/dev/null ||
			kd_docker exec "${nodes[i]}" iptables -t nat -A "${masq[@]}" ||
			die "masquerading the pods of node ${nodes[i]} failed"
		for j in "${!nodes[@]}"; do
			[[ ${i} -ne ${j} ]] || continue
			kd_docker exec "${nodes[i]}" ip route replace "${cidrs[j]}" via "${ips[j]}" ||
				die "routing ${cidrs[j]} through ${nodes[j]} on node ${nodes[i]} failed"
		done
		log "node ${nodes[i]}: pods on ${cidrs[i]}, address ${ips[i]}"
	done
}

# wait_nodes_ready SECONDS: every node Ready (kind create's --wait does this for kind's image).
wait_nodes_ready() {
	kubectl_ wait --for=condition=Ready node --all --timeout "$1s" >&2 ||
		die "kind cluster ${CLUSTER_NAME}: nodes not Ready after $1s"
}

# pod_host: the address the pods reach this machine at: the gateway of the Docker network the
# nodes are on (their default route). The network's IPAM list may hold an IPv6 entry too.
pod_host() {
	if [[ "$(mode)" == own ]]; then
		[[ -n "${KD_NET_INDEX}" ]] || die "kind cluster ${CLUSTER_NAME} is not up (hack/kind.sh up)"
		echo "${KD_GATEWAY}"
		return 0
	fi
	local gw
	for gw in $(docker network inspect "${KD_NETWORK}" -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}'); do
		[[ "${gw}" == *.*.*.* ]] && { echo "${gw}"; return 0; }
	done
	die "the Docker network ${KD_NETWORK} has no IPv4 gateway (docker network inspect ${KD_NETWORK})"
}

# usable: the cluster takes workloads: the default namespace's ServiceAccount exists (pods are
# refused until the controller-manager made it) and every CoreDNS pod is Ready.
usable() {
	kubectl_ get serviceaccount default -n default >/dev/null 2>&1 || return 1
	local ready
	ready="$(kubectl_ get pods -n kube-system -l k8s-app=kube-dns \
		-o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}' 2>/dev/null)" || return 1
	[[ -n "${ready}" && " ${ready}" != *" False"* && " ${ready}" != *"  "* ]]
}

# wait_usable SECONDS: poll usable until it holds; fail after SECONDS.
wait_usable() {
	local deadline=$((SECONDS + $1))
	until usable; do
		((SECONDS < deadline)) || {
			kubectl_ get pods -A -o wide >&2 || true
			die "kind cluster ${CLUSTER_NAME}: no default ServiceAccount or CoreDNS not Ready after $1s"
		}
		sleep 0.5
	done
}

on_up_failure() {
	local rc=$?
	[[ ${rc} -eq 0 ]] && return 0
	log "up failed (exit ${rc}); stopping what it started (logs stay in ${KIND_DIR}/logs)"
	down_locked quiet || true
	exit "${rc}"
}

up_locked() {
	local t0
	t0="$(now_ns)"
	if cluster_exists; then
		log "kind cluster ${CLUSTER_NAME} is already up (hack/kind.sh down stops it)"
		echo "${KUBECONFIG_FILE}"
		return 0
	fi
	down_locked quiet
	mkdir -p "${KIND_DIR}/logs"
	trap on_up_failure EXIT

	local image
	if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
		echo user >"${MODE_FILE}"
		"${HACK_DIR}/k8s-bin.sh" --only kind --only kubectl >&2
		command -v docker >/dev/null 2>&1 || die "KIND_NODE_IMAGE is set but docker is not on PATH"
		docker info >/dev/null 2>&1 || die "KIND_NODE_IMAGE is set but docker info fails: is the Docker daemon running?"
		image="${KIND_NODE_IMAGE}"
		write_user_config "${image}"
	else
		local blocker
		blocker="$(kd_blocker)"
		[[ -z "${blocker}" ]] || die "kind: the project's Docker daemon cannot run here: ${blocker} (on a machine with Docker, set KIND_NODE_IMAGE)"
		echo own >"${MODE_FILE}"
		"${HACK_DIR}/kind-node-image.sh" >&2
		image="$("${HACK_DIR}/kind-node-image.sh" --print-image)"
		local rootfs
		rootfs="$("${HACK_DIR}/kind-node-image.sh" --print-rootfs)"
		kd_up
		local ti
		ti="$(now_ns)"
		# kind's base image also sets STOPSIGNAL SIGRTMIN+3, which docker import does not take;
		# kind removes its nodes with docker rm -f, which never sends it.
		kd_docker import \
			--change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
			--change 'ENV container=docker' \
			"${rootfs}" "${image}" >/dev/null || die "docker import ${rootfs} failed"
		log "imported the node image ${image} in $(since "${ti}")s"
		write_config "${image}"
	fi

	local tc
	tc="$(now_ns)"
	log "creating kind cluster ${CLUSTER_NAME} (node image ${image}, ${WORKERS} worker(s))..."
	# In the offline mode the nodes turn Ready only once wire_pods gave them a pod network.
	local wait=3m
	[[ "$(mode)" == user ]] || wait=0s
	kind_ create cluster --name "${CLUSTER_NAME}" --config "${KIND_DIR}/kind-config.yaml" \
		--kubeconfig "${KUBECONFIG_FILE}" --wait "${wait}" 2>&1 | tee "${KIND_DIR}/logs/kind-create.log" >&2
	if [[ "$(mode)" == own ]]; then
		wire_pods
		wait_nodes_ready 120
	fi
	log "kind cluster ${CLUSTER_NAME} created in $(since "${tc}")s; waiting for CoreDNS..."
	local tw
	tw="$(now_ns)"
	wait_usable 180
	log "kind cluster ${CLUSTER_NAME} usable $(since "${tw}")s later ($(since "${t0}")s in all); kubeconfig ${KUBECONFIG_FILE}"
	trap - EXIT
	echo "${KUBECONFIG_FILE}"
}

down_locked() {
	local quiet="${1:-}"
	if [[ -f "${MODE_FILE}" && -x "${KIND_BIN}" ]] && { [[ "$(mode)" == user ]] || kd_running; }; then
		if kind_ get clusters 2>/dev/null | grep -qx "${CLUSTER_NAME}"; then
			kind_ delete cluster --name "${CLUSTER_NAME}" --kubeconfig "${KUBECONFIG_FILE}" >&2 ||
				log "WARNING: kind delete cluster ${CLUSTER_NAME} failed"
		fi
	fi
	if [[ "$(mode)" == own ]]; then
		kd_down "${quiet}"
	fi
	rm -f "${MODE_FILE}" "${KUBECONFIG_FILE}"
	[[ -n "${quiet}" ]] || log "kind cluster ${CLUSTER_NAME} down"
}

load_image() {
	[[ $# -gt 0 ]] || die "usage: hack/kind.sh load-image FILE.tar..."
	cluster_exists || die "kind cluster ${CLUSTER_NAME} is not up (hack/kind.sh up)"
	local f t
	for f in "$@"; do
		[[ -f "${f}" ]] || die "image tarball ${f} not found"
		t="$(now_ns)"
		kind_ load image-archive "${f}" --name "${CLUSTER_NAME}" >&2 || die "kind load image-archive ${f} failed"
		log "loaded ${f} in $(since "${t}")s"
	done
}

status() {
	echo "kind cluster ${CLUSTER_NAME} (${KIND_DIR}, $(mode)):"
	[[ "$(mode)" == own ]] && kd_status
	if cluster_exists; then
		kubectl_ get nodes -o wide
		kubectl_ get pods -n kube-system -o wide
	else
		echo "  cluster: not up"
		return 1
	fi
}

case "${1:-}" in
up) with_dir_lock 9 "${KIND_DIR}" 900 "hack/kind.sh" up_locked ;;
down) with_dir_lock 9 "${KIND_DIR}" 900 "hack/kind.sh" down_locked ;;
status) status ;;
env) echo "${KUBECONFIG_FILE}" ;;
pod-host) pod_host ;;
load-image)
	shift
	load_image "$@"
	;;
-h | --help | help) sed -n '2,30p' "$0" ;;
*) die "usage: hack/kind.sh up|down|status|env|pod-host|load-image FILE.tar..." ;;
esac
