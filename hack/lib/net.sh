# shellcheck shell=bash
# IPv4 helpers shared by the scripts that put a bridge on the host (hack/lib/realnode.sh for the
# local cluster's real node, hack/lib/kind.sh for the kind cluster's Docker network): a subnet
# is only taken when no address or route of the host overlaps it. Source, don't run.

ip4_to_int() { # a.b.c.d
	local IFS=.
	# shellcheck disable=SC2086 # split on dots on purpose
	set -- $1
	echo $((($1 << 24) + ($2 << 16) + ($3 << 8) + $4))
}

# cidr_overlaps A/LEN B/LEN: true if the two IPv4 prefixes share an address.
cidr_overlaps() {
	local a="${1%/*}" al="${1#*/}" b="${2%/*}" bl="${2#*/}"
	[[ "$1" == */* ]] || al=32
	[[ "$2" == */* ]] || bl=32
	local len=$((al < bl ? al : bl))
	local mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
	(($(($(ip4_to_int "${a}") & mask)) == $(($(ip4_to_int "${b}") & mask))))
}

# host_prefixes: "PREFIX DEV" for every IPv4 address and route of the host, bar default routes.
host_prefixes() {
	ip -4 -o addr show | awk '{ print $4, $2 }'
	ip -4 -o route show table all | awk '{
		p = ""; d = "-"
		for (i = 1; i <= NF; i++) {
			if (p == "" && $i ~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(\/[0-9]+)?$/) p = $i
			if ($i == "dev" && i < NF) d = $(i + 1)
		}
		if (p != "" && p !~ /\/0$/) print p, d
	}'
}

# subnet_taken SUBNET [DEV]: true if a host address or route (other than on DEV) overlaps
# SUBNET: pods there would be unreachable or shadow a real network.
subnet_taken() {
	local subnet="$1" except="${2:-}" p d
	while read -r p d; do
		[[ -n "${p}" && "${d}" != "${except}" ]] || continue
		cidr_overlaps "${subnet}" "${p}" && return 0
	done < <(host_prefixes)
	return 1
}
