# shellcheck shell=bash
# Process bookkeeping shared by hack/cluster.sh, hack/demo.sh and hack/kind.sh. Source, don't
# run; the sourcing script provides log and die (hack/lib/k8s-common.sh does).
#
# A process NAME is recorded in a folder DIR as NAME.pid, written by a wrapper shell right before
# it execs the binary (so it is the binary's PID), and NAME.exe, the binary's real path. A PID
# counts as ours only while /proc/PID/exe is that binary, so a recycled PID is never signalled.

# proc_pid DIR NAME: the recorded PID if that process is alive (not a zombie) and still runs the
# recorded binary; empty otherwise.
proc_pid() {
	local dir="$1" name="$2" pid exe want state
	[[ -f "${dir}/${name}.pid" && -f "${dir}/${name}.exe" ]] || return 0
	pid="$(cat "${dir}/${name}.pid")"
	want="$(cat "${dir}/${name}.exe")"
	[[ "${pid}" =~ ^[0-9]+$ && -n "${want}" ]] || return 0
	exe="$(readlink "/proc/${pid}/exe" 2>/dev/null || true)"
	exe="${exe% (deleted)}" # a binary rebuilt under a running process
	[[ -n "${exe}" && "${exe}" == "${want}" ]] || return 0
	state="$(proc_state "${pid}")"
	[[ -n "${state}" && "${state}" != Z && "${state}" != X ]] || return 0
	echo "${pid}"
}

# proc_state PID: the state letter of PID (R, S, Z, ...) from /proc; empty if there is no such
# process.
proc_state() { sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null || true; }

# proc_all_running DIR NAME...: true if every NAME recorded in DIR runs.
proc_all_running() {
	local dir="$1" name
	shift
	for name in "$@"; do
		[[ -n "$(proc_pid "${dir}" "${name}")" ]] || return 1
	done
}

# proc_any_running DIR NAME...: true if any NAME recorded in DIR runs.
proc_any_running() {
	local dir="$1" name
	shift
	for name in "$@"; do
		[[ -n "$(proc_pid "${dir}" "${name}")" ]] && return 0
	done
	return 1
}

# with_dir_lock FD DIR SECONDS WHO CMD...: run CMD holding an flock on DIR/.lock through
# descriptor FD, 8 or 9: proc_start closes those two in its children, so a process started under
# the lock does not hold it after the script exits. Dies naming WHO if another holder keeps the
# lock for SECONDS.
with_dir_lock() {
	local fd="$1" dir="$2" seconds="$3" who="$4"
	shift 4
	mkdir -p "${dir}"
	case "${fd}" in
	8) exec 8>"${dir}/.lock" ;;
	9) exec 9>"${dir}/.lock" ;;
	*) die "with_dir_lock: descriptor ${fd}: want 8 or 9, the ones proc_start closes in its children" ;;
	esac
	flock -w "${seconds}" "${fd}" || die "another ${who} holds ${dir}/.lock"
	"$@"
}

# proc_start DIR LOGFILE NAME BINARY ARGS...: start BINARY in its own session, detached from the
# caller, output to LOGFILE. The scripts' lock descriptors (8, 9) are closed in the child, or a
# later call would wait on a lock the child still holds. Returns 1 if it did not come up within 5 s.
proc_start() { proc_start_in "" "$@"; }

# proc_start_in NSPID DIR LOGFILE NAME BINARY ARGS...: proc_start, but BINARY runs in the mount
# namespace of process NSPID (none if empty). nsenter execs BINARY without forking, so the
# recorded PID is still the binary's own.
proc_start_in() {
	local ns="$1" dir="$2" logfile="$3" name="$4" bin="$5" _
	shift 5
	local enter=()
	[[ -z "${ns}" ]] || enter=(nsenter -t "${ns}" -m --)
	: >"${logfile}"
	rm -f "${dir}/${name}.pid"
	realpath "${bin}" >"${dir}/${name}.exe"
	# shellcheck disable=SC2016 # $$, $0 and $@ expand in the child shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "${dir}/${name}.pid" "${enter[@]}" "${bin}" "$@" \
		</dev/null >>"${logfile}" 2>&1 8>&- 9>&- &
	for _ in $(seq 1 50); do
		[[ -n "$(proc_pid "${dir}" "${name}")" ]] && return 0
		sleep 0.1
	done
	return 1
}

# proc_stop DIR NAME: SIGTERM, then SIGKILL after 15 s; waits until it is gone and forgets it.
# Returns 1 if it was not running.
proc_stop() {
	local dir="$1" name="$2" pid _
	pid="$(proc_pid "${dir}" "${name}")"
	if [[ -z "${pid}" ]]; then
		rm -f "${dir}/${name}.pid" "${dir}/${name}.exe"
		return 1
	fi
	kill -TERM "${pid}" 2>/dev/null || true
	for _ in $(seq 1 150); do
		[[ -z "$(proc_pid "${dir}" "${name}")" ]] && break
		sleep 0.1
	done
	if [[ -n "$(proc_pid "${dir}" "${name}")" ]]; then
		log "${name} (pid ${pid}) ignored SIGTERM for 15s; sending SIGKILL"
		kill -KILL "${pid}" 2>/dev/null || true
		for _ in $(seq 1 50); do
			[[ -z "$(proc_pid "${dir}" "${name}")" ]] && break
			sleep 0.1
		done
	fi
	[[ -z "$(proc_pid "${dir}" "${name}")" ]] || die "could not stop ${name} (pid ${pid})"
	rm -f "${dir}/${name}.pid" "${dir}/${name}.exe"
	log "stopped ${name} (pid ${pid})"
}

# proc_log_tail LOGFILE LINES: print the last LINES lines of LOGFILE to stderr, framed, if it exists.
proc_log_tail() {
	[[ -f "$1" ]] || return 0
	echo "----- last $2 lines of $1 -----" >&2
	tail -n "$2" "$1" >&2
	echo "-----" >&2
}

# proc_wait DIR NAME TIMEOUT ON_FAIL CMD...: poll CMD every 0.1 s until it succeeds; call
# ON_FAIL NAME MESSAGE (which should not return) if NAME, recorded in DIR, exits or TIMEOUT
# seconds pass first.
proc_wait() {
	local dir="$1" name="$2" timeout="$3" on_fail="$4"
	shift 4
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		[[ -n "$(proc_pid "${dir}" "${name}")" ]] || "${on_fail}" "${name}" "${name} exited"
		((SECONDS < deadline)) || "${on_fail}" "${name}" "${name} not ready after ${timeout}s"
		sleep 0.1
	done
}

# proc_status DIR NAME...: one line per process, running (with its PID) or stopped; returns 1 if
# any is stopped.
proc_status() {
	local dir="$1" name pid rc=0
	shift
	for name in "$@"; do
		pid="$(proc_pid "${dir}" "${name}")"
		if [[ -n "${pid}" ]]; then
			printf '  %-24s running (pid %s)\n' "${name}" "${pid}"
		else
			printf '  %-24s stopped\n' "${name}"
			rc=1
		fi
	done
	return "${rc}"
}

# mountns_start_holder DIR LOGFILE NAME RECORD: start `sleep infinity` in a new private mount
# namespace, recorded as NAME in DIR, for daemons whose mounts must stay off the host (the real
# node's containerd and kubelet, the kind cluster's dockerd): what they mount stays in it and goes
# with it. unshare execs sleep in place, so the recorded PID is sleep's own and the checks above
# apply to it. Writes the namespace's id to RECORD once unshare has run; returns 1 if it did not.
mountns_start_holder() {
	local dir="$1" logfile="$2" name="$3" record="$4" pid _
	: >"${logfile}"
	rm -f "${dir}/${name}.pid"
	realpath "$(command -v sleep)" >"${dir}/${name}.exe"
	# shellcheck disable=SC2016 # $$, $0 and $@ expand in the child shell
	setsid bash -c 'echo $$ >"$0"; exec "$@"' "${dir}/${name}.pid" \
		unshare --mount --propagation private -- sleep infinity \
		</dev/null >>"${logfile}" 2>&1 8>&- 9>&- &
	# Only once unshare has run is the holder's namespace not ours.
	for _ in $(seq 1 100); do
		pid="$(proc_pid "${dir}" "${name}")"
		[[ -n "${pid}" && "$(readlink "/proc/${pid}/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]] && break
		sleep 0.1
	done
	pid="$(proc_pid "${dir}" "${name}")"
	[[ -n "${pid}" && "$(readlink "/proc/${pid}/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]] || return 1
	readlink "/proc/${pid}/ns/mnt" >"${record}"
	log "started ${name} (pid ${pid}, $(cat "${record}"))"
}

# mountns_kill_members RECORD MARKER WHAT: SIGKILL every process still in the namespace RECORD
# names (a shim or ctr left over, which keeps its mounts alive; ours, so end it), then forget
# RECORD. A dead namespace's number can be reused: ours is the one whose mounts show MARKER (a
# folder only ours mounts). WHAT names the namespace in the log.
mountns_kill_members() {
	local record="$1" marker="$2" what="$3" ns p pid
	[[ -f "${record}" ]] || return 0
	ns="$(cat "${record}")"
	for p in /proc/[0-9]*; do
		[[ "$(readlink "${p}/ns/mnt" 2>/dev/null)" == "${ns}" ]] || continue
		grep -qF "${marker}" "${p}/mountinfo" 2>/dev/null || continue
		pid="${p#/proc/}"
		log "stopping pid ${pid} left in ${what} ($(tr '\0' ' ' 2>/dev/null <"${p}/cmdline" | cut -c1-80))"
		kill -KILL "${pid}" 2>/dev/null || true
	done
	rm -f "${record}"
}
