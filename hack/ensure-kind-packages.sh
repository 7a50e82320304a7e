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
# shellcheck source=hack/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

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

ensure_debian_packages "the kind cluster of hack/kind.sh" "or, on a machine with Docker, set KIND_NODE_IMAGE to use it" "${1:-}"
