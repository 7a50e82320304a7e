#!/usr/bin/env bash
# The one flow of the hack/ensure-*-packages.sh scripts: check what is missing, install it from
# Debian when root, or say exactly what to run. Source after hack/lib/k8s-common.sh (log, die).

# ensure_debian_packages WHAT ALTERNATIVE ARG: make sure the packages that missing_packages (a
# function of the caller, one package a line) reports are installed. WHAT names what needs them
# ("a real node"), ALTERNATIVE says how to go without them; ARG is the script's argument: empty,
# or --check (only report, exit 1 if anything is missing). PACKAGES lists every package, for the
# closing report.
ensure_debian_packages() {
	local what="$1" alternative="$2" arg="${3:-}" check=0 script
	script="$(basename "$0")"
	case "${arg}" in
	"") ;;
	--check) check=1 ;;
	*) die "unknown argument: ${arg} (usage: hack/${script} [--check])" ;;
	esac

	local -a missing
	mapfile -t missing < <(missing_packages)
	[[ ${#missing[@]} -eq 0 ]] && return 0
	if [[ ${check} -eq 1 ]]; then
		log "missing Debian packages for ${what}: ${missing[*]}"
		exit 1
	fi

	if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		cat >&2 <<MSG
${what^} needs the Debian packages: ${missing[*]}
This script cannot install them (not root, or no apt-get). Run:
  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}
then run the make target again (${alternative}).
MSG
		exit 1
	fi

	log "installing Debian packages for ${what}: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 || die "apt-get update failed; cannot install ${missing[*]}"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
		die "apt-get install ${missing[*]} failed; install them by hand (${alternative})"

	mapfile -t missing < <(missing_packages)
	[[ ${#missing[@]} -eq 0 ]] || die "still missing after apt-get install: ${missing[*]}"
	log "installed: $(dpkg-query -W -f '${Package} ${Version}  ' "${PACKAGES[@]}")"
}
