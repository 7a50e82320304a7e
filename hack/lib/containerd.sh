# shellcheck shell=bash
# The configuration of a containerd of the project's own that only a client of ours talks to:
# the kind cluster's dockerd (hack/lib/dockerd.sh) and the node image's preload
# (hack/kind-node-image.sh). Source, don't run.

# write_private_containerd_config FILE ROOT STATE SOCKET [LOG_LEVEL]: a containerd 1.6
# configuration (version 2) with its root, state and sockets where given (its opt folder, unused,
# in the state) and nothing at containerd's default paths (/var/lib/containerd, /run/containerd,
# /opt/containerd); no CRI and no snapshotter the host lacks, so it neither serves a kubelet nor
# logs their failures.
write_private_containerd_config() {
	local file="$1" root="$2" state="$3" sock="$4" level="${5:-info}"
	cat >"${file}" <<CONF
# Written by hack/lib/containerd.sh (write_private_containerd_config).
version = 2
root = "${root}"
state = "${state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "${sock}"
[ttrpc]
  address = "${sock}.ttrpc"
[debug]
  address = "${sock%.sock}-debug.sock"
  level = "${level}"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${state}/opt"
CONF
}
