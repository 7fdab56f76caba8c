#!/bin/sh
# SPDX-License-Identifier: MIT
# MS_TS_HARDWARE where the device cannot stamp in hardware, across a veth pair: the tstamp
# program's test_hardware_veth runs in namespace S (xs0, 10.77.0.1) and makes its receivers in
# namespace R (xr0, 10.77.0.2), both made here (tests/harness.sh ns_pair_up; root, skipped
# otherwise). Every stamped destination gets software stamps, names xs0 as its device and
# counts in ts_hw_unavailable; the datagrams arrive intact in R.
#
#   tstamp-veth.sh TSTAMP BACKEND
set -u
. "$(dirname "$0")/../harness.sh"
harness_init tstamp-veth
[ $# -eq 2 ] || fail "usage: $0 TSTAMP BACKEND"
[ -x "$1" ] || skip "$1 is not built"
ns_pair_up
ipq netns exec "$nsS" env MS_TEST_NS_R="/run/netns/$nsR" "$1" "$2"
rc=$?
[ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "tstamp $2 in a namespace: exit $rc"
exit "$rc"
