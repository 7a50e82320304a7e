#!/usr/bin/env bash
# The test of `make release` (issue 26, part 2): build one release twice from the same commit and
# require byte-identical artefacts, then check what a stranger would: SHA256SUMS verifies, the
# plugin in its archive names the release and the commit, the krew manifest carries the archives'
# real checksums and passes krew's own validation, krew installs the plugin offline for every
# platform of the manifest (`kubectl krew install --manifest --archive`, as docs/plugin.md says)
# and the installed `kubectl lockedjob version` names the release, and install.yaml and the
# packaged chart name the release's image.
# `make test-release` runs it from a clean clone's commit (uncommitted changes are refused by
# hack/release.sh unless RELEASE_ALLOW_DIRTY is set, as for a run during development).
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-${ROOT}/bin/helm}"
KREW="${KREW:-${ROOT}/bin/krew}"
KREW_VALIDATE="${KREW_VALIDATE:-${ROOT}/bin/validate-krew-manifest}"
KUBECTL="${KUBECTL:-kubectl}"
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
"${KREW_VALIDATE}" -manifest "${R}/lockedjob.yaml" -skip-install >"${WORK}/krew-validate.log" 2>&1 ||
	die "krew's validation refuses the manifest: $(tail -3 "${WORK}/krew-validate.log")"

# krew, as `kubectl krew` (a kubectl plugin on PATH), installs from the manifest and a local
# archive with no network: once per platform (KREW_OS and KREW_ARCH stand for another machine),
# then the one for this machine, which kubectl then runs as `kubectl lockedjob`.
mkdir -p "${WORK}/path"
ln -s "$(readlink -f "${KREW}")" "${WORK}/path/kubectl-krew"
krew_install() { # krew_install ROOT OS ARCH
	KREW_ROOT="$1" KREW_OS="$2" KREW_ARCH="$3" KREW_NO_UPGRADE_CHECK=1 PATH="${WORK}/path:$1/bin:${PATH}" \
		"${KUBECTL}" krew install --manifest="${R}/lockedjob.yaml" --archive="${R}/kubectl-lockedjob_${VERSION}_$2_$3.tar.gz" \
		>"$1.log" 2>&1 || die "kubectl krew install of $2/$3 failed: $(tail -5 "$1.log")"
	for f in kubectl-lockedjob LICENSE; do
		[[ -f "$1/store/lockedjob/${VERSION}/${f}" ]] || die "krew's install of $2/$3 has no ${f}"
	done
}
for platform in linux_amd64 linux_arm64 darwin_amd64 darwin_arm64; do
	krew_install "${WORK}/krew-${platform}" "${platform%_*}" "${platform#*_}"
done
krew_install "${WORK}/krew" linux "$(go env GOARCH)"
said="$(PATH="${WORK}/krew/bin:${PATH}" "${KUBECTL}" lockedjob version)"
[[ "${said}" == "kubectl-lockedjob ${VERSION} (commit $(git rev-parse HEAD),"* ]] ||
	die "kubectl lockedjob, installed by krew, says: ${said}"
log "krew validates the manifest and installs the plugin offline on all four platforms"

grep -q "image: ghcr.io/lockedjob/manager:${VERSION}$" "${R}/install.yaml" || die "install.yaml does not name the release's image"
"${HELM}" lint --strict "${R}/lockedjob-0.0.0-check.tgz" >/dev/null || die "helm lint of the packaged chart failed"
rendered="$("${HELM}" template lockedjob "${R}/lockedjob-0.0.0-check.tgz")"
grep -Eq "image: \"?ghcr.io/lockedjob/manager:${VERSION}\"?$" <<<"${rendered}" ||
	die "the packaged chart does not render the release's image"
log "release ${VERSION}: reproducible, complete, and naming itself"
