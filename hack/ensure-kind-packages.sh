#!/usr/bin/env bash
# Makes sure the Debian packages the kind cluster of hack/kind.sh needs are installed: docker.io
# (dockerd and the docker client kind drives), containerd and runc (what dockerd runs containers
# with; containerd also preloads the node image's images), jq (the runc wrapper edits OCI specs
# with it) and mmdebstrap (builds the node image's Debian root filesystems). hack/kind.sh runs
# its own dockerd and containerd in its own folders; the packages' system services are never
# used.
#
# Usage: hack/ensure-kind-packages.sh [--check]
#   --check  only report what is missing (exit 1 if anything is); install nothing
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

PACKAGES=(docker.io containerd runc jq mmdebstrap)

# missing_packages: the packages of PACKAGES whose files are not in place. Checked by the files
# we use, not by dpkg alone, so a removed binary counts as missing. The docker client must be
# Debian's (/usr/bin/docker, the daemon's own version), whatever else is on PATH.
missing_packages() {
	[[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || echo docker.io
	command -v containerd >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1 || echo containerd
	command -v runc >/dev/null 2>&1 || echo runc
	command -v jq >/dev/null 2>&1 || echo jq
	command -v mmdebstrap >/dev/null 2>&1 || echo mmdebstrap
}

CHECK=0
case "${1:-}" in
"") ;;
--check) CHECK=1 ;;
*) die "unknown argument: $1 (usage: hack/ensure-kind-packages.sh [--check])" ;;
esac

mapfile -t missing < <(missing_packages)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ ${CHECK} -eq 1 ]]; then
	log "missing Debian packages for the kind cluster: ${missing[*]}"
	exit 1
fi

if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	cat >&2 <<MSG
The kind cluster of hack/kind.sh needs the Debian packages: ${missing[*]}
This script cannot install them (not root, or no apt-get). Run:
  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}
then run the make target again (or, on a machine with Docker, set KIND_NODE_IMAGE to use it).
MSG
	exit 1
fi

log "installing Debian packages for the kind cluster: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || die "apt-get update failed; cannot install ${missing[*]}"
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
	die "apt-get install ${missing[*]} failed; install them by hand"

mapfile -t missing < <(missing_packages)
[[ ${#missing[@]} -eq 0 ]] || die "still missing after apt-get install: ${missing[*]}"
log "installed: $(dpkg-query -W -f '${Package} ${Version}  ' "${PACKAGES[@]}")"
