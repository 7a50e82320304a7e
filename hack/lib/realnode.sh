# shellcheck shell=bash
# shellcheck disable=SC2153 # PIDS, LOGS, PKI and the like are set by hack/cluster.sh
# The real node of hack/cluster.sh: kubelet + containerd + runc + bridge CNI running real
# containers beside the kwok nodes. Source, don't run; hack/cluster.sh provides CLUSTER_DIR,
# PORT_BASE, PKI, LOGS, PIDS, K8S_BIN_DIR, APISERVER_PORT and kubectl_, and sources
# hack/lib/k8s-common.sh (log, die, port_free, now_ns, since), hack/lib/procs.sh (the process
# helpers) and hack/lib/net.sh (cidr_overlaps, subnet_taken). docs/local-cluster.md ("Real node") explains the design; the set-up it follows
# was proven on these machines first (see the config comments for why each value is what it is).
#
# Everything is per cluster, derived from its port block, so several clusters (a developer's,
# the e2e suite's, a test's) can each have a real node at once:
#   node name lockedjob-real-1 (one per cluster), bridge ljrn-<base>, pod subnet
#   10.200.<(base/10)%256>.0/24 (or the next one no host address or route uses), kubelet on <bridge IP>:<base+6>, its healthz on
#   127.0.0.1:<base+7>, containerd's stream server (exec, attach, port-forward) on 127.0.0.1:<base+8>,
#   cgroups under /lockedjob-<base>, containerd's socket and state in /run/lockedjob-<base>
#   inside the node's mount namespace.
#
# containerd and kubelet run in one private mount namespace, held open by a `sleep infinity`
# (the "nodens" process). In it, /run, /var and /opt are overlays whose upper layers sit in the
# cluster folder, so paths the stack hard-codes (/run/containerd, /var/lib/kubelet/device-plugins,
# /var/lib/cni, /var/log/containers, /opt/containerd) never appear on the host, and three sysctl
# files kubelet insists on are faked, so it never writes the host's. The network namespace is the
# host's: the bridge and the pods' veths are the only network change, and down removes them.

RN_NODE_NAME="lockedjob-real-1"
RN_LABEL="lockedjob.dev/real-node"
RN_DIR="${CLUSTER_DIR}/node"
# Folders overlaid in the node mount namespace (see the header).
RN_OVERLAYS=(/run /var /opt)
# Start order; realnode_down stops in reverse.
RN_COMPONENTS=(nodens containerd kubelet)
RN_KWOK_CIDR="10.244.0.0/16" # kwok's --cidr in hack/cluster.sh: fake pod IPs come from it

# rn_names BASE [INDEX]: every per-node name, derived from the cluster's port block; the pod
# subnet is 10.200.INDEX.0/24, INDEX by default (BASE/10) mod 256 (rn_pick_subnet moves it on
# when that one is taken).
rn_names() {
	RN_BASE="$1"
	RN_RUN="/run/lockedjob-${RN_BASE}"
	RN_SOCK="${RN_RUN}/containerd.sock"
	RN_BRIDGE="ljrn-${RN_BASE}"
	RN_NET_INDEX="${2:-$(((RN_BASE / 10) % 256))}"
	RN_SUBNET="10.200.${RN_NET_INDEX}.0/24"
	RN_IP="10.200.${RN_NET_INDEX}.1"
	RN_KUBELET_PORT=$((RN_BASE + 6))
	RN_KUBELET_HEALTHZ_PORT=$((RN_BASE + 7))
	RN_STREAM_PORT=$((RN_BASE + 8))
	RN_CGROUP="lockedjob-${RN_BASE}"
}

# The names of a node already started in this folder come from the port base and subnet it was
# started with (recorded in node/port-base and node/net-index), so a down run with another
# LOCKEDJOB_CLUSTER_PORT_BASE never touches another cluster's bridge or cgroups.
if [[ -f "${RN_DIR}/port-base" ]]; then
	rn_names "$(cat "${RN_DIR}/port-base")" "$(cat "${RN_DIR}/net-index" 2>/dev/null || true)"
else
	rn_names "${PORT_BASE}"
fi

rn_pid() { proc_pid "${PIDS}" "$1"; }

# rn_in CMD...: run CMD in the node's mount namespace.
rn_in() {
	local ns
	ns="$(rn_pid nodens)"
	[[ -n "${ns}" ]] || die "the real node's namespace holder is not running"
	nsenter -t "${ns}" -m -- "$@"
}

rn_ctr() { rn_in ctr -a "${RN_SOCK}" -n k8s.io "$@"; }

# realnode_recorded: true if any real-node component was started for this cluster (its pid file
# exists), running or not.
realnode_recorded() {
	local c
	for c in "${RN_COMPONENTS[@]}"; do
		[[ -f "${PIDS}/${c}.pid" ]] && return 0
	done
	return 1
}

realnode_all_running() { proc_all_running "${PIDS}" "${RN_COMPONENTS[@]}"; }

realnode_any_running() { proc_any_running "${PIDS}" "${RN_COMPONENTS[@]}"; }

# ---------------------------------------------------------------- can this machine run it?

realnode_mode() {
	local m="${LOCKEDJOB_REAL_NODE:-auto}"
	case "${m}" in
	auto | 1 | 0) echo "${m}" ;;
	*) die "LOCKEDJOB_REAL_NODE must be auto, 1 or 0 (got '${m}')" ;;
	esac
}

# rn_cgroup_roots: every cgroup hierarchy: kubelet and runc create the node's cgroups in each v1
# one (including the named systemd one) and, on a hybrid layout, in the v2 one too.
rn_cgroup_roots() {
	awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo
}

# rn_blocker: why a real node cannot run here (one line), or nothing. Installs the Debian
# packages and builds kubelet when it can, like hack/ensure-redis.sh does for redis-server.
rn_blocker() {
	[[ "$(id -u)" -eq 0 ]] || { echo "not root (containerd, runc and the node's bridge need root)"; return 0; }
	local t
	for t in unshare nsenter ip mount openssl; do
		command -v "${t}" >/dev/null 2>&1 || { echo "${t} is not installed"; return 0; }
	done
	# Not modprobe: loading a kernel module would be a system-wide change.
	grep -qw overlay /proc/filesystems 2>/dev/null || { echo "the kernel has no overlay filesystem loaded"; return 0; }
	local roots
	roots="$(rn_cgroup_roots)"
	[[ -n "${roots}" ]] || { echo "no cgroup hierarchy is mounted"; return 0; }
	local r
	for r in ${roots}; do
		[[ -w "${r}" ]] || { echo "cgroup hierarchy ${r} is not writable"; return 0; }
	done
	case "${CLUSTER_DIR}/" in
	/run/* | /var/* | /opt/*)
		echo "LOCKEDJOB_CLUSTER_DIR (${CLUSTER_DIR}) is under /run, /var or /opt, which the node overlays"
		return 0
		;;
	esac
	"${HACK_DIR}/ensure-node-packages.sh" >&2 ||
		{ echo "the Debian packages containerd runc containernetworking-plugins are missing (see above)"; return 0; }
	local b unbuilt=()
	for b in "${REAL_NODE_BINARIES[@]}"; do
		[[ -x "${K8S_BIN_DIR}/${b}" ]] || unbuilt+=("${b}")
	done
	if [[ ${#unbuilt[@]} -gt 0 ]]; then
		log "real node: ${unbuilt[*]} missing in ${K8S_BIN_DIR}; running hack/k8s-bin.sh --real-node"
		"${HACK_DIR}/k8s-bin.sh" --real-node >&2 || { echo "building ${unbuilt[*]} failed (see above)"; return 0; }
	fi
}

# ---------------------------------------------------------------- network

# rn_pick_subnet: the first free 10.200.K.0/24 from the port block's own K on, so two clusters
# whose port bases map to the same K both get a node. Never kwok's range.
rn_pick_subnet() {
	local start="${RN_NET_INDEX}" i k
	for ((i = 0; i < 256; i++)); do
		k=$(((start + i) % 256))
		cidr_overlaps "10.200.${k}.0/24" "${RN_KWOK_CIDR}" && continue
		subnet_taken "10.200.${k}.0/24" && continue
		((k == start)) || log "real node: 10.200.${start}.0/24 is in use on this host; using 10.200.${k}.0/24"
		rn_names "${RN_BASE}" "${k}"
		return 0
	done
	die "real node: every 10.200.K.0/24 overlaps an address or route of this host"
}

# rn_bridge_up: create the bridge and record the node's names (node/port-base, node/net-index):
# from here on down owns and removes what carries them. A bridge of that name already there is
# another folder's node (same port base) or its crash: refuse, record nothing, touch nothing.
rn_bridge_up() {
	rn_pick_subnet
	if ip link show "${RN_BRIDGE}" >/dev/null 2>&1; then
		die "real node: bridge ${RN_BRIDGE} already exists: another cluster with port base ${RN_BASE} has a real node (or crashed; run its down), or use another LOCKEDJOB_CLUSTER_PORT_BASE"
	fi
	echo "${RN_BASE}" >"${RN_DIR}/port-base"
	echo "${RN_NET_INDEX}" >"${RN_DIR}/net-index"
	# A fixed address: a bridge without one takes the lowest of its ports', so it changes whenever
	# the pod with that veth goes, and every pod still running keeps sending to the old address
	# (its ARP entry for the node IP) until the entry goes stale: 30-45 s with no reply from the
	# node, which a pod running longer than its neighbours saw as its connections hanging.
	ip link add "${RN_BRIDGE}" address "$(printf '02:6c:6a:00:%02x:01' "${RN_NET_INDEX}")" type bridge ||
		die "creating bridge ${RN_BRIDGE} failed"
	ip addr add "${RN_IP}/24" dev "${RN_BRIDGE}" || die "adding ${RN_IP}/24 to ${RN_BRIDGE} failed"
	ip link set "${RN_BRIDGE}" up || die "setting ${RN_BRIDGE} up failed"
	# Another cluster may have picked the same subnet at the same moment.
	if subnet_taken "${RN_SUBNET}" "${RN_BRIDGE}"; then
		die "real node: another interface took ${RN_SUBNET} while ${RN_BRIDGE} was created; run up again"
	fi
}

# rn_bridge_down: the pods' veths go when their network namespaces do (once the node namespace,
# which pins them, is gone); wait for that, remove any that stay, then the bridge.
rn_bridge_down() {
	ip link show "${RN_BRIDGE}" >/dev/null 2>&1 || return 0
	local deadline=$((SECONDS + 10)) ports
	while ports="$(ip -o link show master "${RN_BRIDGE}" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1)" &&
		[[ -n "${ports}" ]] && ((SECONDS < deadline)); do
		sleep 0.2
	done
	local v
	for v in ${ports}; do
		log "removing leftover veth ${v} of ${RN_BRIDGE}"
		ip link del "${v}" 2>/dev/null || true
	done
	ip link del "${RN_BRIDGE}" || die "removing bridge ${RN_BRIDGE} failed"
	log "removed bridge ${RN_BRIDGE}"
}

# ---------------------------------------------------------------- files

rn_write_configs() {
	mkdir -p "${RN_DIR}/cni/net.d" "${RN_DIR}/cni/ipam" "${RN_DIR}/containerd/root" \
		"${RN_DIR}/containerd/opt" "${RN_DIR}/kubelet/root" "${RN_DIR}/kubelet/pki" \
		"${RN_DIR}/kubelet/volume-plugins" "${RN_DIR}/pod-logs" "${RN_DIR}/sysctl"

	cat >"${RN_DIR}/containerd.toml" <<EOF
# Generated by hack/cluster.sh for the real node of ${CLUSTER_DIR}.
version = 2
root = "${RN_DIR}/containerd/root"
state = "${RN_RUN}/containerd"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "${RN_SOCK}"

[ttrpc]
  address = "${RN_SOCK}.ttrpc"

[debug]
  level = "info"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "${RN_DIR}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Imported by hack/cluster.sh up; there is no registry to pull from.
  sandbox_image = "lockedjob.local/pause:v1"
  stream_server_address = "127.0.0.1"
  stream_server_port = "${RN_STREAM_PORT}"
  enable_selinux = false
  disable_apparmor = true
  # These VMs lack CAP_SYS_RESOURCE: runc cannot set the negative oom_score_adj CRI asks for
  # (every sandbox fails with "can't get final child's PID from pipe: EOF"); clamp it to ours.
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${RN_DIR}/cni/net.d"
    max_conf_num = 1
EOF

	# isGateway false: with true the bridge plugin turns on net.ipv4.ip_forward, a system-wide
	# change; the gateway address is put on the bridge by rn_bridge_up instead. No ipMasq (no
	# iptables) and no default route: pods reach the bridge subnet only.
	cat >"${RN_DIR}/cni/net.d/10-lockedjob.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "lockedjob-${RN_BASE}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${RN_BRIDGE}",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${RN_DIR}/cni/ipam",
        "ranges": [[{"subnet": "${RN_SUBNET}", "rangeStart": "10.200.${RN_NET_INDEX}.10", "rangeEnd": "10.200.${RN_NET_INDEX}.250"}]]
      }
    }
  ]
}
EOF

	cat >"${RN_DIR}/kubelet-config.yaml" <<EOF
# Generated by hack/cluster.sh for the real node of ${CLUSTER_DIR}.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The bridge IP, never eth0: anonymous AlwaysAllow below is only acceptable because nothing
# outside this machine can reach it.
address: ${RN_IP}
port: ${RN_KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${RN_KUBELET_HEALTHZ_PORT}
containerRuntimeEndpoint: unix://${RN_SOCK}
imageServiceEndpoint: unix://${RN_SOCK}
cgroupDriver: cgroupfs
# Its own cgroup tree, so two clusters' kubelets never share /kubepods.
cgroupRoot: /${RN_CGROUP}
# kubelet 1.37 refuses cgroup v1 unless told otherwise; these VMs have a hybrid layout.
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
# Only read vm.overcommit_memory, kernel.panic and kernel.panic_on_oops (faked in the node's
# mount namespace) instead of writing the host's.
protectKernelDefaults: true
# CAP_SYS_RESOURCE is missing: kubelet cannot lower its own score.
oomScoreAdj: 0
# No KUBE-IPTABLES-HINT / KUBE-FIREWALL chains in the host's iptables.
makeIPTablesUtilChains: false
volumePluginDir: ${RN_DIR}/kubelet/volume-plugins
podLogsDir: ${RN_DIR}/pod-logs
resolvConf: /etc/resolv.conf
# The apiserver has no kubelet client certificate: it calls kubelet (logs, exec) anonymously.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
registerNode: true
clusterDomain: cluster.local
serializeImagePulls: false
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 1m
syncFrequency: 10s
fileCheckFrequency: 20s
# Absolute, not a share of the disk: the node's files sit on the host's disk, shared with build
# caches; at 5 % of a 250 GB disk the node tainted itself with disk pressure with 8 GB free, and
# the in-cluster lane's manager pod was never scheduled.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 5%
# No image garbage collection: every image here was imported from a tarball and none can be
# pulled back, and the disk's use is the host's (build caches), not the node's. At 85 % of the
# host's disk kubelet removed the pause image while no pod ran, and every pod after that failed
# its sandbox ("failed to pull image lockedjob.local/pause:v1"); kind's nodes run without it too.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

# rn_node_identity: a client certificate for system:node:<name> in system:nodes from the cluster
# CA, so the apiserver's Node authorizer scopes what kubelet may do (not the admin token).
rn_node_identity() {
	local key="${PKI}/${RN_NODE_NAME}.key" crt="${PKI}/${RN_NODE_NAME}.crt"
	if [[ ! -f "${crt}" ]]; then
		(
			cd "${PKI}"
			umask 077
			printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >node-client.ext
			openssl req -newkey rsa:2048 -nodes -sha256 -keyout "${key}" -out "${RN_NODE_NAME}.csr" \
				-subj "/O=system:nodes/CN=system:node:${RN_NODE_NAME}" 2>/dev/null
			openssl x509 -req -in "${RN_NODE_NAME}.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
				-days 3650 -sha256 -extfile node-client.ext -out "${crt}.tmp" 2>/dev/null
			mv -f "${crt}.tmp" "${crt}"
		) || die "creating the node client certificate failed"
	fi
	write_kubeconfig "${RN_DIR}/kubelet.kubeconfig" "system:node:${RN_NODE_NAME}" \
		"$(printf '    client-certificate-data: %s\n    client-key-data: %s' "$(base64 -w0 <"${crt}")" "$(base64 -w0 <"${key}")")"
	umask 022
}

# ---------------------------------------------------------------- the node mount namespace

# rn_start_holder: the node's mount namespace holder (hack/lib/procs.sh).
rn_start_holder() { mountns_start_holder "${PIDS}" "${LOGS}/nodens.log" nodens "${RN_DIR}/mntns"; }

# rn_mount_namespace: the overlays and faked sysctl files (see the header).
rn_mount_namespace() {
	printf '1\n' >"${RN_DIR}/sysctl/vm.overcommit_memory"
	printf '10\n' >"${RN_DIR}/sysctl/kernel.panic"
	printf '1\n' >"${RN_DIR}/sysctl/kernel.panic_on_oops"
	local d n script=""
	for d in "${RN_OVERLAYS[@]}"; do
		n="${RN_DIR}/overlay/${d#/}"
		mkdir -p "${n}/upper" "${n}/work"
		script+="mount -t overlay overlay -o lowerdir=${d},upperdir=${n}/upper,workdir=${n}/work ${d} && "
	done
	script+="mount --bind ${RN_DIR}/sysctl/vm.overcommit_memory /proc/sys/vm/overcommit_memory && "
	script+="mount --bind ${RN_DIR}/sysctl/kernel.panic /proc/sys/kernel/panic && "
	script+="mount --bind ${RN_DIR}/sysctl/kernel.panic_on_oops /proc/sys/kernel/panic_on_oops && "
	script+="mkdir -p ${RN_RUN}"
	rn_in sh -c "${script}" || return 1
}

# ---------------------------------------------------------------- cgroups and leftovers

rn_cgroup_dirs() {
	local r
	for r in $(rn_cgroup_roots); do
		[[ -d "${r}/${RN_CGROUP}" ]] && echo "${r}/${RN_CGROUP}"
	done
	return 0
}

# rn_make_cgroups: kubelet refuses a cgroupRoot that does not exist. cpuset starts empty in v1,
# so copy the parent's CPUs and memory nodes or no task could join.
rn_make_cgroups() {
	local r
	for r in $(rn_cgroup_roots); do
		mkdir -p "${r}/${RN_CGROUP}" || return 1
		if [[ -f "${r}/cpuset.cpus" && -f "${r}/${RN_CGROUP}/cpuset.cpus" ]]; then
			cat "${r}/cpuset.cpus" >"${r}/${RN_CGROUP}/cpuset.cpus" || return 1
			cat "${r}/cpuset.mems" >"${r}/${RN_CGROUP}/cpuset.mems" || return 1
		fi
	done
}

# rn_kill_pods: SIGKILL every process in the node's cgroup tree (the pods' containers: they are
# ours by construction) and wait until the tree is empty.
rn_kill_pods() {
	local deadline=$((SECONDS + 15)) pids d
	while :; do
		pids="$(for d in $(rn_cgroup_dirs); do find "${d}" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u)"
		[[ -n "${pids}" ]] || return 0
		((SECONDS < deadline)) || { log "WARNING: processes left in the node's cgroups: ${pids//$'\n'/ }"; return 0; }
		# shellcheck disable=SC2086 # one PID per word
		kill -KILL ${pids} 2>/dev/null || true
		sleep 0.2
	done
}

rn_remove_cgroups() {
	local d
	for d in $(rn_cgroup_dirs); do
		find "${d}" -depth -type d -exec rmdir {} + 2>/dev/null ||
			log "WARNING: could not remove every cgroup under ${d}"
	done
	return 0
}

# rn_kill_shims: containerd's shims outlive it by design; ours are the ones serving our socket.
rn_kill_shims() {
	local p pid cmd
	for p in /proc/[0-9]*; do
		pid="${p#/proc/}"
		cmd="$(tr '\0' ' ' 2>/dev/null <"${p}/cmdline")" || continue
		[[ "${cmd}" == *containerd-shim* && "${cmd}" == *" -address ${RN_SOCK} "* ]] || continue
		log "stopping containerd shim (pid ${pid})"
		kill -KILL "${pid}" 2>/dev/null || true
	done
}

# rn_kill_namespace_members: anything still in the node's mount namespace once the holder is gone
# (a shim or ctr left over from a crash) keeps its mounts alive; it is ours, so end it. Ours is
# the namespace with our overlays mounted.
rn_kill_namespace_members() { mountns_kill_members "${RN_DIR}/mntns" "${RN_DIR}/overlay/" "the node namespace"; }

# ---------------------------------------------------------------- up / down

# rn_fail COMPONENT MESSAGE: die with the component's last log lines; hack/cluster.sh's exit
# trap then stops what up started.
rn_fail() {
	local name="$1"
	shift
	proc_log_tail "${LOGS}/${name}.log" 30
	die "real node: $*"
}

# rn_wait NAME TIMEOUT CMD...: poll CMD until it succeeds; fail if NAME dies or time runs out.
rn_wait() { proc_wait "${PIDS}" "$1" "$2" rn_fail "${@:3}"; }

rn_node_ready() {
	[[ "$(kubectl_ get node "${RN_NODE_NAME}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# rn_pause_tar: the pause image tarball (LOCKEDJOB_PAUSE_TAR, or built by `make image-pause`).
rn_pause_tar() {
	if [[ -n "${LOCKEDJOB_PAUSE_TAR:-}" ]]; then
		[[ -f "${LOCKEDJOB_PAUSE_TAR}" ]] || die "LOCKEDJOB_PAUSE_TAR=${LOCKEDJOB_PAUSE_TAR} does not exist"
		echo "${LOCKEDJOB_PAUSE_TAR}"
		return 0
	fi
	make -s -C "${LOCKEDJOB_ROOT}" image-pause IMAGES_DIR="${LOCKEDJOB_ROOT}/bin/images" >&2 ||
		die "make image-pause failed"
	[[ -f "${LOCKEDJOB_ROOT}/bin/images/pause.tar" ]] || die "make image-pause wrote no bin/images/pause.tar"
	echo "${LOCKEDJOB_ROOT}/bin/images/pause.tar"
}

# rn_import FILE...: import image tarballs into the node's containerd (namespace k8s.io, where
# CRI looks); the path is read inside the node namespace, so it must be absolute.
rn_import() {
	local f abs out
	for f in "$@"; do
		abs="$(realpath "${f}" 2>/dev/null)" || true
		[[ -n "${abs}" && -f "${abs}" ]] || die "image tarball ${f} not found"
		out="$(rn_ctr images import "${abs}" 2>&1)" || die "importing ${f} into the real node failed: ${out}"
		log "imported ${f}: $(awk '/^unpacking/ { print $2 }' <<<"${out}" | tr '\n' ' ')"
	done
}

# realnode_decide: whether up adds the real node (RN_WANTED=1), as LOCKEDJOB_REAL_NODE asks;
# says in one line why not. Run before the control plane starts, so a node that must be there
# (LOCKEDJOB_REAL_NODE=1) and cannot fails up at once.
realnode_decide() {
	local mode blocker
	RN_WANTED=0
	mode="$(realnode_mode)"
	if [[ "${mode}" == 0 ]]; then
		log "real node: off (LOCKEDJOB_REAL_NODE=0)"
		return 0
	fi
	blocker="$(rn_blocker)"
	if [[ -n "${blocker}" ]]; then
		[[ "${mode}" == 1 ]] && die "real node: LOCKEDJOB_REAL_NODE=1 but it cannot run here: ${blocker}"
		log "real node: off: ${blocker} (LOCKEDJOB_REAL_NODE=1 makes this an error, =0 silences it)"
		return 0
	fi
	RN_WANTED=1
}

# realnode_up: add the real node after the control plane if realnode_decide wanted it. Dies if
# it fails; hack/cluster.sh's exit trap then stops what up started.
realnode_up() {
	[[ ${RN_WANTED:-0} -eq 1 ]] || return 0
	realnode_down quiet
	rn_names "${PORT_BASE}"
	local p
	for p in "${RN_KUBELET_PORT}" "${RN_KUBELET_HEALTHZ_PORT}" "${RN_STREAM_PORT}"; do
		port_free "${p}" || die "port ${p} (real node) is in use; set LOCKEDJOB_CLUSTER_PORT_BASE to another base"
	done
	rn_start
}

rn_start() {
	local t0
	t0="$(now_ns)"
	mkdir -p "${RN_DIR}"
	local pause
	pause="$(rn_pause_tar)"
	rn_bridge_up # picks the subnet the configs use
	rn_write_configs
	rn_node_identity

	rn_start_holder || rn_fail nodens "starting the node namespace holder failed"
	rn_mount_namespace || rn_fail nodens "setting up the node mount namespace failed"
	rn_make_cgroups || rn_fail nodens "creating cgroup ${RN_CGROUP} failed"

	proc_start_in "$(rn_pid nodens)" "${PIDS}" "${LOGS}/containerd.log" containerd \
		"$(command -v containerd)" --config "${RN_DIR}/containerd.toml" ||
		rn_fail containerd "containerd did not start"
	log "started containerd (pid $(rn_pid containerd))"
	rn_wait containerd 30 rn_ctr version
	rn_import "${pause}"

	local tk
	tk="$(now_ns)"
	proc_start_in "$(rn_pid nodens)" "${PIDS}" "${LOGS}/kubelet.log" kubelet "${K8S_BIN_DIR}/kubelet" \
		--config="${RN_DIR}/kubelet-config.yaml" \
		--kubeconfig="${RN_DIR}/kubelet.kubeconfig" \
		--root-dir="${RN_DIR}/kubelet/root" \
		--cert-dir="${RN_DIR}/kubelet/pki" \
		--hostname-override="${RN_NODE_NAME}" \
		--node-ip="${RN_IP}" \
		--node-labels="${RN_LABEL}=true" \
		--register-with-taints="${RN_LABEL}=true:NoSchedule" \
		--v=2 ||
		rn_fail kubelet "kubelet did not start"
	log "started kubelet (pid $(rn_pid kubelet))"
	rn_wait kubelet 60 rn_node_ready
	log "real node ${RN_NODE_NAME} Ready $(since "${tk}" 2)s after kubelet start ($(since "${t0}" 2)s in all;" \
		"bridge ${RN_BRIDGE} ${RN_IP}/24, kubelet :${RN_KUBELET_PORT}, taint ${RN_LABEL}=true:NoSchedule)"
}


# realnode_down [quiet]: stop the real node and remove everything it left: processes, mounts
# (with the namespace), cgroups, bridge and veths, run state. Safe to run again, and after a
# crash (stale pid files, a dead containerd, the holder gone). Logs are kept.
realnode_down() {
	local quiet="${1:-}"
	# Only what this folder recorded: the names alone (a bridge, cgroups of the same port base)
	# may belong to another folder's cluster, e.g. a down run with the default port base.
	realnode_recorded || [[ -f "${RN_DIR}/port-base" ]] || return 0
	[[ -n "${quiet}" ]] && log "real node: cleaning up what a previous run left"

	# kubelet first, so nothing restarts the containers killed next.
	proc_stop "${PIDS}" kubelet || true
	rn_kill_pods
	proc_stop "${PIDS}" containerd || true
	rn_kill_shims
	proc_stop "${PIDS}" nodens || true
	rn_kill_namespace_members
	rn_remove_cgroups
	rn_bridge_down
	# Only now, with no process left in the namespace, are the overlays and the containerd
	# snapshots under RN_DIR unmounted everywhere.
	rm -rf "${RN_DIR}/overlay" "${RN_DIR}/containerd" "${RN_DIR}/kubelet" "${RN_DIR}/cni" \
		"${RN_DIR}/pod-logs" "${RN_DIR}/sysctl" ||
		log "WARNING: could not remove every file under ${RN_DIR}"
	rm -f "${RN_DIR}/port-base" "${RN_DIR}/net-index"
	[[ -n "${quiet}" ]] || log "real node down"
}

realnode_status() {
	realnode_recorded || { echo "  real node:               not started"; return 0; }
	proc_status "${PIDS}" "${RN_COMPONENTS[@]}"
}
