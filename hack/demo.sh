#!/usr/bin/env bash
# End-to-end demo of lockedjob on this machine, without Docker: the local
# control plane (hack/cluster.sh), a throwaway redis-server, the manager built
# from this checkout and run as a local process, and the three sample
# LockedJobs and the guarded Job (a plain Job with the lock label) of
# config/samples contending for one lock. Where the cluster has its real node (root, containerd: hack/cluster.sh says), the samples run the
# workload image (cmd/fencedwriter) as real containers that write to a fenced
# store with their fencing tokens; elsewhere kwok simulates their pods. With
# LOCKEDJOB_DEMO_CRON=1 a guarded CronJob joins them, whose runs, each longer than
# the minute between them, wait for the lock one after another. See docs/demo.md.
#
# Usage: hack/demo.sh up|down|status      (make demo / make demo-down)
#   up      build what is missing, start cluster + Redis + manager, (re)create
#           the demo namespace, apply the samples, show progress until all
#           three LockedJobs finished (with LOCKEDJOB_DEMO_CRON=1, then until
#           two runs of the CronJob ended). Everything stays up for inspection.
#   down    stop the manager and redis-server this script started (checking
#           each PID still runs that binary), then the local cluster if
#           `up` started it.
#   status  show what runs.
#
# Environment:
#   LOCKEDJOB_DEMO_DIR           state folder: manager binary, pids, logs
#                                (default ${LOCKEDJOB_CACHE}/demo)
#   LOCKEDJOB_DEMO_NAMESPACE     namespace of the samples (default demo)
#   LOCKEDJOB_DEMO_REDIS_PORT    redis-server port on 127.0.0.1 (default 26379)
#   LOCKEDJOB_DEMO_STORE_PORT    the fenced store's redis-server, on 127.0.0.1 and
#                                the real node's IP (default 26380)
#   LOCKEDJOB_DEMO_PROBE_PORT    manager /healthz,/readyz (default 26481)
#   LOCKEDJOB_DEMO_METRICS_PORT  manager plain-HTTP /metrics (default 26480)
#   LOCKEDJOB_DEMO_TIMEOUT       seconds to wait for the samples (default 180)
#   LOCKEDJOB_DEMO_CRON          1: also apply the guarded CronJob sample and show
#                                two of its runs waiting their turn (about 3 min
#                                more: runs come on the minute); default 0
#   LOCKEDJOB_DEMO_CRON_TIMEOUT  seconds to wait for its two runs after the
#                                LockedJobs finished (default 300)
#   LOCKEDJOB_CACHE, LOCKEDJOB_CLUSTER_DIR, LOCKEDJOB_CLUSTER_PORT_BASE,
#   K8S_BIN_DIR                  see hack/cluster.sh
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"
# shellcheck source=hack/lib/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/procs.sh"

DEMO_DIR="${LOCKEDJOB_DEMO_DIR:-${LOCKEDJOB_CACHE}/demo}"
NS="${LOCKEDJOB_DEMO_NAMESPACE:-demo}"
REDIS_PORT="${LOCKEDJOB_DEMO_REDIS_PORT:-26379}"
STORE_PORT="${LOCKEDJOB_DEMO_STORE_PORT:-26380}"
PROBE_PORT="${LOCKEDJOB_DEMO_PROBE_PORT:-26481}"
METRICS_PORT="${LOCKEDJOB_DEMO_METRICS_PORT:-26480}"
TIMEOUT="${LOCKEDJOB_DEMO_TIMEOUT:-180}"
CRON_MODE="${LOCKEDJOB_DEMO_CRON:-0}"
CRON_TIMEOUT="${LOCKEDJOB_DEMO_CRON_TIMEOUT:-300}"
OPERATOR_NS="lockedjob-system"
# ServiceAccount the rendered config/default creates (namePrefix lockedjob-).
OPERATOR_SA="lockedjob-controller-manager"
SAMPLES=(migrate-orders migrate-invoices migrate-users-urgent)
# The guarded Job of config/samples: a plain Job labelled for the same lock, and what the demo shows
# of it (its state is in its annotations: there is no object of the operator's).
GUARDED=report-invoices
GUARDED_COLUMNS='JOB:.metadata.name,SUSPENDED:.spec.suspend,GUARD:.metadata.annotations.batch\.lockedjob\.dev/guard,FENCE:.metadata.annotations.batch\.lockedjob\.dev/fencing-token,SUCCEEDED:.status.succeeded'
# The guarded CronJob of config/samples (LOCKEDJOB_DEMO_CRON=1; not in its kustomization.yaml), how
# many of its runs the demo waits for, and the view of every guarded Job of the lock while they run:
# created, then started (unsuspended) once it holds the lock, then completed.
CRON=compact-orders
CRON_SAMPLE=batch_v1_guarded_cronjob.yaml
CRON_RUNS=2
LOCK_LABEL=batch.lockedjob.dev/lock
CRON_COLUMNS='JOB:.metadata.name,CREATED:.metadata.creationTimestamp,SUSPENDED:.spec.suspend,GUARD:.metadata.annotations.batch\.lockedjob\.dev/guard,FENCE:.metadata.annotations.batch\.lockedjob\.dev/fencing-token,STARTED:.status.startTime,COMPLETED:.status.completionTime'

CLUSTER_SH="${HACK_DIR}/cluster.sh"
KUBECTL="${K8S_BIN_DIR}/kubectl"
MANAGER_BIN="${DEMO_DIR}/manager"
PLUGIN_BIN="${DEMO_DIR}/kubectl-lockedjob"
MANAGER_KUBECONFIG="${DEMO_DIR}/manager.kubeconfig"
REDIS_DIR="${DEMO_DIR}/redis"
STORE_DIR="${DEMO_DIR}/store"
SAMPLES_DIR="${DEMO_DIR}/samples"
# The fenced store the samples' containers write to (fencedwriter's default name for the lock).
STORE_NAME="fencedstore:nightly-migration"
REAL_NODE_LABEL="lockedjob.dev/real-node"
FENCEDWRITER_BIN="${LOCKEDJOB_ROOT}/bin/images/bin/fencedwriter"
NODE_IP="" # the real node's IP once found; empty: kwok only
STARTED_CLUSTER_MARK="${DEMO_DIR}/cluster-started-by-demo"

for v in REDIS_PORT STORE_PORT PROBE_PORT METRICS_PORT; do
	[[ "${!v}" =~ ^[0-9]+$ && ${!v} -ge 1024 && ${!v} -le 65535 ]] || die "LOCKEDJOB_DEMO_${v} must be a port number in 1024..65535"
done
[[ "${TIMEOUT}" =~ ^[0-9]+$ && TIMEOUT -ge 10 ]] || die "LOCKEDJOB_DEMO_TIMEOUT must be a number of seconds >= 10"
[[ "${CRON_MODE}" == 0 || "${CRON_MODE}" == 1 ]] || die "LOCKEDJOB_DEMO_CRON must be 0 or 1"
[[ "${CRON_TIMEOUT}" =~ ^[0-9]+$ && CRON_TIMEOUT -ge 150 ]] || die "LOCKEDJOB_DEMO_CRON_TIMEOUT must be a number of seconds >= 150"

step() { printf '\n==> %s\n' "$*" >&2; }

# Children must not inherit fd 8, the lock of this script (see with_lock):
# long-running processes started by cluster.sh would hold it forever.
cluster() { bash "${CLUSTER_SH}" "$@" 8>&-; }
ADMIN_KUBECONFIG="$(cluster env)"
k() { "${KUBECTL}" --kubeconfig "${ADMIN_KUBECONFIG}" "$@"; }

# ---------------------------------------------------------------- processes
# Bookkeeping as in hack/cluster.sh: see hack/lib/procs.sh.
pid_of() { proc_pid "${DEMO_DIR}" "$1"; }

start_proc() { # NAME BINARY ARGS...
	local name="$1"
	proc_start "${DEMO_DIR}" "${DEMO_DIR}/${name}.log" "$@" || fail_log "${name}" "${name} did not start"
	log "started ${name} (pid $(pid_of "${name}"), log ${DEMO_DIR}/${name}.log)"
}

stop_proc() { proc_stop "${DEMO_DIR}" "$1"; } # NAME; returns 1 if it was not running

tail_log() { # NAME [LINES]
	proc_log_tail "${DEMO_DIR}/$1.log" "${2:-30}"
}

fail_log() { # NAME MESSAGE
	log "ERROR: $2"
	if [[ "${CRON_MODE}" == 1 ]] && k get cronjob "${CRON}" -n "${NS}" >/dev/null 2>&1; then
		if suspend_cron; then log "suspended CronJob ${CRON}: it makes no more runs while you look"; fi
	fi
	tail_log "$1" 40
	cluster status >&2 || log "the local cluster is not (fully) running: see $(dirname "${ADMIN_KUBECONFIG}")/logs/"
	log "nothing was stopped; inspect, then run: make demo-down"
	exit 1
}

# ---------------------------------------------------------------- up steps

check_prereqs() {
	local missing=()
	command -v go >/dev/null 2>&1 || missing+=("go (https://go.dev/dl/; the version in go.mod)")
	command -v curl >/dev/null 2>&1 || missing+=("curl (sudo apt-get install -y curl)")
	command -v setsid >/dev/null 2>&1 || missing+=("setsid (sudo apt-get install -y util-linux)")
	if ! command -v redis-server >/dev/null 2>&1; then
		if [[ "$(id -u)" -eq 0 ]]; then
			bash "${HACK_DIR}/ensure-redis.sh"
		else
			missing+=("redis-server (sudo apt-get install -y redis-server)")
		fi
	fi
	if ((${#missing[@]} > 0)); then
		log "ERROR: missing tools:"
		printf '    %s\n' "${missing[@]}" >&2
		exit 1
	fi
}

build() {
	local b need_k8s=0
	for b in "${K8S_BINARIES[@]}"; do [[ -x "${K8S_BIN_DIR}/${b}" ]] || need_k8s=1; done
	if [[ ${need_k8s} -eq 1 ]]; then
		step "building the Kubernetes binaries into ${K8S_BIN_DIR} (first time ~10 min)"
		bash "${HACK_DIR}/k8s-bin.sh" 8>&-
	fi
	step "building the manager from this checkout into ${MANAGER_BIN}"
	local t0=${SECONDS}
	mkdir -p "${DEMO_DIR}"
	# go build skips the link when the binary is up to date, and otherwise
	# renames a new file into place: a running manager keeps its old inode
	# (/proc/PID/exe "... (deleted)", which pid_of accepts) until restarted.
	(cd "${LOCKEDJOB_ROOT}" && go build -o "${MANAGER_BIN}" ./cmd/manager) ||
		die "go build ./cmd/manager failed"
	log "manager binary ready ($((SECONDS - t0))s)"
	if [[ "${CRON_MODE}" == 1 ]]; then
		step "building the kubectl plugin (kubectl lockedjob) into ${PLUGIN_BIN}"
		t0=${SECONDS}
		(cd "${LOCKEDJOB_ROOT}" && go build -o "${PLUGIN_BIN}" ./cmd/kubectl-lockedjob) ||
			die "go build ./cmd/kubectl-lockedjob failed"
		log "plugin binary ready ($((SECONDS - t0))s)"
	fi
}

cluster_up() {
	step "starting the local control plane (hack/cluster.sh up)"
	if ! cluster status >/dev/null 2>&1; then
		date >"${STARTED_CLUSTER_MARK}"
	fi
	cluster up
}

redis_up() {
	step "starting redis-server on 127.0.0.1:${REDIS_PORT} (no persistence)"
	local pid
	pid="$(pid_of redis)"
	if [[ -n "${pid}" ]]; then
		redis_cli PING >/dev/null || fail_log redis "redis-server (pid ${pid}) does not answer"
		log "redis-server already running (pid ${pid}); reusing it"
		return 0
	fi
	port_free "${REDIS_PORT}" ||
		die "port 127.0.0.1:${REDIS_PORT} is in use by something this demo did not start; set LOCKEDJOB_DEMO_REDIS_PORT"
	rm -rf "${REDIS_DIR}"
	mkdir -p "${REDIS_DIR}"
	start_proc redis "$(command -v redis-server)" \
		--bind 127.0.0.1 --port "${REDIS_PORT}" --dir "${REDIS_DIR}" \
		--save '' --appendonly no --daemonize no --protected-mode yes
	proc_wait "${DEMO_DIR}" redis 20 fail_log redis_ping "${REDIS_PORT}"
}

# redis_ping PORT: true once the redis-server on 127.0.0.1:PORT answers PONG.
redis_ping() { CLI_PORT="$1" redis_cli PING 2>/dev/null | grep -q PONG; }

# redis_cli ARGS...: a tiny RESP client over /dev/tcp, so redis-tools is not needed
# (port CLI_PORT, default REDIS_PORT).
redis_cli() {
	local arg
	exec 3<>"/dev/tcp/127.0.0.1/${CLI_PORT:-${REDIS_PORT}}" || return 1
	{
		printf '*%d\r\n' "$#"
		for arg in "$@"; do printf '$%d\r\n%s\r\n' "${#arg}" "${arg}"; done
	} >&3
	local line
	IFS= read -r -t 5 line <&3 || { exec 3>&-; return 1; }
	exec 3>&-
	printf '%s\n' "${line%$'\r'}"
	[[ "${line}" != -* ]]
}

# real_node_up: find the cluster's real node; with one, build and load the workload image and
# start the fenced store where its pods reach it. Without one the samples run on kwok.
real_node_up() {
	NODE_IP="$(k get nodes -l "${REAL_NODE_LABEL}=true" \
		-o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}' 2>/dev/null || true)"
	if [[ -z "${NODE_IP}" ]]; then
		step "no real node in the cluster (hack/cluster.sh said why when it started): the samples' pods are simulated by kwok"
		return 0
	fi
	step "real node at ${NODE_IP}: building the workload image (make image-fencedwriter) and loading it into the node"
	make -s -C "${LOCKEDJOB_ROOT}" image-fencedwriter 8>&- >&2 || die "make image-fencedwriter failed"
	cluster load-image "${LOCKEDJOB_ROOT}/bin/images/fencedwriter.tar" >&2
	step "starting the fenced store: redis-server on 127.0.0.1:${STORE_PORT} and ${NODE_IP}:${STORE_PORT}, for the containers"
	if [[ -n "$(pid_of store)" ]]; then
		stop_proc store
	fi
	port_free "${STORE_PORT}" ||
		die "port ${STORE_PORT} is in use by something this demo did not start; set LOCKEDJOB_DEMO_STORE_PORT"
	rm -rf "${STORE_DIR}"
	mkdir -p "${STORE_DIR}"
	# protected-mode off: the pods connect from the node's bridge, not loopback; only this
	# machine's own pod network reaches that address.
	start_proc store "$(command -v redis-server)" \
		--bind "127.0.0.1 ${NODE_IP}" --port "${STORE_PORT}" --dir "${STORE_DIR}" \
		--save "" --appendonly no --daemonize no --protected-mode no
	proc_wait "${DEMO_DIR}" store 20 fail_log redis_ping "${STORE_PORT}"
}

# samples_kustomization: config/samples as they are on kwok; on the real node, with the store's
# address, the node's selector and toleration, and the image taken from the node (never pulled).
samples_kustomization() {
	mkdir -p "${SAMPLES_DIR}"
	# kustomize takes only relative resource paths.
	local samples
	samples="$(realpath --relative-to="${SAMPLES_DIR}" "${LOCKEDJOB_ROOT}/config/samples")"
	{
		printf '# Written by hack/demo.sh: config/samples.\nresources:\n- %s\n' "${samples}"
		real_node_patches "LockedJob /spec/jobTemplate/spec/template" "Job /spec/template"
	} >"${SAMPLES_DIR}/kustomization.yaml"
}

# cron_kustomization: the guarded CronJob of config/samples, as samples_kustomization writes the
# others (copied in: kustomize loads no file outside the kustomization's folder).
cron_kustomization() {
	mkdir -p "${SAMPLES_DIR}/cron"
	cp "${LOCKEDJOB_ROOT}/config/samples/${CRON_SAMPLE}" "${SAMPLES_DIR}/cron/"
	{
		printf '# Written by hack/demo.sh: the guarded CronJob of config/samples.\nresources:\n- %s\n' "${CRON_SAMPLE}"
		real_node_patches "CronJob /spec/jobTemplate/spec/template"
	} >"${SAMPLES_DIR}/cron/kustomization.yaml"
}

# real_node_patches "KIND POD_TEMPLATE_PATH"...: with a real node, the patches that point each
# kind's pods at the store and the node; nothing on kwok.
real_node_patches() {
	[[ -n "${NODE_IP}" ]] || return 0
	local pod
	echo "patches:"
	for pod in "$@"; do
		cat <<EOF
- target: {kind: ${pod% *}}
  patch: |-
    - {op: replace, path: ${pod#* }/spec/containers/0/env/0/value, value: "${NODE_IP}:${STORE_PORT}"}
    - {op: replace, path: ${pod#* }/spec/containers/0/imagePullPolicy, value: Never}
    - {op: add, path: ${pod#* }/spec/nodeSelector, value: {${REAL_NODE_LABEL}: "true"}}
    - {op: add, path: ${pod#* }/spec/tolerations, value: [{key: ${REAL_NODE_LABEL}, operator: Equal, value: "true", effect: NoSchedule}]}
EOF
	done
}

# show_containers: each sample's own container log (it prints its fencing token), a late write
# under the oldest token, which the store refuses, and the store's history with its counts.
show_containers() {
	[[ -n "${NODE_IP}" ]] || return 0
	local name job lowest="" lowest_name="" fence
	for name in "${SAMPLES[@]}"; do
		job="$(k get lj "${name}" -n "${NS}" -o jsonpath='{.status.jobName}')"
		fence="$(k get lj "${name}" -n "${NS}" -o jsonpath='{.status.fencingToken}')"
		step "kubectl logs job/${job} -n ${NS}   (LockedJob ${name}, fencing token ${fence}: the container's own log)"
		k logs "job/${job}" -n "${NS}" || log "no log for job/${job}"
		if [[ -z "${lowest}" || "${fence}" -lt "${lowest}" ]]; then
			lowest="${fence}" lowest_name="${name}"
		fi
	done
	fence="$(k get job "${GUARDED}" -n "${NS}" -o jsonpath='{.metadata.annotations.batch\.lockedjob\.dev/fencing-token}')"
	step "kubectl logs job/${GUARDED} -n ${NS}   (guarded Job, fencing token ${fence}: the container's own log)"
	k logs "job/${GUARDED}" -n "${NS}" || log "no log for job/${GUARDED}"
	if [[ "${CRON_MODE}" == 1 ]]; then
		while IFS='|' read -r job _ _ _ fence _; do
			step "kubectl logs job/${job} -n ${NS}   (run of CronJob ${CRON}, fencing token ${fence}: the container's own log)"
			k logs "job/${job}" -n "${NS}" || log "no log for job/${job}"
		done < <(guarded_jobs | awk -F'|' -v c="${CRON}" '$2 == c')
	fi
	step "a late write with ${lowest_name}'s fencing token ${lowest}, as a paused old holder would make it: the store refuses it"
	LOCKEDJOB_FENCING_TOKEN="${lowest}" LOCKEDJOB_LOCK=nightly-migration \
		"${FENCEDWRITER_BIN}" --store-addr "127.0.0.1:${STORE_PORT}" --writes 1 >&2 || true
	step "the fenced store's history (${STORE_NAME})"
	"${FENCEDWRITER_BIN}" --store-addr "127.0.0.1:${STORE_PORT}" --store "${STORE_NAME}" --show
}

# The kustomize overlay config/default without the Deployment (the manager runs
# here as a process) and the metrics Service: Namespace lockedjob-system,
# ServiceAccount, Roles, ClusterRoles and bindings, and the admission gate of
# guarded Jobs (config/guard), so a labelled Job waits for its lock here too.
render_rbac() {
	k kustomize "${LOCKEDJOB_ROOT}/config/default" | awk '
		function flush() { if (doc != "" && keep) printf "---\n%s", doc; doc = ""; keep = 0 }
		/^---$/ { flush(); next }
		/^kind: (Namespace|ServiceAccount|Role|ClusterRole|RoleBinding|ClusterRoleBinding|(Mutating|Validating)AdmissionPolicy(Binding)?)$/ { keep = 1 }
		{ doc = doc $0 "\n" }
		END { flush() }'
}

install_manifests() {
	step "installing the CRDs (kubectl apply --server-side -k config/crd)"
	k apply --server-side --force-conflicts -k "${LOCKEDJOB_ROOT}/config/crd"
	# Not `kubectl wait --for=condition=Established`: it fails at once while the CRD has no
	# conditions yet, which the full Job template schema makes long enough to see.
	local deadline=$((SECONDS + 60)) established crd
	for crd in lockedjobs locks clusterlocks; do
		established=""
		until [[ "${established}" == True ]]; do
			((SECONDS < deadline)) || die "CRD ${crd}.batch.lockedjob.dev not Established within 60s"
			sleep 0.2
			established="$(k get crd "${crd}.batch.lockedjob.dev" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}')"
		done
	done
	step "installing namespace ${OPERATOR_NS}, RBAC and the admission gate (config/default rendered, minus its Deployment and Service)"
	local rbac
	rbac="$(render_rbac)"
	[[ -n "${rbac}" ]] || die "kubectl kustomize config/default rendered no RBAC"
	k apply -f - <<<"${rbac}"
	wait_for_gate
}

# wait_for_gate: the API server takes a moment to put new admission policies in force, and a
# labelled Job created before that runs unguarded (the operator marks it so). The samples hold one,
# so wait until a labelled Job, sent as a dry run (nothing stays), comes back suspended.
wait_for_gate() {
	local deadline=$((SECONDS + 30)) suspended="" probe
	probe='{"apiVersion": "batch/v1", "kind": "Job",
	  "metadata": {"name": "gate-probe", "labels": {"batch.lockedjob.dev/lock": "gate-probe"}},
	  "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "probe"}]}}}}'
	until [[ "${suspended}" == true ]]; do
		((SECONDS < deadline)) || die "the admission gate of guarded Jobs (config/guard) did not act within 30s"
		sleep 0.2
		suspended="$(k create --dry-run=server -n "${OPERATOR_NS}" -o jsonpath='{.spec.suspend}' -f - <<<"${probe}" 2>/dev/null || true)"
	done
	step "the admission gate of guarded Jobs acts: a labelled Job is created suspended"
}

# The manager runs as the ServiceAccount the RBAC above binds, with a token
# from the TokenRequest API, so the demo exercises the shipped permissions.
write_manager_kubeconfig() {
	local token server ca
	token="$(k create token "${OPERATOR_SA}" -n "${OPERATOR_NS}" --duration=24h)" ||
		die "could not create a token for ServiceAccount ${OPERATOR_NS}/${OPERATOR_SA}"
	server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
	ca="$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
	(
		umask 077
		cat >"${MANAGER_KUBECONFIG}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lockedjob-local
  cluster:
    server: ${server}
    certificate-authority-data: ${ca}
users:
- name: ${OPERATOR_SA}
  user:
    token: ${token}
contexts:
- name: lockedjob-local
  context:
    cluster: lockedjob-local
    user: ${OPERATOR_SA}
    namespace: ${OPERATOR_NS}
current-context: lockedjob-local
EOF
	)
}

manager_up() {
	step "starting the manager (ServiceAccount ${OPERATOR_NS}/${OPERATOR_SA}, Redis 127.0.0.1:${REDIS_PORT})"
	# Always a fresh process: it runs the binary just built, with a fresh token.
	stop_proc manager || true
	local p
	for p in "${PROBE_PORT}" "${METRICS_PORT}"; do
		port_free "${p}" || die "port 127.0.0.1:${p} is in use; set LOCKEDJOB_DEMO_PROBE_PORT / LOCKEDJOB_DEMO_METRICS_PORT"
	done
	write_manager_kubeconfig
	start_proc manager "${MANAGER_BIN}" \
		--kubeconfig "${MANAGER_KUBECONFIG}" \
		--namespace "${OPERATOR_NS}" \
		--redis-addr "127.0.0.1:${REDIS_PORT}" \
		--health-probe-bind-address "127.0.0.1:${PROBE_PORT}" \
		--metrics-bind-address "127.0.0.1:${METRICS_PORT}" --metrics-secure=false \
		--leader-elect
	local t0=${SECONDS} deadline=$((SECONDS + 60))
	until curl -fsS "http://127.0.0.1:${PROBE_PORT}/readyz" >/dev/null 2>&1; do
		[[ -n "$(pid_of manager)" ]] || fail_log manager "the manager exited"
		((SECONDS < deadline)) || fail_log manager "the manager is not ready after 60s (/readyz on :${PROBE_PORT})"
		sleep 0.2
	done
	log "manager ready after $((SECONDS - t0))s (http://127.0.0.1:${PROBE_PORT}/readyz, metrics http://127.0.0.1:${METRICS_PORT}/metrics)"
}

namespace_up() {
	if k get namespace "${NS}" >/dev/null 2>&1; then
		step "namespace ${NS} exists from an earlier run: deleting it (and its LockedJobs, Jobs, pods) for a fresh run"
		k delete namespace "${NS}" --wait=true --timeout=120s ||
			fail_log manager "namespace ${NS} was not deleted within 120s"
	fi
	step "creating namespace ${NS}"
	k create namespace "${NS}"
}

apply_samples() {
	local where="kwok nodes"
	[[ -n "${NODE_IP}" ]] && where="real containers on the real node"
	step "applying config/samples to namespace ${NS}: three LockedJobs and a guarded Job, one lock, ${where}"
	samples_kustomization
	k apply -n "${NS}" -k "${SAMPLES_DIR}"
}

# watch_samples T0_NANOS: print `kubectl get lj` with a timestamp each time a
# LockedJob's state changes (phase, holder, blocked-by, fence, queue, job,
# message; not the Age clock). Works without a TTY. Returns when all
# samples Succeeded; exits with the manager's log tail on failure or timeout.
watch_samples() {
	step "progress: a new table each time something changes (timeout ${TIMEOUT}s)"
	local t0="$1" deadline sig last="" phases table
	deadline=$((SECONDS + TIMEOUT))
	local sigpath='{range .items[*]}{.metadata.name}|{.status.phase}|{.status.holder}|{.status.blockedBy}|{.status.fencingToken}|{.status.queuePosition}|{.status.jobName}|{.status.message}{"\n"}{end}'
	local guarded
	while :; do
		guarded="$(k get job "${GUARDED}" -n "${NS}" -o jsonpath='{.spec.suspend}|{.metadata.annotations.batch\.lockedjob\.dev/guard}|{.metadata.annotations.batch\.lockedjob\.dev/fencing-token}' 2>/dev/null || true)"
		if sig="$(k get lj -n "${NS}" -o jsonpath="${sigpath}" 2>/dev/null)${guarded}" && [[ "${sig}" != "${last}" ]]; then
			last="${sig}"
			table="$(k get lj -n "${NS}" 2>&1 || true)"$'\n\n'"$(k get job "${GUARDED}" -n "${NS}" -o custom-columns="${GUARDED_COLUMNS}" 2>&1 || true)"$'\n\n'"$(k get locks -n "${NS}" 2>&1 || true)"
			printf '\n--- %s  +%ss after apply\n%s\n' "$(date +%H:%M:%S.%1N)" "$(since "${t0}")" "${table}"
			phases="$(awk -F'|' 'NF > 1 { print $2 }' <<<"${sig}")"
			# The guarded Job has ended once its guard says Released (or Lost, Unguarded).
			if [[ "$(grep -cE '^(Succeeded|Failed|LockLost)$' <<<"${phases}")" -ge ${#SAMPLES[@]} && "${guarded}" =~ \|(Released|Lost|Unguarded)\| ]]; then
				if [[ "$(grep -c '^Succeeded$' <<<"${phases}")" -ge ${#SAMPLES[@]} && "${guarded}" == *"|Released|"* ]]; then
					return 0
				fi
				k get jobs,pods -n "${NS}" >&2 || true
				fail_log manager "not every LockedJob succeeded"
			fi
		fi
		[[ -n "$(pid_of manager)" ]] || fail_log manager "the manager exited"
		if ((SECONDS >= deadline)); then
			k get lj,jobs,pods -n "${NS}" -o wide >&2 || true
			fail_log manager "timed out after ${TIMEOUT}s"
		fi
		sleep 0.5
	done
}

# guarded_jobs: the Jobs in the namespace that carry the lock label, sorted by name (the CronJob's
# are named after their scheduled minute), one a line: name|owner|suspend|guard|fence|succeeded.
guarded_jobs() {
	k get jobs -n "${NS}" -l "${LOCK_LABEL}" -o jsonpath='{range .items[*]}{.metadata.name}|{.metadata.ownerReferences[*].name}|{.spec.suspend}|{.metadata.annotations.batch\.lockedjob\.dev/guard}|{.metadata.annotations.batch\.lockedjob\.dev/fencing-token}|{.status.succeeded}{"\n"}{end}' | sort
}

# why JOB: the plugin's explanation of a guarded Job, as a user would ask for it.
why() {
	printf '\n$ kubectl lockedjob why job/%s -n %s\n' "$1" "${NS}"
	"${PLUGIN_BIN}" --kubeconfig "${ADMIN_KUBECONFIG}" -n "${NS}" why "job/$1" || log "kubectl lockedjob why job/$1 failed"
}

# suspend_cron: the CronJob makes no more runs (those it made run on), also when the demo fails.
suspend_cron() { k patch cronjob "${CRON}" -n "${NS}" --type merge -p '{"spec":{"suspend":true}}' >/dev/null; }

cron_fail() { # MESSAGE
	k get cronjob,jobs,pods -n "${NS}" -o wide >&2 || true
	fail_log manager "$1"
}

# watch_cron: applies the guarded CronJob (LOCKEDJOB_DEMO_CRON=1) once the other samples are done,
# so that its runs contend with each other alone, and follows them until CRON_RUNS of them ended.
# Prints the guarded Jobs of the lock each time one changes; suspends the CronJob once it made
# CRON_RUNS runs; asks the plugin why a run waits the first time it is seen waiting while another
# run holds the lock, and at the end how the first run ended. Returns when every run completed and
# released the lock; exits with the manager's log tail on a failed run or timeout.
watch_cron() {
	local t0 deadline=$((SECONDS + CRON_TIMEOUT)) jobs last="" runs n suspended=0 held ended
	local name susp guard fence
	local -A explained=()
	step "applying the guarded CronJob of config/samples (${CRON_SAMPLE}) to namespace ${NS}: a run every minute, each about 75 s, so each run waits for the one before (timeout ${CRON_TIMEOUT}s)"
	cron_kustomization
	t0="$(now_ns)"
	k apply -n "${NS}" -k "${SAMPLES_DIR}/cron"
	while :; do
		jobs="$(guarded_jobs 2>/dev/null)" || jobs=""
		runs="$(awk -F'|' -v c="${CRON}" '$2 == c' <<<"${jobs}")"
		n="$(grep -c . <<<"${runs}" || true)"
		if [[ "${jobs}" != "${last}" ]]; then
			last="${jobs}"
			printf '\n--- %s  +%ss after the CronJob was applied\n$ kubectl get jobs -l %s -n %s -o custom-columns=...\n%s\n' \
				"$(date +%H:%M:%S.%1N)" "$(since "${t0}")" "${LOCK_LABEL}" "${NS}" \
				"$(k get jobs -n "${NS}" -l "${LOCK_LABEL}" --sort-by=.metadata.creationTimestamp -o custom-columns="${CRON_COLUMNS}" 2>&1 || true)"
		fi
		if ((n >= CRON_RUNS && suspended == 0)); then
			suspend_cron || cron_fail "could not suspend CronJob ${CRON}"
			suspended=1
			log "CronJob ${CRON} made ${n} runs: suspended it (spec.suspend), so it makes no more; its runs go on"
		fi
		# Who holds the lock now (the LockedJobs are done): a guarded Job whose guard says Held.
		held="$(awk -F'|' '$4 == "Held" { print $1 }' <<<"${jobs}")"
		while IFS='|' read -r name _ susp guard fence _; do
			[[ -n "${name}" && "${susp}" == true && -z "${guard}${fence}" && -n "${held}" && -z "${explained[${name}]:-}" ]] || continue
			explained[${name}]=1
			why "${name}"
		done <<<"${runs}"
		ended="$(grep -cE '^([^|]*\|){3}(Released|Lost|Unguarded|ScopeNotAllowed)\|' <<<"${runs}" || true)"
		if ((n >= CRON_RUNS && ended == n)); then
			if [[ "$(grep -cE '^([^|]*\|){3}Released\|[^|]*\|1$' <<<"${runs}" || true)" -eq n ]]; then
				break
			fi
			cron_fail "not every run of CronJob ${CRON} succeeded"
		fi
		[[ -n "$(pid_of manager)" ]] || cron_fail "the manager exited"
		((SECONDS < deadline)) || cron_fail "CronJob ${CRON}: ${CRON_RUNS} runs did not end within ${CRON_TIMEOUT}s"
		sleep 0.5
	done
	step "${n} runs of CronJob ${CRON} ran one after another and released the lock, $(since "${t0}")s after the CronJob was applied"
	k get cronjob "${CRON}" -n "${NS}"
	why "$(head -n 1 <<<"${runs}" | cut -d'|' -f1)"
}

print_help() {
	local kc="${ADMIN_KUBECONFIG}" kubectl=kubectl
	command -v kubectl >/dev/null 2>&1 || kubectl="${KUBECTL}"
	cat <<EOF

The cluster, redis-server and manager keep running. Look around:

  ${kubectl} --kubeconfig ${kc} get lj -n ${NS}
  ${kubectl} --kubeconfig ${kc} get lj -n ${NS} -o wide
  ${kubectl} --kubeconfig ${kc} get locks -n ${NS}
  ${kubectl} --kubeconfig ${kc} describe lj migrate-users-urgent -n ${NS}
  ${kubectl} --kubeconfig ${kc} get jobs,pods,events -n ${NS}
  export KUBECONFIG=\$(make -s cluster-env)    # then plain 'kubectl get lj -n ${NS}'
  tail -f ${DEMO_DIR}/manager.log      # the operator's log
EOF
	if [[ "${CRON_MODE}" == 1 ]]; then
		cat <<EOF
  ${kubectl} --kubeconfig ${kc} get cronjob,jobs -n ${NS}
  ${PLUGIN_BIN} --kubeconfig ${kc} -n ${NS} why job/NAME   # kubectl lockedjob
  CronJob ${CRON} is suspended after its ${CRON_RUNS} runs; to let it run on (a run a minute, each waiting):
  ${kubectl} --kubeconfig ${kc} patch cronjob ${CRON} -n ${NS} --type merge -p '{"spec":{"suspend":false}}'
EOF
	fi
	cat <<EOF

kubectl ${K8S_VERSION} built with the cluster: ${KUBECTL}
The manager runs as ServiceAccount ${OPERATOR_NS}/${OPERATOR_SA} (the RBAC from config/),
not as admin; Redis is 127.0.0.1:${REDIS_PORT}.

Again (deletes and recreates namespace ${NS}, restarts the manager): make demo
Stop manager, redis-server and cluster:                             make demo-down
EOF
}

cmd_up() {
	local t_start=${SECONDS} t_apply
	check_prereqs
	mkdir -p "${DEMO_DIR}"
	build
	cluster_up
	redis_up
	real_node_up
	install_manifests
	manager_up
	namespace_up
	t_apply="$(now_ns)"
	apply_samples
	watch_samples "${t_apply}"
	step "all ${#SAMPLES[@]} LockedJobs Succeeded and the guarded Job ${GUARDED} was Released, $(since "${t_apply}")s after they were applied"
	k get lj -n "${NS}"
	echo
	k get jobs -n "${NS}"
	if [[ "${CRON_MODE}" == 1 ]]; then
		watch_cron
	fi
	show_containers
	print_help
	step "demo took $((SECONDS - t_start))s in total (hack/demo.sh up)"
}

# ---------------------------------------------------------------- down/status

cmd_down() {
	local pids=() f
	step "stopping what the demo started"
	for f in "${DEMO_DIR}"/manager.pid "${DEMO_DIR}"/redis.pid "${DEMO_DIR}"/store.pid "$(dirname "${ADMIN_KUBECONFIG}")"/pids/*.pid; do
		[[ -f "${f}" ]] && pids+=("$(cat "${f}")")
	done
	stop_proc manager || log "manager not running"
	stop_proc redis || log "redis-server not running"
	stop_proc store || true
	if [[ -f "${STARTED_CLUSTER_MARK}" ]]; then
		cluster down
		rm -f "${STARTED_CLUSTER_MARK}"
	elif cluster status >/dev/null 2>&1; then
		log "the local cluster was already running before 'make demo' started; leaving it up (make cluster-down stops it)"
	else
		log "local cluster not running"
	fi
	wait_reaped "${pids[@]}"
	rm -f "${MANAGER_KUBECONFIG}"
	log "demo down (binary and logs kept in ${DEMO_DIR})"
}

# wait_reaped PID...: the stopped processes were re-parented to init when
# their starter exited; give init up to 5s to reap them, so that `pgrep`
# right after `make demo-down` shows no <defunct> entries either.
wait_reaped() {
	local pid _
	for _ in $(seq 1 50); do
		for pid in "$@"; do
			[[ "$(proc_state "${pid}")" == Z ]] && break
			pid=""
		done
		[[ -z "${pid}" ]] && return 0
		sleep 0.1
	done
}

cmd_status() {
	echo "demo dir: ${DEMO_DIR}"
	proc_status "${DEMO_DIR}" manager redis store || true
	cluster status
}

# One demo command at a time per state folder.
with_lock() { with_dir_lock 8 "${DEMO_DIR}" 600 hack/demo.sh "$@"; }

case "${1:-}" in
up) with_lock cmd_up ;;
down) with_lock cmd_down ;;
status) cmd_status ;;
*)
	sed -n '2,30p' "$0" >&2
	exit 2
	;;
esac
