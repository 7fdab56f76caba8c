# SPDX-License-Identifier: MIT
# Shared by the suites' shell drivers (tests/integration/test-examples.sh,
# tests/shim/shim-test.sh): a scratch directory, background processes killed on exit, and the
# exit statuses meson understands (0 pass, 1 fail, 77 skip). POSIX sh (dash); helpers use
# _names because sh has no local variables. Source it, then call harness_init NAME.

harness_init() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
	pids=
	trap harness_cleanup EXIT
	trap 'exit 1' HUP INT TERM
}

harness_cleanup() {
	for _p in $pids; do
		kill "$_p" 2>/dev/null
	done
	rm -rf "$tmp"
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

skip() {
	echo "SKIP: $*" >&2
	exit 77
}

# Print files' contents, each line prefixed with the file's name.
show() {
	for _f in "$@"; do
		[ -s "$_f" ] && sed "s|^|  $(basename "$_f"): |" "$_f"
	done
	return 0
}

# Start a command in the background; its pid is in $bgpid and killed on exit.
bg() {
	"$@" &
	bgpid=$!
	pids="$pids $bgpid"
}

# wait_line FILE REGEX PID SECONDS: until FILE has a line matching REGEX, PID is gone or
# SECONDS pass. Background jobs are reaped by the shell while it runs `sleep`, so kill -0
# stops succeeding once PID has exited. (Its counter has its own name: sh has no local
# variables, and callers keep counts of their own in _n.)
wait_line() {
	_wl_left=$(($4 * 20))
	while [ "$_wl_left" -gt 0 ]; do
		grep -q "$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || break
		sleep 0.05
		_wl_left=$((_wl_left - 1))
	done
	grep -q "$2" "$1" 2>/dev/null
}

# ---- two private network namespaces joined by a veth pair (the kernel-bypass tests) ----------
#
# ns_pair_up: makes namespaces $nsS and $nsR (random names, deleted at exit), a veth pair
# xs0 (in S, 10.77.0.1/24, fd77::1/64) and xr0 (in R, 10.77.0.2/24, fd77::2/64), both up,
# and permanent neighbour entries in S for R's addresses, so that every datagram can go as an
# AF_XDP frame from the first one. Skips (77) without root or ip. `ipq` runs ip outside the
# test's own LD_PRELOAD (an ASan runtime finds faults in iproute2's route printing); `inns NS
# PROGRAM...` runs a program in a namespace with the preload it had.
ipq() { env -u LD_PRELOAD ip "$@"; }
inns() {
	_ns=$1
	shift
	env -u LD_PRELOAD ip netns exec "$_ns" env ${LD_PRELOAD:+LD_PRELOAD="$LD_PRELOAD"} "$@"
}
ns_pair_up() {
	[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, AF_XDP)"
	command -v ip >/dev/null 2>&1 || skip "ip is not installed (iproute2)"
	_r=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
	nsS=msxdp-$_r-s nsR=msxdp-$_r-r
	trap 'ipq netns del "$nsS" 2>/dev/null; ipq netns del "$nsR" 2>/dev/null; harness_cleanup' EXIT
	ipq netns add "$nsS" && ipq netns add "$nsR" || skip "cannot make network namespaces"
	ipq -n "$nsS" link add xs0 type veth peer name xr0 netns "$nsR" || skip "no veth"
	for _c in "-n $nsS link set lo up" "-n $nsR link set lo up" \
		"-n $nsS addr add 10.77.0.1/24 dev xs0" "-n $nsR addr add 10.77.0.2/24 dev xr0" \
		"-n $nsS addr add fd77::1/64 dev xs0 nodad" "-n $nsR addr add fd77::2/64 dev xr0 nodad" \
		"-n $nsS link set xs0 up" "-n $nsR link set xr0 up"; do
		# shellcheck disable=SC2086 # a word list
		ipq $_c || fail "ip $_c"
	done
	_mac=$(ipq -n "$nsR" -br link show xr0 | awk '{print $3}')
	ipq -n "$nsS" neigh replace 10.77.0.2 lladdr "$_mac" dev xs0 nud permanent &&
		ipq -n "$nsS" neigh replace fd77::2 lladdr "$_mac" dev xs0 nud permanent ||
		fail "neighbour entries"
	# The IPv6 address is usable once its local route is there.
	for _i in $(seq 1 100); do
		ipq -n "$nsR" -6 route show table local | grep -q 'fd77::2' && break
		sleep 0.05
	done
}
