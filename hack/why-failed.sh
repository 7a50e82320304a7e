#!/usr/bin/env bash
# Run a test command and, if it fails, print why as the last lines of the output.
#
# A CI log is often read from its tail, and a Go or Ginkgo failure ends with a summary that names
# only where a test failed (file:line), while the reason (the assertion's message, the error of a
# script a suite started) is printed hundreds of lines earlier. This keeps the whole output as it
# was and adds, on failure, a short digest of those reasons after it.
#
# Usage: hack/why-failed.sh LANE CMD [ARGS...]
#   LANE  a name for the digest's heading (e2e, fault, unit, ...)
# Exits with CMD's exit code.
set -uo pipefail

[[ $# -ge 2 ]] || {
	echo "usage: $0 LANE CMD [ARGS...]" >&2
	exit 2
}
lane="$1"
shift

log="$(mktemp "${TMPDIR:-/tmp}/why-failed-${lane}.XXXXXX")"
trap 'rm -f "${log}"' EXIT

"$@" 2>&1 | tee "${log}"
rc="${PIPESTATUS[0]}"
[[ "${rc}" -eq 0 ]] && exit 0

# The lines that say why: Ginkgo's [FAILED] and the line after it, go test's failing test lines
# and their file:line messages, panics, and the ERROR/die lines of the project's scripts (which a
# suite's error carries inside its message). Colour codes are dropped, repeats kept once, and only
# the last lines are kept so the digest stays short enough to be the tail of the log.
digest="$(sed -e 's/\x1b\[[0-9;]*m//g' "${log}" |
	grep -E -A1 '\[FAILED\]|^\s*--- FAIL|_test\.go:[0-9]+: |^panic: |ERROR:|: error: |Unexpected error' |
	grep -v -E '^--$|^\s*$|^=== (RUN|PAUSE|CONT|NAME)' |
	awk '!seen[$0]++' |
	cut -c1-300 |
	tail -n 14)"
echo
echo "==== why ${lane} failed (exit ${rc}; digest of the output above) ===="
echo "${digest:-no failure line recognised; read the output above}"
exit "${rc}"
