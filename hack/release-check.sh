#!/usr/bin/env bash
# The test of `make release` (issue 26, part 2): build one release twice from the same commit and
# require byte-identical artefacts, then check what a stranger would: SHA256SUMS verifies, the
# plugin in its archive names the release and the commit, the krew manifest carries the archives'
# real checksums, and install.yaml and the packaged chart name the release's image.
# `make test-release` runs it from a clean clone's commit (uncommitted changes are refused by
# hack/release.sh unless RELEASE_ALLOW_DIRTY is set, as for a run during development).
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-${ROOT}/bin/helm}"
VERSION=v0.0.0-check
export VERSION
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
cd "${ROOT}"

bash hack/release.sh "${WORK}/a"
bash hack/release.sh "${WORK}/b"
diff -r "${WORK}/a" "${WORK}/b" >/dev/null ||
	die "two releases of one commit differ: $(diff "${WORK}/a/SHA256SUMS" "${WORK}/b/SHA256SUMS" || true)"
log "two runs gave identical artefacts"

R="${WORK}/a"
(cd "${R}" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not verify"
for f in install.yaml lockedjob-0.0.0-check.tgz lockedjob-manager_${VERSION}.tar lockedjob-fencedwriter_${VERSION}.tar \
	lockedjob.yaml kubectl-lockedjob_${VERSION}_{linux,darwin}_{amd64,arm64}.tar.gz; do
	grep -q "  ${f}$" "${R}/SHA256SUMS" || die "${f} is missing from the release"
done

mkdir -p "${WORK}/plugin"
tar -xzf "${R}/kubectl-lockedjob_${VERSION}_linux_$(go env GOARCH).tar.gz" -C "${WORK}/plugin"
[[ -f "${WORK}/plugin/LICENSE" ]] || die "the plugin archive has no LICENSE"
said="$("${WORK}/plugin/kubectl-lockedjob" version)"
[[ "${said}" == "kubectl-lockedjob ${VERSION} (commit $(git rev-parse HEAD), built $(git log -1 --format=%cI),"* ]] ||
	die "the released plugin says: ${said}"

for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
	sum="$(sha256sum "${R}/kubectl-lockedjob_${VERSION}_${platform}.tar.gz" | cut -d' ' -f1)"
	grep -q "sha256: ${sum}$" "${R}/lockedjob.yaml" || die "the krew manifest lacks the sha256 of ${platform}"
done
! grep -Eq 'VERSION|SHA256_' "${R}/lockedjob.yaml" || die "the krew manifest keeps a placeholder"

grep -q "image: ghcr.io/lockedjob/manager:${VERSION}$" "${R}/install.yaml" || die "install.yaml does not name the release's image"
"${HELM}" lint --strict "${R}/lockedjob-0.0.0-check.tgz" >/dev/null || die "helm lint of the packaged chart failed"
rendered="$("${HELM}" template lockedjob "${R}/lockedjob-0.0.0-check.tgz")"
grep -Eq "image: \"?ghcr.io/lockedjob/manager:${VERSION}\"?$" <<<"${rendered}" ||
	die "the packaged chart does not render the release's image"
log "release ${VERSION}: reproducible, complete, and naming itself"
