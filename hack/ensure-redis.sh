#!/usr/bin/env bash
# Makes sure redis-server (Debian package redis-server) is on PATH. Tests start
# their own throwaway redis-server processes on free loopback ports; they never
# use a system Redis, so the package's own service is irrelevant.
set -euo pipefail

exec bash "$(dirname "${BASH_SOURCE[0]}")/ensure-command.sh" redis-server redis-server
