#!/usr/bin/env bash
# Makes sure the Debian packages a real node needs are installed: containerd (the container
# runtime kubelet talks to), runc (what containerd runs containers with) and
# containernetworking-plugins (the bridge, host-local and loopback CNI plugins in /usr/lib/cni).
# hack/cluster.sh runs its own containerd in its own folders; the packages' system service is
# never used.
#
# Usage: hack/ensure-node-packages.sh [--check]
#   --check  only report what is missing (exit 1 if anything is); install nothing
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

PACKAGES=(containerd runc containernetworking-plugins)

# missing_packages: the packages of PACKAGES whose files are not in place. Checked by the
# files we use, not by dpkg alone, so a removed binary counts as missing.
missing_packages() {
	command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || echo containerd
	command -v runc >/dev/null 2>&1 || echo runc
	local p
	for p in bridge host-local loopback; do
		if [[ ! -x "/usr/lib/cni/${p}" ]]; then
			echo containernetworking-plugins
			break
		fi
	done
}

CHECK=0
case "${1:-}" in
"") ;;
--check) CHECK=1 ;;
*) die "unknown argument: $1 (usage: hack/ensure-node-packages.sh [--check])" ;;
esac

mapfile -t missing < <(missing_packages)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ ${CHECK} -eq 1 ]]; then
	log "missing Debian packages for a real node: ${missing[*]}"
	exit 1
fi

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	cat >&2 <<MSG
A real node needs the Debian packages: ${missing[*]}
This script cannot install them (not root, or no apt-get). Run:
  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}
then run the make target again (or set LOCKEDJOB_REAL_NODE=0 to go without a real node).
MSG
	exit 1
fi

log "installing Debian packages for a real node: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || die "apt-get update failed; cannot install ${missing[*]}"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
	die "apt-get install ${missing[*]} failed; install them by hand or set LOCKEDJOB_REAL_NODE=0"

mapfile -t missing < <(missing_packages)
[[ ${#missing[@]} -eq 0 ]] || die "still missing after apt-get install: ${missing[*]}"
log "installed: $(dpkg-query -W -f '${Package} ${Version}  ' "${PACKAGES[@]}")"
