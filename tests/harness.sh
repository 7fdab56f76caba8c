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
