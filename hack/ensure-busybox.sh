#!/usr/bin/env bash
# Makes sure Debian's busybox-static is installed: `make image-busybox` copies its /bin/busybox
# (one static binary) into the image the e2e suite's plain Jobs run (sh -c 'sleep N') on a cluster
# whose pods are real containers, such as the kind cluster of `make test-kind`.
#
# Usage: hack/ensure-busybox.sh [--check]
#   --check  only report what is missing (exit 1 if it is); install nothing
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"
# shellcheck source=hack/lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

PACKAGES=(busybox-static)

# missing_packages: busybox-static, unless it is installed and its /bin/busybox is in place (the
# busybox package's binary is dynamically linked and would not run in an image without libc).
missing_packages() {
	[[ -x /bin/busybox ]] &&
		dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' && return 0
	echo busybox-static
}

ensure_debian_packages "the e2e suite's Job image (make image-busybox)" "the image is only needed by make test-kind" "${1:-}"
