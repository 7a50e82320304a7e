#!/usr/bin/env bash
# Makes sure COMMAND is on PATH, installing the Debian package PACKAGE when it is not and this runs
# as root with apt-get; otherwise says exactly what to run.
#
# Usage: hack/ensure-command.sh COMMAND PACKAGE [WHY]
set -euo pipefail

cmd="${1:?usage: hack/ensure-command.sh COMMAND PACKAGE [WHY]}"
pkg="${2:?usage: hack/ensure-command.sh COMMAND PACKAGE [WHY]}"
why="${3:-}"

if command -v "${cmd}" >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo ">> ${cmd} is missing: installing the Debian package ${pkg}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${pkg}" >/dev/null
  command -v "${cmd}" >/dev/null && exit 0
fi

cat >&2 <<MSG
${cmd} is not installed and this script cannot install it (not root, or no apt-get).${why:+ ${why}}
Run:   sudo apt-get install -y ${pkg}
then run the make target again.
MSG
exit 1
