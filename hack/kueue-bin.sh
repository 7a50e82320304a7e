#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) at the pinned version into
# ${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockedjob}/kueue-<version>/kueue
# (outside the checkout), for test/kueue. The source comes from the Go module
# proxy through the wrapper module hack/kueue, whose committed go.sum verifies
# every module (go runs with -mod=readonly). Kueue is never a dependency of the
# operator's own go.mod: it pins other Kubernetes and controller-runtime versions.
#
# The binary is rebuilt only if it is missing or its stamp (version, wrapper
# go.mod/go.sum hash, Go version) changed, so a second run takes seconds.
#
# Usage: hack/kueue-bin.sh [--print-dir] [--force]
#   --print-dir  only print the binary folder (no build)
#   --force      rebuild
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

FORCE=0
for arg in "$@"; do
	case "${arg}" in
	--print-dir) echo "${KUEUE_BIN_DIR}"; exit 0 ;;
	--force) FORCE=1 ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	*) die "unknown argument: ${arg}" ;;
	esac
done

command -v go >/dev/null 2>&1 || die "go is not on PATH"
go_wrapper_env

WRAPPER="${HACK_DIR}/kueue"
PKG=sigs.k8s.io/kueue/cmd/kueue
[[ -f "${WRAPPER}/go.mod" && -f "${WRAPPER}/go.sum" ]] || die "missing ${WRAPPER}/go.mod or its go.sum"
grep -Eq "^[[:space:]]*(require[[:space:]]+)?sigs.k8s.io/kueue[[:space:]]+${KUEUE_VERSION}([[:space:]]|$)" "${WRAPPER}/go.mod" ||
	die "${WRAPPER}/go.mod does not require sigs.k8s.io/kueue ${KUEUE_VERSION} (update hack/lib/k8s-common.sh and the wrapper together)"

bin="${KUEUE_BIN_DIR}/kueue"
stamp="${KUEUE_BIN_DIR}/.kueue.stamp"
want="$(printf 'kueue %s %s %s %s\n' "${PKG}" "${KUEUE_VERSION}" \
	"$(cat "${WRAPPER}/go.mod" "${WRAPPER}/go.sum" | sha256sum | cut -c1-16)" "$(go env GOVERSION)")"
if [[ ${FORCE} -eq 0 && -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
	log "kueue ${KUEUE_VERSION}: up to date in ${KUEUE_BIN_DIR}"
	exit 0
fi

mkdir -p "${KUEUE_BIN_DIR}"
log "verifying modules of hack/kueue against its go.sum..."
(cd "${WRAPPER}" && go mod download && go mod verify >/dev/null) ||
	die "module verification failed for hack/kueue"

log "building kueue ${KUEUE_VERSION} (first time takes ~4 min)..."
t0=${SECONDS}
p=sigs.k8s.io/kueue/pkg/version
ldflags="-s -w -X ${p}.GitVersion=${KUEUE_VERSION} -X ${p}.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
tmp="${bin}.tmp.$$"
rm -f "${stamp}"
(cd "${WRAPPER}" && go build -mod=readonly -trimpath -p 2 -ldflags "${ldflags}" -o "${tmp}" "${PKG}") ||
	{ rm -f "${tmp}"; die "building kueue failed"; }
mv -f "${tmp}" "${bin}"
echo "${want}" >"${stamp}"
log "built kueue ${KUEUE_VERSION} in $((SECONDS - t0))s: ${bin}"
