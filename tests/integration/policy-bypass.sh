#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The shim's bypass (multisend-run --bypass) under policy rules (issue 26, item 10): a UDP
# socket bound to 0.0.0.0:P in namespace S sends to a receiver in namespace R over a veth pair
# the test makes. With `ip rule add ipproto udp sport P prohibit` (and a fwmark rule with
# SO_MARK set), every sendto through the shim fails with the errno the kernel's own path gives
# (measured first without the shim) and nothing arrives; without a rule, every datagram
# arrives, byte for byte. Usage: policy-bypass.sh MULTISEND-RUN. Root; 77 when it cannot run.
set -u
RUN=$1
[ "$(id -u)" = 0 ] || { echo "not root: skipped"; exit 77; }
for p in ip python3; do
	command -v $p >/dev/null || { echo "$p not found: skipped"; exit 77; }
done
# An AddressSanitizer build of the shim needs the ASan runtime first in LD_PRELOAD of the
# program it is loaded into (python3 is not built with it; its leaks are not ours).
asan=$(ldd "$(dirname "$RUN")/libmultisend-preload.so" 2>/dev/null |
	sed -n 's/.*libasan[^ ]* => \([^ ]*\).*/\1/p' | head -n 1)
tag=$(mktemp -u XXXXXXXX)
S=msps$tag R=mspr$tag
work=$(mktemp -d)
cleanup() {
	ip netns del $S 2>/dev/null
	ip netns del $R 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

ip netns add $S && ip netns add $R || { echo "ip netns add failed: skipped"; exit 77; }
ip -n $S link add xs0 type veth peer name xr0 netns $R || fail "veth"
ip -n $S link set lo up && ip -n $R link set lo up || fail "lo up"
ip -n $S link set xs0 up && ip -n $R link set xr0 up || fail "veth up"
ip -n $S addr add 10.77.0.1/24 dev xs0 && ip -n $R addr add 10.77.0.2/24 dev xr0 || fail "addr"
# The carrier, bounded: the kernel reports it asynchronously.
n=0
until ip -n $S link show xs0 | grep -q LOWER_UP && ip -n $R link show xr0 | grep -q LOWER_UP; do
	n=$((n + 1))
	[ $n -le 200 ] || fail "xs0/xr0 never got a carrier"
	python3 -c 'import time; time.sleep(0.05)'
done
mac=$(ip -n $R -br link show xr0 | awk '{print $3}')
ip -n $S neigh replace 10.77.0.2 lladdr "$mac" dev xs0 nud permanent || fail "neigh"

# The receiver in R: prints its port, then counts datagrams equal to the payload until the
# end marker (sent by the kernel's path from another socket), at most 20 s.
nrx=0
receiver() {
	nrx=$((nrx + 1))
	rx=$work/rx$nrx
	ip netns exec $R python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.77.0.2", 0))
print(s.getsockname()[1], flush=True)
good = other = 0
end = time.monotonic() + 20
s.settimeout(1)
while time.monotonic() < end:
    try:
        d = s.recv(2048)
    except socket.timeout:
        continue
    if d == b"END":
        break
    if d == bytes(range(200)):
        good += 1
    else:
        other += 1
s.setblocking(False)
try:
    while True:
        d = s.recv(2048)
        good += d == bytes(range(200))
        other += d != bytes(range(200))
except BlockingIOError:
    pass
print(good, other, flush=True)' >"$rx" &
	rxpid=$!
	n=0
	until [ -f "$rx" ] && [ "$(wc -l <"$rx")" -ge 1 ]; do
		n=$((n + 1))
		[ $n -le 400 ] || fail "the receiver never started"
		python3 -c 'import time; time.sleep(0.05)'
	done
	rport=$(head -n 1 "$rx")
}

# Send 5 datagrams from a socket bound to 0.0.0.0:0 (its port printed first), with SO_MARK
# mark unless 0; prints the port, then each sendto's outcome (ok or the errno's name). With
# $1 = shim, through multisend-run --bypass.
sender() {
	how=$1 mark=$2 port=$3
	set -- python3 -c '
import errno, socket, sys
mark, port, rport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if mark:
    s.setsockopt(socket.SOL_SOCKET, 36, mark)  # SO_MARK
s.bind(("0.0.0.0", port))
out = []
for i in range(5):
    try:
        s.sendto(bytes(range(200)), ("10.77.0.2", rport))
        out.append("ok")
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))' "$mark" "$port" "$rport"
	if [ "$how" = shim ]; then
		if [ -n "$asan" ]; then
			ip netns exec $S env LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0 \
				"$RUN" --bypass --xdp-iface xs0 -- "$@" 2>"$work/shim.err"
		else
			ip netns exec $S "$RUN" --bypass --xdp-iface xs0 -- "$@" 2>"$work/shim.err"
		fi || { cat "$work/shim.err" >&2; return 1; }
	else
		ip netns exec $S "$@"
	fi
}

end_marker() {
	ip netns exec $S python3 -c '
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"END", ("10.77.0.2", int(sys.argv[1])))' "$rport"
	wait $rxpid
	tail -n 1 "$rx"
}

# A free port for the sender: bound once, released, used by both runs (the rule names it).
sport=$(ip netns exec $S python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 0))
print(s.getsockname()[1])')

# 0. No rule: through the shim, every datagram arrives as a frame.
receiver
out=$(sender shim 0 "$sport") || fail "sender (shim, no rule)"
got=$(end_marker)
echo "no rule: shim sendto: $out; receiver (good other): $got"
[ "$out" = "ok ok ok ok ok" ] || fail "no rule: sendto through the shim: $out"
[ "$got" = "5 0" ] || fail "no rule: the receiver got $got, expected 5 0"

# 1. sport P prohibit; 2. fwmark prohibit with SO_MARK set.
for case in sport fwmark; do
	if [ $case = sport ]; then
		rule="ipproto udp sport $sport prohibit" mark=0
	else
		rule="fwmark 0x2a prohibit" mark=42
	fi
	ip -n $S rule add $rule || fail "ip rule add $rule"
	receiver
	want=$(sender kernel $mark "$sport") || fail "sender (kernel, $rule)"
	shim=$(sender shim $mark "$sport") || fail "sender (shim, $rule)"
	got=$(end_marker)
	echo "rule $rule: kernel sendto: $want; shim sendto: $shim; receiver (good other): $got"
	case "$want" in ok*) fail "rule $rule did not stop the kernel's path: $want" ;; esac
	[ "$shim" = "$want" ] || fail "rule $rule: through the shim: $shim, the kernel's path: $want"
	[ "$got" = "0 0" ] || fail "rule $rule: the receiver got $got, expected nothing"
	ip -n $S rule del $rule || fail "ip rule del $rule"
done
echo "PASS"
