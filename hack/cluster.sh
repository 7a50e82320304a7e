#!/usr/bin/env bash
# Local Kubernetes control plane without Docker: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (which plays kubelet for
# fake nodes), all bound to 127.0.0.1; and, where the machine allows, one real
# node (kubelet + containerd + runc, hack/lib/realnode.sh) for real containers.
#
# Usage: hack/cluster.sh up|down|env|status|restart-apiserver|load-image FILE.tar...|node-ip
#   up      start the cluster (idempotent; builds missing binaries first)
#   down    stop the real node, then the processes this script started (etcd last)
#   restart-apiserver  stop kube-apiserver if it runs, start it again, wait until ready
#   env     print the admin kubeconfig path:
#             kubectl --kubeconfig "$(hack/cluster.sh env)" get nodes
#   status  show each component; exit 0 only if all are running
#   load-image FILE.tar...  import image tarballs into the real node's containerd
#   node-ip print the real node's IP (its bridge address: kubelet, and the host as
#           pods see it, e.g. for a Redis they must reach); exit 1 if no real node runs
#
# Environment:
#   LOCKEDJOB_CLUSTER_DIR        state/logs/pids/kubeconfig folder
#                                (default ${LOCKEDJOB_CACHE}/cluster)
#   LOCKEDJOB_CLUSTER_PORT_BASE  first of 9 ports (default 26440):
#                                +0 etcd client, +1 etcd peer, +3 kube-apiserver,
#                                +4 controller-manager, +5 scheduler; real node:
#                                +6 kubelet (on its bridge IP), +7 kubelet healthz,
#                                +8 containerd stream server (exec, attach)
#   LOCKEDJOB_CLUSTER_NODES      number of fake nodes (default 2)
#   LOCKEDJOB_KCM_API_QPS,       kube-controller-manager's client limits (--kube-api-qps,
#   LOCKEDJOB_KCM_API_BURST      --kube-api-burst; default: its own, 20/30), raised by the
#                                scale benchmark so the cluster is not what it measures
#   LOCKEDJOB_APISERVER_PROFILING  1: serve kube-apiserver's /debug/pprof (the scale
#                                benchmark's -profile); default 0
#   LOCKEDJOB_REAL_NODE          auto (default): add the real node when root, cgroups
#                                are usable and the packages are present or installable,
#                                else say why not; 1: fail if it cannot; 0: no real node
#   LOCKEDJOB_PAUSE_TAR          pause image tarball for the real node (default: built
#                                by `make image-pause` into bin/images/pause.tar)
#   LOCKEDJOB_CACHE, K8S_BIN_DIR see hack/k8s-bin.sh
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"
# shellcheck source=hack/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"
# shellcheck source=hack/lib/net.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/net.sh"

CLUSTER_DIR="${LOCKEDJOB_CLUSTER_DIR:-${LOCKEDJOB_CACHE}/cluster}"
PORT_BASE="${LOCKEDJOB_CLUSTER_PORT_BASE:-26440}"
NODES="${LOCKEDJOB_CLUSTER_NODES:-2}"
[[ "${PORT_BASE}" =~ ^[0-9]+$ && PORT_BASE -ge 1024 && PORT_BASE -le 65526 ]] ||
	die "LOCKEDJOB_CLUSTER_PORT_BASE must be a port number in 1024..65526"
[[ "${NODES}" =~ ^[0-9]+$ && NODES -ge 1 ]] || die "LOCKEDJOB_CLUSTER_NODES must be >= 1"
KCM_API_QPS="${LOCKEDJOB_KCM_API_QPS:-}"
KCM_API_BURST="${LOCKEDJOB_KCM_API_BURST:-}"
[[ -z "${KCM_API_QPS}" || "${KCM_API_QPS}" =~ ^[0-9]+$ ]] || die "LOCKEDJOB_KCM_API_QPS must be a whole number"
[[ -z "${KCM_API_BURST}" || "${KCM_API_BURST}" =~ ^[0-9]+$ ]] || die "LOCKEDJOB_KCM_API_BURST must be a whole number"
case "${LOCKEDJOB_APISERVER_PROFILING:-0}" in
1) APISERVER_PROFILING=true ;;
0) APISERVER_PROFILING=false ;;
*) die "LOCKEDJOB_APISERVER_PROFILING must be 0 or 1" ;;
esac

ETCD_PORT=$((PORT_BASE + 0))
ETCD_PEER_PORT=$((PORT_BASE + 1))
APISERVER_PORT=$((PORT_BASE + 3))
KCM_PORT=$((PORT_BASE + 4))
SCHED_PORT=$((PORT_BASE + 5))

PKI="${CLUSTER_DIR}/pki"
LOGS="${CLUSTER_DIR}/logs"
PIDS="${CLUSTER_DIR}/pids"
KUBECONFIG_ADMIN="${CLUSTER_DIR}/kubeconfig"
SERVICE_CIDR="10.96.0.0/16"
SERVICE_IP="10.96.0.1"

# Start order; stop runs in reverse so etcd goes last.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

kubectl_() { "${K8S_BIN_DIR}/kubectl" --kubeconfig "${KUBECONFIG_ADMIN}" "$@"; }

# shellcheck source=hack/lib/realnode.sh
source "${HACK_DIR}/lib/realnode.sh"

# ---------------------------------------------------------------- processes

# pid_of NAME: the recorded PID of a component if it still runs; see hack/lib/procs.sh.
pid_of() { proc_pid "${PIDS}" "$1"; }

# start NAME ARGS...: start a component detached, logging to logs/NAME.log.
start() {
	local name="$1"
	shift
	proc_start "${PIDS}" "${LOGS}/${name}.log" "${name}" "${K8S_BIN_DIR}/${name}" "$@" || true
	log "started ${name} (pid $(cat "${PIDS}/${name}.pid" 2>/dev/null || echo '?'))"
}

stop() { proc_stop "${PIDS}" "$1" || true; }

stop_all() {
	realnode_down
	local i
	for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
		stop "${COMPONENTS[i]}"
	done
}

fail() { # component message
	local name="$1"
	shift
	log "ERROR: $*"
	proc_log_tail "${LOGS}/${name}.log" 40
	log "stopping what was started"
	stop_all
	exit 1
}

# wait_for NAME TIMEOUT_SECONDS CMD...: poll CMD until it succeeds; fail with
# NAME's log if NAME dies or the deadline passes.
wait_for() { proc_wait "${PIDS}" "$1" "$2" fail "${@:3}"; }

# ---------------------------------------------------------------- setup

ensure_openssl() {
	command -v openssl >/dev/null 2>&1 && return 0
	log "openssl not found; installing it with apt-get (Debian package openssl)"
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl) >&2 ||
		die "could not install openssl; install it and retry"
}

# PKI is created once per cluster dir and reused, so CA and tokens stay stable.
ensure_pki() {
	[[ -f "${PKI}/.done" ]] && return 0
	ensure_openssl
	log "creating CA, serving certificate, service-account key and tokens in ${PKI}"
	rm -rf "${PKI}"
	mkdir -p "${PKI}"
	(
		cd "${PKI}"
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
			-keyout ca.key -out ca.crt -subj "/CN=lockedjob-local-ca" 2>/dev/null
		cat >serving.ext <<EOF
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:${SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EOF
		openssl req -newkey rsa:2048 -nodes -sha256 -keyout apiserver.key -out apiserver.csr \
			-subj "/CN=kube-apiserver" 2>/dev/null
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
			-days 3650 -sha256 -extfile serving.ext -out apiserver.crt 2>/dev/null
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		tok() { openssl rand -hex 24; }
		{
			echo "$(tok),lockedjob-admin,lockedjob-admin,\"system:masters\""
			echo "$(tok),system:kube-controller-manager,system:kube-controller-manager,"
			echo "$(tok),system:kube-scheduler,system:kube-scheduler,"
			echo "$(tok),kwok,kwok,\"system:masters\""
		} >tokens.csv
		touch .done
	) || die "creating PKI failed"
}

token_for() { awk -F, -v u="$1" '$2 == u { print $1 }' "${PKI}/tokens.csv"; }

# write_kubeconfig PATH USER [CREDENTIALS]: a kubeconfig for USER on this cluster. CREDENTIALS are
# the user's lines (indented by 4); by default USER's token from tokens.csv.
write_kubeconfig() {
	local ca creds="${3:-    token: $(token_for "$2")}"
	ca="$(base64 -w0 <"${PKI}/ca.crt")"
	umask 077
	cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lockedjob-local
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: ${ca}
users:
- name: $2
  user:
${creds}
contexts:
- name: lockedjob-local
  context:
    cluster: lockedjob-local
    user: $2
current-context: lockedjob-local
EOF
	mv -f "$1.tmp" "$1"
}

# kwok has no default stages when run standalone: assemble its --config from
# the Stage files shipped in the pinned, go.sum-verified kwok module.
write_kwok_config() {
	local dir
	dir="$(cd "${HACK_DIR}/kwok" && go_wrapper_env && go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -n "${dir}" && -d "${dir}/kustomize/stage" ]] || die "cannot locate sigs.k8s.io/kwok@${KWOK_VERSION} in the module cache"
	local s="${dir}/kustomize/stage" f out="${CLUSTER_DIR}/kwok.yaml"
	{
		echo "# Generated by hack/cluster.sh from sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
		for f in node/fast/node-initialize.yaml \
			node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
			pod/general/pod-create.yaml \
			pod/general/pod-init-container-running.yaml \
			pod/general/pod-init-container-completed.yaml \
			pod/general/pod-ready.yaml \
			pod/general/pod-complete.yaml \
			pod/general/pod-delete.yaml \
			pod/chaos/pod-container-running-failed.yaml \
			pod/chaos/pod-init-container-running-failed.yaml; do
			[[ -f "${s}/${f}" ]] || die "kwok stage file ${f} missing in ${dir}"
			echo "---"
			echo "# ${f}"
			cat "${s}/${f}"
		done
	} >"${out}"
}

nodes_manifest() {
	local i
	for i in $(seq 1 "${NODES}"); do
		cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-${i}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: kwok-node-${i}
    kubernetes.io/role: agent
spec: {}
EOF
	done
}

# True when all nodes are Ready and none has a taint.
nodes_ready_untainted() {
	local out
	out="$(kubectl_ get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints}{"\n"}{end}')" || return 1
	[[ "$(grep -c . <<<"${out}")" -eq "${NODES}" ]] || return 1
	! grep -qv ' True $' <<<"${out}"
}

# ---------------------------------------------------------------- commands

# start_apiserver: start kube-apiserver with the flags of this cluster (used by up and
# restart-apiserver, so a restarted API server is the same server).
start_apiserver() {
	start kube-apiserver \
		--etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
		--bind-address=127.0.0.1 \
		--advertise-address=127.0.0.1 \
		--secure-port="${APISERVER_PORT}" \
		--cert-dir="${CLUSTER_DIR}/run/apiserver" \
		--tls-cert-file="${PKI}/apiserver.crt" \
		--tls-private-key-file="${PKI}/apiserver.key" \
		--client-ca-file="${PKI}/ca.crt" \
		--requestheader-client-ca-file="${PKI}/ca.crt" \
		--requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User \
		--requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--token-auth-file="${PKI}/tokens.csv" \
		--service-account-issuer="https://kubernetes.default.svc.cluster.local" \
		--service-account-key-file="${PKI}/sa.pub" \
		--service-account-signing-key-file="${PKI}/sa.key" \
		--service-cluster-ip-range="${SERVICE_CIDR}" \
		--authorization-mode=Node,RBAC \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--allow-privileged=true \
		--endpoint-reconciler-type=none \
		--shutdown-send-retry-after=true \
		--profiling="${APISERVER_PROFILING}"
}

# all_running: the control plane, and the real node if one was started.
all_running() {
	proc_all_running "${PIDS}" "${COMPONENTS[@]}" && { ! realnode_recorded || realnode_all_running; }
}

any_running() { proc_any_running "${PIDS}" "${COMPONENTS[@]}" || realnode_any_running; }

# up_exit: an up that did not finish (die, a failed wait, a signal) stops what it started.
up_exit() {
	local rc=$?
	[[ ${UP_DONE:-0} -eq 1 ]] && return 0
	log "up did not finish (exit status ${rc}); stopping what was started"
	stop_all
	exit "${rc}"
}

cmd_up() {
	UP_DONE=0
	trap up_exit EXIT
	trap 'log "interrupted"; exit 130' INT TERM
	if all_running && kubectl_ get --raw /readyz >/dev/null 2>&1; then
		UP_DONE=1
		log "cluster already up (${CLUSTER_DIR}); kubeconfig: ${KUBECONFIG_ADMIN}"
		return 0
	fi
	if any_running; then
		log "cluster in ${CLUSTER_DIR} is partly running; restarting it"
		stop_all
	fi

	local b missing=0
	for b in "${K8S_BINARIES[@]}"; do [[ -x "${K8S_BIN_DIR}/${b}" ]] || missing=1; done
	if [[ ${missing} -eq 1 ]]; then
		log "binaries missing in ${K8S_BIN_DIR}; running hack/k8s-bin.sh"
		"${HACK_DIR}/k8s-bin.sh"
	fi

	local p
	for p in "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KCM_PORT}" "${SCHED_PORT}"; do
		port_free "${p}" || { UP_DONE=1; die "port 127.0.0.1:${p} is in use; set LOCKEDJOB_CLUSTER_PORT_BASE to another base"; }
	done
	realnode_decide

	local t0=${SECONDS}
	mkdir -p "${CLUSTER_DIR}" "${LOGS}" "${PIDS}"
	ensure_pki
	write_kwok_config
	# Fresh state on every up; PKI and kubeconfig paths are kept.
	rm -rf "${CLUSTER_DIR}/etcd" "${CLUSTER_DIR}/run"
	mkdir -p "${CLUSTER_DIR}/run/flexvolume" "${CLUSTER_DIR}/run/kcm" "${CLUSTER_DIR}/run/scheduler" "${CLUSTER_DIR}/run/apiserver"
	write_kubeconfig "${KUBECONFIG_ADMIN}" lockedjob-admin
	write_kubeconfig "${CLUSTER_DIR}/kube-controller-manager.kubeconfig" system:kube-controller-manager
	write_kubeconfig "${CLUSTER_DIR}/kube-scheduler.kubeconfig" system:kube-scheduler
	write_kubeconfig "${CLUSTER_DIR}/kwok.kubeconfig" kwok

	start etcd \
		--name=lockedjob-local \
		--data-dir="${CLUSTER_DIR}/etcd" \
		--listen-client-urls="http://127.0.0.1:${ETCD_PORT}" \
		--advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
		--listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
		--initial-cluster="lockedjob-local=http://127.0.0.1:${ETCD_PEER_PORT}" \
		--unsafe-no-fsync \
		--log-level=warn
	wait_for etcd 30 curl -fsS "http://127.0.0.1:${ETCD_PORT}/health"

	start_apiserver
	wait_for kube-apiserver 90 kubectl_ get --raw /readyz
	log "API ready after $((SECONDS - t0))s"

	start kube-controller-manager \
		--kubeconfig="${CLUSTER_DIR}/kube-controller-manager.kubeconfig" \
		--authentication-kubeconfig="${CLUSTER_DIR}/kube-controller-manager.kubeconfig" \
		--authorization-kubeconfig="${CLUSTER_DIR}/kube-controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 \
		--secure-port="${KCM_PORT}" \
		--cert-dir="${CLUSTER_DIR}/run/kcm" \
		--service-account-private-key-file="${PKI}/sa.key" \
		--root-ca-file="${PKI}/ca.crt" \
		--cluster-signing-cert-file="${PKI}/ca.crt" \
		--cluster-signing-key-file="${PKI}/ca.key" \
		--service-cluster-ip-range="${SERVICE_CIDR}" \
		--use-service-account-credentials=true \
		--leader-elect=false \
		--flex-volume-plugin-dir="${CLUSTER_DIR}/run/flexvolume" \
		${KCM_API_QPS:+--kube-api-qps="${KCM_API_QPS}"} \
		${KCM_API_BURST:+--kube-api-burst="${KCM_API_BURST}"} \
		--profiling=false

	start kube-scheduler \
		--kubeconfig="${CLUSTER_DIR}/kube-scheduler.kubeconfig" \
		--authentication-kubeconfig="${CLUSTER_DIR}/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig="${CLUSTER_DIR}/kube-scheduler.kubeconfig" \
		--bind-address=127.0.0.1 \
		--secure-port="${SCHED_PORT}" \
		--cert-dir="${CLUSTER_DIR}/run/scheduler" \
		--leader-elect=false \
		--profiling=false

	start kwok \
		--config="${CLUSTER_DIR}/kwok.yaml" \
		--kubeconfig="${CLUSTER_DIR}/kwok.kubeconfig" \
		--manage-all-nodes=false \
		--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--node-lease-duration-seconds=40 \
		--cidr=10.244.0.0/16 \
		--node-ip=127.0.0.1

	wait_for kube-controller-manager 60 curl -fsSk "https://127.0.0.1:${KCM_PORT}/healthz"
	wait_for kube-scheduler 60 curl -fsSk "https://127.0.0.1:${SCHED_PORT}/healthz"

	nodes_manifest | kubectl_ apply -f - >/dev/null || fail kube-apiserver "creating fake nodes failed"
	wait_for kwok 60 nodes_ready_untainted
	wait_for kube-controller-manager 60 kubectl_ -n default get serviceaccount default
	log "control plane up after $((SECONDS - t0))s: ${NODES} kwok node(s) Ready, untainted"
	realnode_up
	UP_DONE=1
	log "cluster up after $((SECONDS - t0))s"
	log "kubeconfig: ${KUBECONFIG_ADMIN}   (kubectl --kubeconfig \"\$(hack/cluster.sh env)\" get nodes)"
}

# cmd_restart_apiserver: stop kube-apiserver if it runs and start it again on the same etcd, for
# fault tests that take one cluster's API server away (test/fault).
cmd_restart_apiserver() {
	[[ -n "$(pid_of etcd)" ]] || die "etcd of ${CLUSTER_DIR} is not running; use up"
	stop kube-apiserver
	start_apiserver
	wait_for kube-apiserver 90 kubectl_ get --raw /readyz
	log "kube-apiserver restarted"
}

cmd_down() {
	# Also after a crash, when nothing runs: the real node may have left cgroups, a bridge, files.
	realnode_down
	if ! any_running; then
		log "cluster in ${CLUSTER_DIR} is not running"
		rm -f "${PIDS}"/*.pid "${PIDS}"/*.exe 2>/dev/null || true
		return 0
	fi
	stop_all
	log "cluster down (state and logs kept in ${CLUSTER_DIR})"
}

cmd_status() {
	local rc=0
	echo "cluster dir: ${CLUSTER_DIR}"
	echo "kubeconfig:  ${KUBECONFIG_ADMIN}"
	echo "apiserver:   https://127.0.0.1:${APISERVER_PORT}   etcd: http://127.0.0.1:${ETCD_PORT}"
	proc_status "${PIDS}" "${COMPONENTS[@]}" || rc=1
	realnode_status || rc=1
	if [[ ${rc} -eq 0 ]]; then
		kubectl_ get nodes 2>&1 | sed 's/^/  /' || rc=1
	fi
	return "${rc}"
}

with_lock() { with_dir_lock 9 "${CLUSTER_DIR}" 300 hack/cluster.sh "$@"; }

# cmd_load_image FILE...: import image tarballs into the real node's containerd.
cmd_load_image() {
	[[ $# -gt 0 ]] || die "usage: hack/cluster.sh load-image FILE.tar..."
	[[ -n "$(rn_pid containerd)" ]] || die "the real node of ${CLUSTER_DIR} is not running (see hack/cluster.sh status)"
	rn_import "$@"
}

cmd_node_ip() {
	[[ -n "$(rn_pid kubelet)" ]] || die "the real node of ${CLUSTER_DIR} is not running"
	echo "${RN_IP}"
}

case "${1:-}" in
up) with_lock cmd_up ;;
node-ip) cmd_node_ip ;;
load-image) shift && with_lock cmd_load_image "$@" ;;
down) with_lock cmd_down ;;
restart-apiserver) with_lock cmd_restart_apiserver ;;
env) echo "${KUBECONFIG_ADMIN}" ;;
status) cmd_status ;;
*)
	sed -n '2,33p' "$0" >&2
	exit 2
	;;
esac
