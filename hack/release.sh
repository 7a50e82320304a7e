#!/usr/bin/env bash
# Write a release of lockedjob into one folder, offline and reproducibly: two runs from one commit
# give byte-identical files (test/release checks it). `make release VERSION=vX.Y.Z` runs it.
#
# Usage: hack/release.sh OUT_DIR
#   OUT_DIR/install.yaml                       everything config/default installs, images of VERSION
#   OUT_DIR/lockedjob-CHART_VERSION.tgz        the Helm chart, version and appVersion of VERSION
#   OUT_DIR/lockedjob-manager_VERSION.tar      the manager image (load it: ctr images import, kind load image-archive)
#   OUT_DIR/lockedjob-fencedwriter_VERSION.tar the example workload's image
#   OUT_DIR/kubectl-lockedjob_VERSION_OS_ARCH.tar.gz  the kubectl plugin, linux and darwin, amd64 and arm64
#   OUT_DIR/lockedjob.yaml                     the krew manifest, with the archives' sha256
#   OUT_DIR/SHA256SUMS                         sha256sum -c of all of the above
#
# Environment:
#   VERSION      the release, vMAJOR.MINOR.PATCH[-PRERELEASE] (required)
#   REGISTRY     where the images are named (default ghcr.io/lockedjob); nothing is pushed
#   KUSTOMIZE, HELM, IMGTOOL  the pinned tools (default bin/...)
# Every time in the release is the commit's (git log -1 %ct), never the clock's; a checkout with
# uncommitted changes is refused, since its files are not the commit's.
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

OUT="${1:?usage: hack/release.sh OUT_DIR}"
VERSION="${VERSION:-}"
[[ "${VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION must be a release tag such as v0.1.0 (got '${VERSION}')"
REGISTRY="${REGISTRY:-ghcr.io/lockedjob}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUSTOMIZE="${KUSTOMIZE:-${ROOT}/bin/kustomize}"
HELM="${HELM:-${ROOT}/bin/helm}"
IMGTOOL="${IMGTOOL:-${ROOT}/bin/imgtool}"
cd "${ROOT}"

git diff --quiet HEAD -- || [[ -n "${RELEASE_ALLOW_DIRTY:-}" ]] ||
	die "uncommitted changes: a release is built from a commit (commit or stash them)"
COMMIT="$(git rev-parse HEAD)"
DATE="$(git log -1 --format=%cI)"
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)"
export SOURCE_DATE_EPOCH
MTIME="$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)"
PKG=github.com/lockedjob/lockedjob/internal/version
LDFLAGS="-s -w -X ${PKG}.version=${VERSION} -X ${PKG}.commit=${COMMIT} -X ${PKG}.date=${DATE}"
MANAGER_IMG="${REGISTRY}/manager:${VERSION}"
WORKLOAD_IMG="${REGISTRY}/fencedwriter:${VERSION}"

rm -rf "${OUT}"
mkdir -p "${OUT}"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
release() { go run ./hack/release "$@"; }

log "install.yaml (image ${MANAGER_IMG})"
IMG="${MANAGER_IMG}" DEPLOY_OVERLAY=config/default KUSTOMIZE="${KUSTOMIZE}" bash hack/deploy-overlay.sh "${WORK}/installer"
"${KUSTOMIZE}" build "${WORK}/installer" >"${OUT}/install.yaml"

log "the Helm chart"
cp -r dist/chart "${WORK}/chart"
# The chart's image is the release's; its tag follows appVersion.
sed -i -e "s|^    repository: lockedjob.local/manager$|    repository: ${REGISTRY}/manager|" \
	-e 's|^    tag: "dev"$|    tag: ""|' "${WORK}/chart/values.yaml"
grep -q "repository: ${REGISTRY}/manager" "${WORK}/chart/values.yaml" ||
	die "dist/chart/values.yaml no longer names the image as this script expects"
"${HELM}" package "${WORK}/chart" --version "${VERSION#v}" --app-version "${VERSION}" -d "${WORK}/helm" >/dev/null
release normalize -mtime "${MTIME}" "${WORK}/helm/lockedjob-${VERSION#v}.tgz" "${OUT}/lockedjob-${VERSION#v}.tgz"

log "images"
# The Makefile's own image build (go-image), with this release's names and version; it takes the
# commit and its date from git as this script does, and SOURCE_DATE_EPOCH for the image's times.
make -s image image-fencedwriter IMG="${MANAGER_IMG}" FENCEDWRITER_IMG="${WORKLOAD_IMG}" VERSION="${VERSION}" \
	IMAGES_DIR="${WORK}/images" IMGTOOL="${IMGTOOL}" >/dev/null
cp "${WORK}/images/manager.tar" "${OUT}/lockedjob-manager_${VERSION}.tar"
cp "${WORK}/images/fencedwriter.tar" "${OUT}/lockedjob-fencedwriter_${VERSION}.tar"

log "the kubectl plugin"
for platform in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os="${platform%/*}" arch="${platform#*/}"
	bin="${WORK}/plugin/${os}_${arch}/kubectl-lockedjob"
	CGO_ENABLED=0 GOOS="${os}" GOARCH="${arch}" go build -trimpath -ldflags "${LDFLAGS}" -o "${bin}" ./cmd/kubectl-lockedjob
	release tgz -mtime "${MTIME}" -o "${OUT}/kubectl-lockedjob_${VERSION}_${os}_${arch}.tar.gz" \
		"kubectl-lockedjob=${bin}" "LICENSE=LICENSE"
done
release krew -version "${VERSION}" -template hack/krew/lockedjob.yaml -dir "${OUT}" -o "${OUT}/lockedjob.yaml"

release sums -dir "${OUT}" -o "${OUT}/SHA256SUMS"
log "release ${VERSION} of ${COMMIT} in ${OUT}:"
cat "${OUT}/SHA256SUMS"
