#!/bin/sh
# SPDX-License-Identifier: MIT
# A test program that holds thousands of ephemeral ports does not depend on the ports other
# processes hold: it is started in a network namespace made here whose port range has only
# 2,000 (as on a machine whose other test runs hold the rest of the shared range), and passes
# because it makes a namespace of its own (root; skipped otherwise). Before it did, bind and
# connect failed with EADDRINUSE or EAGAIN. fanout's connected N = 3000 shapes need about
# 6,000 ports, syscount's N = 3000 about 3,000.
#
#   ports.sh PATTERN PROGRAM ARGS...   (passes when PROGRAM exits 0 and prints PATTERN;
#                                       MS_TEST_FILTER from the environment reaches fanout)
set -u
. "$(dirname "$0")/../harness.sh"
harness_init ports
[ $# -ge 2 ] || fail "usage: $0 PATTERN PROGRAM ARGS..."
pattern=$1
shift
[ -x "$1" ] || skip "$1 is not built"
[ "$(id -u)" = 0 ] || skip "needs root (a network namespace)"
command -v ip >/dev/null || skip "no ip (iproute2)"
ns=msports-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
trap 'ip netns del "$ns" 2>/dev/null; harness_cleanup' EXIT
ip netns add "$ns" || skip "cannot make a network namespace"
ip -n "$ns" link set lo up || fail "lo up in $ns"
ip netns exec "$ns" sh -c 'echo 40000 41999 >/proc/sys/net/ipv4/ip_local_port_range' ||
	fail "cannot narrow the port range of $ns"
[ "$(ip netns exec "$ns" cat /proc/sys/net/ipv4/ip_local_port_range | tr -s ' \t' ' ')" = "40000 41999" ] ||
	fail "the port range of $ns was not narrowed"
ip netns exec "$ns" "$@" >"$tmp/out" 2>&1
rc=$?
[ "$rc" = 0 ] || { show "$tmp/out"; fail "$* with 2,000 ports in its namespace: exit $rc"; }
grep -q "$pattern" "$tmp/out" || { show "$tmp/out"; fail "$*: no '$pattern' in its output"; }
echo "$*: passed with 2,000 ports in the namespace it started in"
