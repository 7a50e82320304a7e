# shellcheck shell=bash
# The project's own Docker daemon for hack/kind.sh: Debian's dockerd and containerd as the
# script's processes, with their own folders, socket and bridge, for a kind cluster on machines
# without a Docker engine. Source, don't run; the sourcing script provides log and die
# (hack/lib/k8s-common.sh), the process helpers (hack/lib/procs.sh) and subnet_taken
# (hack/lib/net.sh), and sets KD_DIR, the folder all of it lives in, before sourcing.
#
# What it changes on the host, and nothing else: one bridge (ljkind-<K>, 10.210.K.1/24, the
# Docker network kind's nodes are on) and its veths, cgroups under /lockedjob-kind-<K>, and the
# files under KD_DIR. dockerd runs with --iptables=false --ip-forward=false --ip-masq=false and
# no default bridge (--bridge=none), so no iptables rule and no sysctl of the host changes.
#
# containerd and dockerd run in one private mount namespace, held open by a `sleep infinity`
# (the "dockerns" process), as the real node of hack/cluster.sh does: in it /run, /var and /opt
# are overlays whose upper layers are in KD_DIR/ns, so what the two hard-code there (containerd
# 1.6's shim sockets in /run/containerd/s, dockerd's exec root) never appears on the host, and
# every mount they make (overlay2 layers, the containers' /dev/shm, network namespaces) stays in
# the namespace and goes with it. Where the host has no /lib/modules (these VMs' kernel has no
# modules), that folder's parent is overlaid too: kind bind-mounts /lib/modules into its nodes,
# and dockerd would create it on the host.
#
# Docker's --privileged asks runc for every capability, and these hosts' bounding set lacks
# CAP_SYS_RESOURCE, so runc fails ("unable to apply caps: operation not permitted"); Docker 20.10
# ignores --cap-drop with --privileged. The default runtime is therefore a wrapper
# (KD_DIR/bin/runc) that drops the capabilities the host's bounding set lacks from the OCI spec
# on create and from the process spec on exec, then runs runc.

# shellcheck source=hack/lib/containerd.sh
source "${HACK_DIR}/lib/containerd.sh"

KD_PIDS="${KD_DIR}/pids"
KD_LOGS="${KD_DIR}/logs"
# The socket docker and kind talk to; outside the namespace's overlays, so the host reaches it.
KD_SOCK="${KD_DIR}/docker.sock"
# Start order; kd_down stops in reverse.
KD_COMPONENTS=(dockerns containerd dockerd)
# Folders overlaid in the namespace (see the header).
KD_OVERLAYS=(/run /var /opt)
# The network kind's nodes join (kind uses one of this name when it exists).
KD_NETWORK="kind"

# kd_names INDEX: the per-daemon names; the subnet is 10.210.INDEX.0/24.
kd_names() {
	KD_NET_INDEX="$1"
	KD_BRIDGE="ljkind-${KD_NET_INDEX}"
	KD_SUBNET="10.210.${KD_NET_INDEX}.0/24"
	KD_GATEWAY="10.210.${KD_NET_INDEX}.1"
	KD_CGROUP="lockedjob-kind-${KD_NET_INDEX}"
}

# Inside the namespace only (its /run is private): containerd's and dockerd's run state.
KD_RUN="/run/lockedjob-kind"
KD_CONTAINERD_SOCK="${KD_RUN}/containerd.sock"

# The names of a daemon already started in this folder come from the index it recorded.
if [[ -f "${KD_DIR}/net-index" ]]; then
	kd_names "$(cat "${KD_DIR}/net-index")"
else
	KD_NET_INDEX=""
fi

kd_pid() { proc_pid "${KD_PIDS}" "$1"; }

# kd_docker ARGS...: the Debian docker client (the daemon's own version) against our socket.
kd_docker() { DOCKER_HOST="unix://${KD_SOCK}" /usr/bin/docker "$@"; }

# kd_recorded: true if any component was started from this folder (its pid file exists), running
# or not, or a network was recorded.
kd_recorded() {
	local c
	for c in "${KD_COMPONENTS[@]}"; do
		[[ -f "${KD_PIDS}/${c}.pid" ]] && return 0
	done
	[[ -f "${KD_DIR}/net-index" ]]
}

kd_running() { proc_all_running "${KD_PIDS}" "${KD_COMPONENTS[@]}" && kd_docker info >/dev/null 2>&1; }

# ---------------------------------------------------------------- can this machine run it?

# kd_blocker: why the project's dockerd cannot run here (one line), or nothing.
kd_blocker() {
	[[ "$(id -u)" -eq 0 ]] || { echo "not root (dockerd, containerd and the bridge need root)"; return 0; }
	local t
	for t in unshare nsenter ip mount jq; do
		command -v "${t}" >/dev/null 2>&1 || { echo "${t} is not installed"; return 0; }
	done
	grep -qw overlay /proc/filesystems 2>/dev/null || { echo "the kernel has no overlay filesystem loaded"; return 0; }
	case "${KD_DIR}/" in
	/run/* | /var/* | /opt/*)
		echo "the kind folder (${KD_DIR}) is under /run, /var or /opt, which its namespace overlays"
		return 0
		;;
	esac
	"${HACK_DIR}/ensure-kind-packages.sh" >&2 ||
		{ echo "the Debian packages docker.io containerd runc are missing (see above)"; return 0; }
}

# ---------------------------------------------------------------- network

# kd_pick_subnet: the first 10.210.K.0/24 no host address or route overlaps, from K=0 on.
kd_pick_subnet() {
	local k
	for ((k = 0; k < 256; k++)); do
		subnet_taken "10.210.${k}.0/24" && continue
		# Another folder's daemon may hold this index without its bridge existing yet.
		ip link show "ljkind-${k}" >/dev/null 2>&1 && continue
		kd_names "${k}"
		return 0
	done
	die "kind: every 10.210.K.0/24 overlaps an address or route of this host"
}

# kd_network_up: the Docker network kind's nodes join, on our bridge and subnet. kind uses an
# existing network of its name as it is.
kd_network_up() {
	kd_docker network create --driver bridge \
		--subnet "${KD_SUBNET}" --gateway "${KD_GATEWAY}" \
		--opt "com.docker.network.bridge.name=${KD_BRIDGE}" \
		--opt com.docker.network.bridge.enable_ip_masquerade=false \
		--opt com.docker.network.driver.mtu=1500 \
		"${KD_NETWORK}" >/dev/null || die "creating the Docker network ${KD_NETWORK} failed"
	# Another script may have put the same subnet on the host at the same moment.
	if subnet_taken "${KD_SUBNET}" "${KD_BRIDGE}"; then
		die "kind: another interface took ${KD_SUBNET} while ${KD_BRIDGE} was created; run up again"
	fi
	log "Docker network ${KD_NETWORK}: bridge ${KD_BRIDGE}, ${KD_SUBNET}"
}

# kd_bridge_down: remove the bridge and any veth left on it (dockerd removes both with the
# network; this is for a daemon that died first).
kd_bridge_down() {
	[[ -n "${KD_NET_INDEX}" ]] || return 0
	ip link show "${KD_BRIDGE}" >/dev/null 2>&1 || return 0
	local v
	for v in $(ip -o link show master "${KD_BRIDGE}" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		log "removing leftover veth ${v} of ${KD_BRIDGE}"
		ip link del "${v}" 2>/dev/null || true
	done
	ip link del "${KD_BRIDGE}" || die "removing bridge ${KD_BRIDGE} failed"
	log "removed bridge ${KD_BRIDGE}"
}

# ---------------------------------------------------------------- files

# Capability names by number (linux/capability.h), to name what the bounding set lacks.
KD_CAPS=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
	LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE
	SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME
	SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG
	WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE)

# kd_missing_caps: the capabilities (CAP_NAME, one a line) this process's bounding set lacks.
kd_missing_caps() {
	local bnd i
	bnd="$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)"
	for i in "${!KD_CAPS[@]}"; do
		(((0x${bnd} >> i) & 1)) || echo "CAP_${KD_CAPS[$i]}"
	done
}

# kd_write_runc_wrapper: KD_DIR/bin/runc, the daemon's default runtime (see the header).
kd_write_runc_wrapper() {
	local runc drop
	runc="$(realpath "$(command -v runc)")"
	drop="$(kd_missing_caps | jq -R . | jq -sc .)"
	mkdir -p "${KD_DIR}/bin"
	cat >"${KD_DIR}/bin/runc" <<EOF
#!/bin/bash
# Written by hack/lib/dockerd.sh: runc without the capabilities this host's bounding set lacks
# (${drop}), which --privileged asks for and runc cannot grant.
set -euo pipefail
drop='${drop}'
cmd="" bundle="." process=""
args=("\$@")
for ((i = 0; i < \${#args[@]}; i++)); do
	case "\${args[i]}" in
	create | run | exec) [[ -n "\${cmd}" ]] || cmd="\${args[i]}" ;;
	--bundle | -b) bundle="\${args[i + 1]:-.}" ;;
	--bundle=*) bundle="\${args[i]#*=}" ;;
	--process | -p) process="\${args[i + 1]:-}" ;;
	--process=*) process="\${args[i]#*=}" ;;
	esac
done
# strip FILE PATH: remove the dropped capabilities from every set at PATH of the JSON file FILE.
strip() {
	jq --argjson drop "\${drop}" "\$2 |= (if . == null then . else with_entries(.value |= ((. // []) - \\\$drop)) end)" "\$1" >"\$1.lj" &&
		mv -f "\$1.lj" "\$1"
}
case "\${cmd}" in
create | run) strip "\${bundle}/config.json" .process.capabilities ;;
exec) [[ -z "\${process}" ]] || strip "\${process}" .capabilities ;;
esac
exec ${runc} "\$@"
EOF
	chmod 0755 "${KD_DIR}/bin/runc"
	# kind runs `docker` from PATH: this folder puts the Debian client, the daemon's own version,
	# first.
	mkdir -p "${KD_DIR}/client"
	ln -sfn /usr/bin/docker "${KD_DIR}/client/docker"
}

kd_write_configs() {
	mkdir -p "${KD_DIR}/etc" "${KD_DIR}/containerd" "${KD_DIR}/docker"
	# The containerd dockerd runs its containers with; only dockerd talks to it.
	write_private_containerd_config "${KD_DIR}/etc/containerd.toml" "${KD_DIR}/containerd" \
		"${KD_RUN}/containerd" "${KD_CONTAINERD_SOCK}" warn
	# A daemon.json of our own, so /etc/docker/daemon.json of the host is never read, and the
	# daemon's identity key goes here, not to /etc/docker/key.json (dockerd 20.10's default).
	printf '{"deprecated-key-path": "%s"}\n' "${KD_DIR}/etc/key.json" >"${KD_DIR}/etc/daemon.json"
}

# ---------------------------------------------------------------- the namespace

# kd_start_holder: the namespace's holder (hack/lib/procs.sh).
kd_start_holder() { mountns_start_holder "${KD_PIDS}" "${KD_LOGS}/dockerns.log" dockerns "${KD_DIR}/mntns"; }

# kd_in CMD...: run CMD in the namespace.
kd_in() {
	local ns
	ns="$(kd_pid dockerns)"
	[[ -n "${ns}" ]] || die "kind: the Docker namespace holder is not running"
	nsenter -t "${ns}" -m -- "$@"
}

# kd_overlay_dirs: the folders the namespace overlays (see the header).
kd_overlay_dirs() {
	printf '%s\n' "${KD_OVERLAYS[@]}"
	[[ -e /lib/modules ]] || realpath /lib
}

kd_mount_namespace() {
	local d n script=""
	while read -r d; do
		n="${KD_DIR}/ns/${d#/}"
		mkdir -p "${n}/upper" "${n}/work"
		script+="mount -t overlay overlay -o lowerdir=${d},upperdir=${n}/upper,workdir=${n}/work ${d} && "
	done < <(kd_overlay_dirs)
	script+="mkdir -p ${KD_RUN} /lib/modules"
	kd_in sh -c "${script}"
}

# ---------------------------------------------------------------- cgroups and leftovers

# kd_cgroup_roots: every cgroup hierarchy (dockerd puts each container's cgroup under
# --cgroup-parent in every one of them).
kd_cgroup_roots() {
	awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo
}

kd_cgroup_dirs() {
	[[ -n "${KD_NET_INDEX}" ]] || return 0
	local r
	for r in $(kd_cgroup_roots); do
		[[ -d "${r}/${KD_CGROUP}" ]] && echo "${r}/${KD_CGROUP}"
	done
	return 0
}

# kd_kill_cgroup_members: SIGKILL every process left in the containers' cgroup tree (kind's
# nodes and everything they ran: ours by construction) and wait until the tree is empty.
kd_kill_cgroup_members() {
	local deadline=$((SECONDS + 15)) pids d
	while :; do
		pids="$(for d in $(kd_cgroup_dirs); do find "${d}" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u)"
		[[ -n "${pids}" ]] || return 0
		((SECONDS < deadline)) || { log "WARNING: processes left in ${KD_CGROUP}: ${pids//$'\n'/ }"; return 0; }
		# shellcheck disable=SC2086 # one PID per word
		kill -KILL ${pids} 2>/dev/null || true
		sleep 0.2
	done
}

kd_remove_cgroups() {
	local d
	for d in $(kd_cgroup_dirs); do
		find "${d}" -depth -type d -exec rmdir {} + 2>/dev/null ||
			log "WARNING: could not remove every cgroup under ${d}"
	done
	return 0
}

# kd_kill_namespace_members: everything still in the namespace once the holder is gone
# (containerd's shims, dockerd's docker-proxy processes, a ctr) keeps its mounts alive; it is
# ours, so end it. Ours is the namespace with our overlays mounted.
kd_kill_namespace_members() { mountns_kill_members "${KD_DIR}/mntns" "${KD_DIR}/ns/" "the Docker namespace"; }

# ---------------------------------------------------------------- up / down

kd_fail() {
	local name="$1"
	shift
	proc_log_tail "${KD_LOGS}/${name}.log" 30
	die "kind: $*"
}

kd_wait() { proc_wait "${KD_PIDS}" "$1" "$2" kd_fail "${@:3}"; }

# kd_up: start the namespace, containerd, dockerd and the network. Dies if anything fails; the
# caller's exit trap then runs kd_down.
kd_up() {
	mkdir -p "${KD_PIDS}" "${KD_LOGS}"
	kd_pick_subnet
	echo "${KD_NET_INDEX}" >"${KD_DIR}/net-index"
	kd_write_runc_wrapper
	kd_write_configs
	kd_start_holder || kd_fail dockerns "starting the Docker namespace holder failed"
	kd_mount_namespace || kd_fail dockerns "setting up the Docker mount namespace failed"

	proc_start_in "$(kd_pid dockerns)" "${KD_PIDS}" "${KD_LOGS}/containerd.log" containerd \
		"$(command -v containerd)" --config "${KD_DIR}/etc/containerd.toml" ||
		kd_fail containerd "containerd did not start"
	kd_wait containerd 30 kd_in ctr -a "${KD_CONTAINERD_SOCK}" version
	log "started containerd (pid $(kd_pid containerd))"

	proc_start_in "$(kd_pid dockerns)" "${KD_PIDS}" "${KD_LOGS}/dockerd.log" dockerd \
		"$(command -v dockerd)" \
		--host "unix://${KD_SOCK}" \
		--containerd "${KD_CONTAINERD_SOCK}" \
		--data-root "${KD_DIR}/docker" \
		--exec-root "${KD_RUN}/docker" \
		--pidfile "${KD_RUN}/dockerd.pid" \
		--config-file "${KD_DIR}/etc/daemon.json" \
		--storage-driver overlay2 \
		--bridge none \
		--iptables=false --ip-forward=false --ip-masq=false --ipv6=false \
		--cgroup-parent "/${KD_CGROUP}" \
		--exec-opt native.cgroupdriver=cgroupfs \
		--add-runtime "lockedjob-runc=${KD_DIR}/bin/runc" \
		--default-runtime lockedjob-runc \
		--log-level warn ||
		kd_fail dockerd "dockerd did not start"
	kd_wait dockerd 60 kd_docker info
	log "started dockerd (pid $(kd_pid dockerd)), socket ${KD_SOCK}"
	kd_network_up
}

# kd_down [quiet]: stop the daemon and remove everything it left: containers, the network and
# its bridge, processes, mounts (with the namespace), cgroups, the daemon's state. Safe to run
# again, and after a crash (stale pid files, a dead dockerd or holder). Logs are kept.
kd_down() {
	local quiet="${1:-}"
	kd_recorded || return 0
	[[ -n "${quiet}" ]] && log "kind: cleaning up what a previous run left"
	if [[ -n "$(kd_pid dockerd)" ]] && kd_docker info >/dev/null 2>&1; then
		local ids
		ids="$(kd_docker ps -aq)"
		# shellcheck disable=SC2086 # one ID per word
		[[ -z "${ids}" ]] || kd_docker rm -f -v ${ids} >/dev/null || log "WARNING: docker rm failed"
		kd_docker network rm "${KD_NETWORK}" >/dev/null 2>&1 || true
	fi
	proc_stop "${KD_PIDS}" dockerd || true
	kd_kill_cgroup_members
	proc_stop "${KD_PIDS}" containerd || true
	proc_stop "${KD_PIDS}" dockerns || true
	kd_kill_namespace_members
	kd_remove_cgroups
	kd_bridge_down
	# Only now, with no process left in the namespace, are the overlays and dockerd's layers
	# unmounted everywhere.
	rm -rf "${KD_DIR}/ns" "${KD_DIR}/docker" "${KD_DIR}/containerd" "${KD_SOCK}" ||
		log "WARNING: could not remove every file under ${KD_DIR}"
	rm -f "${KD_DIR}/net-index"
	KD_NET_INDEX=""
	[[ -n "${quiet}" ]] || log "kind: Docker daemon down"
}

kd_status() {
	kd_recorded || { echo "  docker daemon:            not started"; return 0; }
	proc_status "${KD_PIDS}" "${KD_COMPONENTS[@]}"
}
