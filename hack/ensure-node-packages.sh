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
# shellcheck source=hack/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

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

ensure_debian_packages "a real node" "or set LOCKEDJOB_REAL_NODE=0 to go without a real node" "${1:-}"
