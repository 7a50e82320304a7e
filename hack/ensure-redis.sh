#!/usr/bin/env bash
# Makes sure redis-server (Debian package redis-server) is on PATH. Tests start
# their own throwaway redis-server processes on free loopback ports; they never
# use a system Redis, so the package's own service is irrelevant.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo ">> redis-server is missing: installing the Debian package redis-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null && exit 0
fi

cat >&2 <<'MSG'
redis-server is not installed and this script cannot install it (not root, or no apt-get).
Run:   sudo apt-get install -y redis-server
then run the make target again.
MSG
exit 1
