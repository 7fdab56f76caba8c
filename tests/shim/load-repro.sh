#!/bin/sh
# SPDX-License-Identifier: MIT
# A load reproduction for tests that flaked on a loaded machine (not part of any suite; it
# takes minutes). Runs COMMAND RUNS times under load and counts passes, failures and skips:
#   - two busy loops, one per core of this 2-core machine;
#   - stray datagrams: 4 bytes to every port of 127.0.0.1 and ::1 from 1024 to 65535, over
#     and over, as other tests' senders do to ports their receivers have closed, which a
#     test's new receiver may just have been given;
# all of it in a network namespace made here (so the strays reach only COMMAND's loopback,
# never another test run's), which COMMAND sees as "the host's" loopback: a test that makes
# a namespace of its own is out of the strays' reach, as it is of other tests'.
#
#   tests/shim/load-repro.sh RUNS COMMAND...      (root; 77 without)
#
# Example, the shim's socat test from the commit before its fix, then from this tree:
#   env SHIM_DIR=build/test/shim EXAMPLES_DIR=... tests/shim/load-repro.sh 20 \
#       sh /tmp/old/tests/shim/shim-test.sh socat metrics
# Prints "load-repro: N runs: P passed, F failed, S skipped" and each failure's last lines.
set -u
[ "$#" -ge 2 ] || { echo "usage: $0 RUNS COMMAND..." >&2; exit 2; }
runs=$1
shift
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (a network namespace)"; exit 77; }
if [ -z "${LOAD_REPRO_NETNS:-}" ]; then
	LOAD_REPRO_NETNS=1 exec unshare -n sh -c \
		'env -u LD_PRELOAD ip link set lo up || exit 1; exec sh "$0" "$@"' "$0" "$runs" "$@"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/load-repro.XXXXXX") || exit 1
pids=
trap 'for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# Each load process stops by itself after an hour, should this script be killed -9.
for _i in 1 2; do
	timeout 3600 sh -c 'while :; do :; done' &
	pids="$pids $!"
done
timeout 3600 python3 -c '
import socket, time
end = time.monotonic() + 3600
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM)]
try:
    socks.append(socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
except OSError:
    pass
while time.monotonic() < end:
    for port in range(1024, 65536):
        for s in socks:
            try:
                s.sendto(b"strY", ("127.0.0.1" if s.family == socket.AF_INET else "::1", port))
            except OSError:
                pass
' &
pids="$pids $!"

p=0 f=0 s=0
i=0
while [ "$i" -lt "$runs" ]; do
	i=$((i + 1))
	"$@" >"$tmp/out.$i" 2>&1
	rc=$?
	case $rc in
	0) p=$((p + 1)) ;;
	77) s=$((s + 1)) ;;
	*)
		f=$((f + 1))
		echo "load-repro: run $i failed (exit $rc); its last lines:"
		grep -v '^\s*$' "$tmp/out.$i" | tail -n 6 | sed 's/^/    /' ;;
	esac
done
echo "load-repro: $runs runs: $p passed, $f failed, $s skipped ($*)"
[ "$f" = 0 ]
