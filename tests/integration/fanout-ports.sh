#!/bin/sh
# SPDX-License-Identifier: MIT
# The fanout test does not depend on the ephemeral ports other processes hold: its N = 3000
# connected shapes need about 6,000 ports at once, so it is started in a network namespace made
# here whose port range has only 4,000 (as a machine whose other test runs hold the rest of
# the shared range). It passes because it makes a namespace of its own (root; skipped
# otherwise); before it did, bind failed with EADDRINUSE.
#
#   fanout-ports.sh FANOUT BACKEND
set -u
. "$(dirname "$0")/../harness.sh"
harness_init fanout-ports
[ $# -eq 2 ] || fail "usage: $0 FANOUT BACKEND"
[ -x "$1" ] || skip "$1 is not built"
[ "$(id -u)" = 0 ] || skip "needs root (a network namespace)"
command -v ip >/dev/null || skip "no ip (iproute2)"
ns=msfp-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
trap 'ip netns del "$ns" 2>/dev/null; harness_cleanup' EXIT
ip netns add "$ns" || skip "cannot make a network namespace"
ip -n "$ns" link set lo up || fail "lo up in $ns"
ip netns exec "$ns" sh -c 'echo 40000 43999 >/proc/sys/net/ipv4/ip_local_port_range' ||
	fail "cannot narrow the port range of $ns"
[ "$(ip netns exec "$ns" cat /proc/sys/net/ipv4/ip_local_port_range | tr -s ' \t' ' ')" = "40000 43999" ] ||
	fail "the port range of $ns was not narrowed"
MS_TEST_FILTER='*-connected_N3000' ip netns exec "$ns" "$1" "$2" >"$tmp/out" 2>&1
rc=$?
[ "$rc" = 0 ] || { show "$tmp/out"; fail "fanout $2 with 4,000 ports in its namespace: exit $rc"; }
grep -q 'OK \] udp4-connected_N3000' "$tmp/out" ||
	{ show "$tmp/out"; fail "fanout $2 did not pass udp4-connected_N3000"; }
echo "fanout $2: the connected N = 3000 shapes passed with 4,000 ports in the namespace it started in"
