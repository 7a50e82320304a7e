#!/usr/bin/env bash
# Builds the node image of hack/kind.sh from Debian packages and the Go module proxy only, into
# ${LOCKEDJOB_CACHE}/kind-node-<Kubernetes version>/ (outside the checkout). `kind build
# node-image` cannot run offline (it pulls etcd, CoreDNS, pause, kindnetd and local-path images);
# this assembles what it would:
#
#   - a Debian root filesystem (mmdebstrap: systemd, containerd, runc, CNI plugins, iptables,
#     conntrack), cached in ${LOCKEDJOB_CACHE}/kind-rootfs/ by its package list;
#   - kind's entrypoint and unit files from its module (sigs.k8s.io/kind, images/base/files, read
#     from the Go module cache), with the project's files of hack/kind/node: an entrypoint that
#     guards the host's sysctls, containerd's configuration (the pods' network configuration is
#     written per node by hack/kind.sh once the node has its pod CIDR);
#   - kubelet, kubeadm and kubectl (hack/k8s-bin.sh --kind);
#   - the images kubeadm runs, written by hack/imgtool on a small Debian base layer (the binaries
#     are dynamically linked) and preloaded into the node's containerd: lockedjob.local/
#     kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy (v1.37.2), etcd
#     (v3.6.16), coredns (v1.14.6), and the project's pause image (make image-pause).
#
# The result is node.tar, the node's root filesystem, which hack/kind.sh imports into its
# Docker daemon as the image `--print-image` names. It is rebuilt only when an input changes:
# the pins, the package lists, the binaries' stamps, hack/kind/node, kind's files, this script.
#
# Usage: hack/kind-node-image.sh [--print-image] [--print-rootfs] [--force]
#   --print-image   print the image reference hack/kind.sh imports node.tar as (no build)
#   --print-rootfs  print the path of node.tar (no build)
#   --force         rebuild the node image (not the Debian root filesystems)
set -euo pipefail

# shellcheck source=hack/lib/k8s-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/k8s-common.sh"
# shellcheck source=hack/lib/containerd.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/containerd.sh"

NODE_DIR="${LOCKEDJOB_CACHE}/kind-node-${K8S_VERSION}"
ROOTFS_DIR="${LOCKEDJOB_CACHE}/kind-rootfs"
IMAGE_REPO="lockedjob.local"

SUITE="bookworm"
MIRRORS=(
	"deb http://deb.debian.org/debian ${SUITE} main"
	"deb http://deb.debian.org/debian ${SUITE}-updates main"
	"deb http://deb.debian.org/debian-security ${SUITE}-security main"
)
# The node: what kind's base image installs that these nodes use, from Debian.
NODE_PACKAGES=(systemd systemd-sysv containerd runc containernetworking-plugins iptables conntrack
	iproute2 util-linux mount procps ca-certificates libseccomp2)
# Under every component image: libc for the (dynamically linked) binaries, iptables and
# conntrack for kube-proxy.
BASE_PACKAGES=(iptables conntrack)
DPKG_OPTS=(
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*'
	--aptopt='Acquire::Languages "none"'
)

# The images kubeadm runs: name -> binary, its path in the image, version.
declare -A IMG_BIN=([kube-apiserver]=kube-apiserver [kube-controller-manager]=kube-controller-manager
	[kube-scheduler]=kube-scheduler [kube-proxy]=kube-proxy [etcd]=etcd [coredns]=coredns)
declare -A IMG_PATH=([kube-apiserver]=/usr/local/bin/kube-apiserver
	[kube-controller-manager]=/usr/local/bin/kube-controller-manager
	[kube-scheduler]=/usr/local/bin/kube-scheduler [kube-proxy]=/usr/local/bin/kube-proxy
	[etcd]=/usr/local/bin/etcd [coredns]=/coredns)
declare -A IMG_VERSION=([kube-apiserver]="${K8S_VERSION}" [kube-controller-manager]="${K8S_VERSION}"
	[kube-scheduler]="${K8S_VERSION}" [kube-proxy]="${K8S_VERSION}" [etcd]="${ETCD_VERSION}"
	[coredns]="${COREDNS_VERSION}")
PAUSE_IMAGE="${IMAGE_REPO}/pause:v1"

FORCE=0
for arg in "$@"; do
	case "${arg}" in
	--print-image)
		[[ -f "${NODE_DIR}/image" ]] || die "no node image in ${NODE_DIR}: run make kind-node-image"
		cat "${NODE_DIR}/image"
		exit 0
		;;
	--print-rootfs) echo "${NODE_DIR}/node.tar"; exit 0 ;;
	--force) FORCE=1 ;;
	-h | --help) sed -n '2,25p' "$0"; exit 0 ;;
	*) die "unknown argument: ${arg}" ;;
	esac
done

T0="$(now_ns)"
"${HACK_DIR}/ensure-kind-packages.sh" >&2 || die "the Debian packages above are needed to build the node image"
[[ "$(id -u)" -eq 0 ]] || die "building the node image needs root (mmdebstrap, the preloading containerd)"

# ---------------------------------------------------------------- inputs

"${HACK_DIR}/k8s-bin.sh" --kind >&2
# Its own make, not a job of a parallel one (make prebuild): the jobserver is not passed through.
MAKEFLAGS='' make -s -C "${LOCKEDJOB_ROOT}" imgtool image-pause IMAGES_DIR="${LOCKEDJOB_ROOT}/bin/images" >&2 ||
	die "make imgtool image-pause failed"
IMGTOOL="${LOCKEDJOB_ROOT}/bin/imgtool"
PAUSE_TAR="${LOCKEDJOB_ROOT}/bin/images/pause.tar"

go_wrapper_env
KIND_FILES="$(cd "${HACK_DIR}/kind" && go mod download sigs.k8s.io/kind &&
	go list -m -f '{{.Dir}}' sigs.k8s.io/kind)/images/base/files"
[[ -f "${KIND_FILES}/usr/local/bin/entrypoint" ]] || die "kind's files not found in ${KIND_FILES}"

# rootfs NAME VARIANT PACKAGE...: the Debian root filesystem tarball for these packages, built
# by mmdebstrap once and kept by a hash of what went in.
rootfs() {
	local name="$1" variant="$2"
	shift 2
	local hash tar
	hash="$(printf '%s\n' "${SUITE}" "${variant}" "${MIRRORS[@]}" "${DPKG_OPTS[@]}" "$@" | sha256sum | cut -c1-16)"
	tar="${ROOTFS_DIR}/${name}-${hash}.tar"
	if [[ ! -f "${tar}" ]]; then
		mkdir -p "${ROOTFS_DIR}"
		local t
		t="$(now_ns)"
		log "building the ${name} root filesystem (mmdebstrap ${SUITE} ${variant}: $*; ~2-4 min)..."
		rm -f "${ROOTFS_DIR}/${name}-"*.tar
		mmdebstrap --quiet --variant="${variant}" --format=tar --include="$(
			IFS=,
			echo "$*"
		)" "${DPKG_OPTS[@]}" "${SUITE}" "${tar}.tmp" "${MIRRORS[@]}" >&2 ||
			{ rm -f "${tar}.tmp"; die "mmdebstrap (${name}) failed"; }
		mv -f "${tar}.tmp" "${tar}"
		log "built ${tar} ($(du -m "${tar}" | cut -f1) MiB) in $(since "${t}")s"
	fi
	echo "${tar}"
}

# Both root filesystems at once: mmdebstrap mostly waits for the mirror.
node_path="$(mktemp)"
rootfs node minbase "${NODE_PACKAGES[@]}" >"${node_path}" &
node_job=$!
BASE_TAR="$(rootfs base essential "${BASE_PACKAGES[@]}")"
wait "${node_job}" || die "building the node root filesystem failed"
NODE_ROOTFS="$(cat "${node_path}")"
rm -f "${node_path}"

# The stamp: everything the image is made of.
stamp() {
	echo "${K8S_VERSION} ${ETCD_VERSION} ${COREDNS_VERSION} ${KIND_VERSION}"
	basename "${NODE_ROOTFS}"
	basename "${BASE_TAR}"
	local n
	for n in kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns; do
		cat "${K8S_BIN_DIR}/.${n}.stamp"
	done
	sha256sum "${PAUSE_TAR}" "${IMGTOOL}" "$0" | cut -d' ' -f1
	(cd "${HACK_DIR}/kind/node" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
	(cd "${KIND_FILES}" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}
WANT="$(stamp | sha256sum | cut -c1-16)"
IMAGE="${IMAGE_REPO}/kind-node:${K8S_VERSION}-${WANT:0:8}"
if [[ ${FORCE} -eq 0 && -f "${NODE_DIR}/node.tar" && "$(cat "${NODE_DIR}/stamp" 2>/dev/null)" == "${WANT}" ]]; then
	log "node image ${IMAGE}: up to date (${NODE_DIR}/node.tar)"
	exit 0
fi

# ---------------------------------------------------------------- component images

mkdir -p "${NODE_DIR}/images"
rm -f "${NODE_DIR}/stamp" "${NODE_DIR}/image"
t="$(now_ns)"
for name in "${!IMG_BIN[@]}"; do
	args=(-tag "${IMAGE_REPO}/${name}:${IMG_VERSION[$name]}" -out "${NODE_DIR}/images/${name}.tar"
		-base-layer "${BASE_TAR}")
	[[ "${name}" != coredns ]] || args+=(-entrypoint '["/coredns"]')
	"${IMGTOOL}" "${args[@]}" "file:${K8S_BIN_DIR}/${IMG_BIN[$name]}:${IMG_PATH[$name]}:0755" >&2 ||
		die "imgtool ${name} failed"
done
cp -f "${PAUSE_TAR}" "${NODE_DIR}/images/pause.tar"
log "wrote the component images in $(since "${t}")s"

# ---------------------------------------------------------------- the root filesystem

WORK="${NODE_DIR}/work"
PRELOAD="${NODE_DIR}/preload"
cleanup() { rm -rf "${WORK}" "${PRELOAD}"; }
trap cleanup EXIT
cleanup
mkdir -p "${WORK}" "${PRELOAD}"
t="$(now_ns)"
tar --xattrs --xattrs-include='*' --numeric-owner -xpf "${NODE_ROOTFS}" -C "${WORK}"

# kind's files, as its base image's Dockerfile copies them; its entrypoint runs behind ours.
install -m 0755 "${KIND_FILES}/usr/local/bin/entrypoint" "${WORK}/usr/local/bin/kind-entrypoint"
install -m 0755 "${KIND_FILES}/usr/local/bin/clean-install" "${WORK}/usr/local/bin/clean-install"
install -m 0755 "${HACK_DIR}/kind/node/entrypoint" "${WORK}/usr/local/bin/entrypoint"
install -d -m 0755 "${WORK}/kind/bin" "${WORK}/kind/manifests" "${WORK}/etc/kubernetes/manifests" \
	"${WORK}/etc/systemd/system/kubelet.service.d" "${WORK}/etc/cni/net.d" "${WORK}/etc/containerd"
install -m 0755 "${KIND_FILES}/kind/bin/"* "${WORK}/kind/bin/"
install -m 0644 "${KIND_FILES}/etc/crictl.yaml" "${WORK}/etc/crictl.yaml"
install -m 0644 "${KIND_FILES}/etc/default/kubelet" "${WORK}/etc/default/kubelet"
install -m 0644 "${KIND_FILES}/etc/sysctl.d/"* "${WORK}/etc/sysctl.d/"
for u in kubelet.service kubelet.slice undo-mount-hacks.service; do
	install -m 0644 "${KIND_FILES}/etc/systemd/system/${u}" "${WORK}/etc/systemd/system/${u}"
done
install -m 0644 "${KIND_FILES}/etc/systemd/system/kubelet.service.d/"* "${WORK}/etc/systemd/system/kubelet.service.d/"
# kind's containerd unit runs its own containerd from /usr/local/bin; Debian's is in /usr/bin.
# Loading the overlay module is left out: the host's kernel is not the node's to change.
sed -e 's|^ExecStart=/usr/local/bin/containerd|ExecStart=/usr/bin/containerd|' -e '/modprobe/d' \
	"${KIND_FILES}/etc/systemd/system/containerd.service" >"${WORK}/etc/systemd/system/containerd.service"
install -m 0644 "${HACK_DIR}/kind/node/containerd.toml" "${WORK}/etc/containerd/config.toml"
install -m 0644 "${HACK_DIR}/kind/node/default-storage.yaml" "${WORK}/kind/manifests/default-storage.yaml"
echo "${K8S_VERSION}" >"${WORK}/kind/version"
for b in kubelet kubeadm kubectl; do
	install -m 0755 "${K8S_BIN_DIR}/${b}" "${WORK}/usr/bin/${b}"
done

# What kind's Dockerfile does to systemd: no units but its own start, journald keeps off kmsg.
find "${WORK}/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "${WORK}"/lib/systemd/system/multi-user.target.wants/* "${WORK}"/etc/systemd/system/*.wants/* \
	"${WORK}"/lib/systemd/system/local-fs.target.wants/* "${WORK}"/lib/systemd/system/sockets.target.wants/*udev* \
	"${WORK}"/lib/systemd/system/sockets.target.wants/*initctl* "${WORK}"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"${WORK}/etc/systemd/journald.conf"
install -d -m 0755 "${WORK}/etc/systemd/system/multi-user.target.wants"
for u in kubelet.service containerd.service undo-mount-hacks.service; do
	ln -sfn "/etc/systemd/system/${u}" "${WORK}/etc/systemd/system/multi-user.target.wants/${u}"
done
ln -sfn /dev/null "${WORK}/etc/systemd/system/systemd-binfmt.service"
log "assembled the node's files in $(since "${t}")s"

# ---------------------------------------------------------------- preloading the images

# Import the images into the node's containerd store (its /var/lib/containerd) with the host's
# containerd, Debian's, the node's own version, in a private mount namespace of its own: the
# layers' mounts stay in it.
t="$(now_ns)"
write_private_containerd_config "${PRELOAD}/containerd.toml" "${WORK}/var/lib/containerd" \
	"${PRELOAD}/state" "${PRELOAD}/containerd.sock"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare --mount --propagation private -- bash -euo pipefail -c '
	preload="$1" pause="$2"
	shift 2
	containerd --config "${preload}/containerd.toml" >"${preload}/containerd.log" 2>&1 &
	pid=$!
	trap "kill \${pid} 2>/dev/null; wait \${pid} 2>/dev/null || true" EXIT
	for _ in $(seq 1 100); do
		ctr -a "${preload}/containerd.sock" version >/dev/null 2>&1 && break
		sleep 0.1
	done
	for tar in "$@"; do
		ctr -a "${preload}/containerd.sock" -n k8s.io images import --snapshotter overlayfs "${tar}" >&2
	done
	# The sandbox image must survive image garbage collection by kubelet.
	ctr -a "${preload}/containerd.sock" -n k8s.io images label "${pause}" io.cri-containerd.pinned=pinned >/dev/null
	ctr -a "${preload}/containerd.sock" -n k8s.io images ls -q >&2
' preload "${PRELOAD}" "${PAUSE_IMAGE}" "${NODE_DIR}"/images/*.tar || {
	tail -n 20 "${PRELOAD}/containerd.log" >&2 || true
	die "preloading the images failed"
}
log "preloaded the images in $(since "${t}")s"

# ---------------------------------------------------------------- the image

t="$(now_ns)"
tar --xattrs --xattrs-include='*' --numeric-owner -C "${WORK}" -cf "${NODE_DIR}/node.tar.tmp" .
mv -f "${NODE_DIR}/node.tar.tmp" "${NODE_DIR}/node.tar"
echo "${WANT}" >"${NODE_DIR}/stamp"
echo "${IMAGE}" >"${NODE_DIR}/image"
log "wrote ${NODE_DIR}/node.tar ($(du -m "${NODE_DIR}/node.tar" | cut -f1) MiB) in $(since "${t}")s"
log "node image ${IMAGE} ready in $(since "${T0}")s"
