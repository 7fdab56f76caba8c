#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The kernel fan-out's program and its tool, without the library, in two network namespaces
# the test makes (S sends, R receives, a veth pair between them: IFACE in S, its peer in R).
# Usage: kfanout-test.sh CASE TOOL DRIVER OBJECT
#   tool     attach, status, detach round trip: pins, their owner and modes, routes,
#            neighbours and the tcx link made and then all gone; attach twice refused; bad
#            input refused with status 2 and nothing made
#   e2e      N = 1, 255, 256 (the slice) and 1024 (4 templates), IPv4 and IPv6, 16 and
#            1472 B (1452 for IPv6, whose header is 20 B longer): every receiver gets one
#            byte-identical copy per call, statuses 0, InCsumErrors 0, counters agree
#            (kf-driver run checks all that); the sender's device computes no checksums, so
#            the receiving kernel verifies every one; then with checksum offload as it was
#   policy   empty policy: every destination -EPERM and counted, nothing arrives; prefixes
#            and a port range: exactly the destinations they allow
#   perms    a user outside the pins' group cannot open them (EACCES); one in it publishes
#   group    an unmodified program (python3) sends to a multicast group; every member in R
#            gets every datagram once, the original still reaches the group once; an
#            unresolved member is refused; group del frees the group's slot
#   group-consume  the same with group add --consume: every member gets every datagram
#            once, the group's own socket nothing (the original consumed at the device)
#   group-netfilter  an nft output rule dropping one user's datagrams to the group: that
#            user's reach no member, root's all do (the original meets netfilter before the
#            program, so netfilter says who may send to a group)
#   enobufs  a device queue that takes only part of a slice (tbf with a small limit on the
#            sender's veth): the statuses say -ENOBUFS exactly for the clones that did not
#            arrive, the counters agree
# The library's kfanout backend (kf-lib, through ms_send; the veth's MTU is 1520 there so
# that 1472 B fit in one IPv6 datagram too):
#   lib-e2e      N = 1, 255, 256, 257, 1024, 4096, IPv4 and IPv6, 16 and 1472 B: statuses,
#                one byte-identical copy each, InCsumErrors 0, ms_stats, and templates and
#                system calls = calls x ceil(N / slice); and a clone whose checksum is zero
#   lib-policy   a destination outside the policy: -EPERM, not received, kfanout_refused
#   lib-perms    a user outside the pins' group: ms_ctx_new -EACCES (NO_FALLBACK), else the
#                fallback with the reason (MULTISEND_SHOW_BACKEND); uid 65534 in the group
#                publishes
#   lib-mixed    templates, connected sockets and kernel-path destinations in one group
#   lib-churn    destinations leave and come back between calls
#   lib-auto     MS_BACKEND_AUTO measures kfanout beside the others (auto_ns_kfanout)
#   lib-detach   multisend-kfanout detach while a publisher sends: no loss, no duplicate
#   lib-enobufs  a full device queue: -ENOBUFS exactly for what did not arrive, counted
# KF_WRAP (e.g. "valgrind --error-exitcode=99 --leak-check=full") is put before every run of
# the tool, the driver and kf-lib. Root; exit 77 when BPF, bpffs or namespaces are unavailable.
set -u
CASE=$1 TOOL=$2 DRIVER=$3 OBJECT=$4 LIB=${5:-}
WRAP=${KF_WRAP:-}
[ "$(id -u)" = 0 ] || { echo "SKIP: not root"; exit 77; }
for p in ip python3 nsenter; do
	command -v $p >/dev/null || { echo "SKIP: $p not found"; exit 77; }
done

# Descriptors: up to 4,096 receivers and as many connected sockets. A fresh machine's soft
# limit is 1024 (scripts/fresh-check sets it so): raise it to the hard limit (at most 65536)
# before anything runs, valgrind included (it takes the soft limit it starts with as its hard
# one, so a program under it cannot raise it later).
_h=$(ulimit -Hn)
{ [ "$_h" = unlimited ] || [ "$_h" -gt 65536 ]; } && _h=65536
ulimit -Sn "$_h" 2>/dev/null

tag=$(mktemp -u XXXXXXXX | tr 'A-Z' 'a-z')
S=kfs$tag R=kfr$tag A=kfa$tag B=kfb$tag
work=$(mktemp -d)
# valgrind's suppressions, where uid 65534 can read them (the perms cases run the driver as
# that user, and the source tree may be where it cannot look, e.g. under /root).
case $WRAP in
*--suppressions=*)
	_s=${WRAP##*--suppressions=}
	_s=${_s%% *}
	chmod 755 "$work"
	cp "$_s" "$work/valgrind.supp" && chmod 644 "$work/valgrind.supp" ||
		{ echo "FAIL: cannot copy $_s"; exit 1; }
	WRAP=$(printf '%s\n' "$WRAP" | sed "s|--suppressions=$_s|--suppressions=$work/valgrind.supp|")
	;;
esac
attached=
cleanup() {
	[ -n "$attached" ] && nsenter --net=/run/netns/$S "$TOOL" detach $A >/dev/null 2>&1
	ip netns del $S 2>/dev/null
	ip netns del $R 2>/dev/null
	# The pins outlive the namespaces; a detach that could not run leaves them to remove here.
	rm -rf "/sys/fs/bpf/multisend/$A" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
fail() { echo "FAIL: $*"; exit 1; }
inS() { nsenter --net=/run/netns/$S "$@"; }
tool() { nsenter --net=/run/netns/$S $WRAP "$TOOL" "$@"; }
driver() { $WRAP "$DRIVER" "$@"; }
sleep_s() { python3 -c "import time; time.sleep($1)"; }
# rx_ready WHAT: a receiver just started in the background, reading $work/rx.in (a FIFO) and
# writing $work/rx.out: open its FIFO on descriptor 3 and wait (bounded) for its first line.
rx_ready() {
	exec 3>"$work/rx.in"
	n=0
	until [ -s "$work/rx.out" ]; do
		n=$((n + 1))
		[ $n -le 400 ] || fail "$1 never started"
		sleep_s 0.05
	done
}

ip netns add $S && ip netns add $R || { echo "SKIP: ip netns add failed"; exit 77; }
ip -n $S link add $A type veth peer name $B netns $R || fail "veth"
ip -n $S link set lo up && ip -n $R link set lo up || fail "lo up"
ip -n $S link set $A up && ip -n $R link set $B up || fail "veth up"
ip -n $S addr add 10.9.0.1/24 dev $A && ip -n $R addr add 10.9.0.2/24 dev $B || fail "addr"
ip -n $R addr add 10.9.1.2/24 dev $B && ip -n $R addr add 10.9.0.3/24 dev $B || fail "addr"
ip -n $S -6 addr add fd00:9::1/64 dev $A nodad && ip -n $R -6 addr add fd00:9::2/64 dev $B nodad ||
	fail "addr6"
n=0
until ip -n $S link show $A | grep -q LOWER_UP && ip -n $R link show $B | grep -q LOWER_UP; do
	n=$((n + 1))
	[ $n -le 200 ] || fail "$A/$B never got a carrier"
	sleep_s 0.05
done
MAC=$(ip -n $R -br link show $B | awk '{print $3}')
PINS=/sys/fs/bpf/multisend/$A

# Attach (the object and bpffs must work here: a kernel without BPF or bpffs skips).
attach() {
	tool attach $A --object "$OBJECT" "$@" >"$work/attach.out" 2>&1
	st=$?
	if [ $st != 0 ]; then
		cat "$work/attach.out"
		if grep -qE "bpffs is not mounted|Operation not permitted|Function not implemented" \
			"$work/attach.out"; then
			echo "SKIP: BPF or bpffs unavailable here"
			exit 77
		fi
		fail "attach $*: exit $st"
	fi
	attached=1
	cat "$work/attach.out"
}
detach() {
	tool detach $A || fail "detach: exit $?"
	attached=
}
lib() {
	# The receivers' neighbours resolved for good: the first call goes by templates too, and
	# no neighbour notification makes the library build its records again mid-run.
	for a in 10.9.0.2 10.9.0.3 10.9.1.2 fd00:9::2; do
		inS ip neigh replace $a lladdr "$MAC" dev $A nud permanent || fail "neigh $a"
	done
	$WRAP "$LIB" run --rx-ns /run/netns/$R --tx-ns /run/netns/$S "$@" >"$work/run.out" 2>&1
	st=$?
	cat "$work/run.out"
	return $st
}
# Both ends take 1472 B of UDP over IPv6 in one datagram.
mtu1520() {
	ip -n $S link set $A mtu 1520 && ip -n $R link set $B mtu 1520 || fail "mtu"
}
run() {
	driver run --iface $A --rx-ns /run/netns/$R --tx-ns /run/netns/$S --mac "$MAC" "$@" \
		>"$work/run.out" 2>&1
	st=$?
	cat "$work/run.out"
	return $st
}

case $CASE in
tool)
	# Bad input: status 2, nothing made.
	for args in "attach" "attach $A extra" "attach $A --slice 0" "attach $A --slice 257" \
		"attach $A --mode 0771" "attach $A --mode xyz" "frob $A" "status $A --group root" \
		"policy add $A 10.0.0.0/33" "policy add $A 10.0.0.0/8 70000" \
		"policy add $A 10.0.0.0/8 9-1" "policy frob $A 10.0.0.0/8" \
		"group add $A 10.1.1.1:5000 10.9.0.2:1" "group add $A 239.1.1.1:0 10.9.0.2:1" \
		"group add $A 239.1.1.1:5000" "detach $A --consume" "attach $A --template4 198.18.1.0" \
		"attach $A --template6 100::1"; do
		# shellcheck disable=SC2086
		tool $args >"$work/bad.out" 2>&1
		st=$?
		[ $st = 2 ] || { cat "$work/bad.out"; fail "'$args': exit $st, not 2"; }
		grep -q "multisend-kfanout: " "$work/bad.out" || fail "'$args': no message"
	done
	[ -e "$PINS" ] && fail "a refused command left $PINS"
	tool attach nosuch$tag --object "$OBJECT" >"$work/bad.out" 2>&1
	[ $? = 1 ] && grep -q "no such interface" "$work/bad.out" || fail "attach to no interface"
	tool status $A >"$work/st.out" 2>&1 && fail "status before attach succeeded"
	grep -q "not attached" "$work/st.out" || fail "status before attach: $(cat "$work/st.out")"
	tool detach $A >/dev/null 2>&1 && fail "detach before attach succeeded"

	attach --mode 0640 --group root --slice 100
	grep -q "attached (tcx)" "$work/attach.out" ||
		echo "note: not tcx (a kernel before 6.6?): $(cat "$work/attach.out")"
	# Pins: owner, group, modes as multisend-kfanout(8) says for --mode 0640.
	for m in kf_ctl:-rw-r----- kf_slots:-rw-r----- kf_dests:-rw-r----- kf_status:-rw-r----- \
		kf_stats:-rw-r----- kf_policy:-rw------- kf_groups:-rw------- kf_prog:-rw------- \
		kf_link:-rw-------; do
		f=${m%%:*} want=${m#*:}
		[ -e "$PINS/$f" ] || { [ $f = kf_link ] && continue; fail "no pin $f"; }
		got=$(stat -c '%A %U %G' "$PINS/$f")
		[ "$got" = "$want root root" ] || fail "$f: $got, not $want root root"
	done
	[ "$(stat -c '%A' "$PINS")" = drwxr-x--- ] || fail "$PINS: $(stat -c %A "$PINS")"
	# Routes and neighbours of the templates.
	inS ip -4 route show 198.18.0.0/16 | grep -q "via 198.18.255.254 dev $A" || fail "no v4 route"
	inS ip -6 route show 100::/64 | grep -q "via 100::ffff:fffe dev $A" || fail "no v6 route"
	inS ip -4 neigh show 198.18.255.254 | grep -q PERMANENT || fail "no v4 neighbour"
	inS ip -6 neigh show 100::ffff:fffe | grep -q PERMANENT || fail "no v6 neighbour"
	inS ip -4 route get 198.18.0.7 | grep -q "dev $A" || fail "a template does not leave by $A"
	tool status $A >"$work/st.out" 2>&1 || { cat "$work/st.out"; fail "status: exit $?"; }
	cat "$work/st.out"
	grep -q "^$A: attached (tc.*), ifindex [0-9]*, program id [1-9][0-9]*, abi 1, slice 100$" \
		"$work/st.out" || fail "status's first line"
	grep -q "^templates 0$" "$work/st.out" && grep -q "^slots in use 0 of 1024$" "$work/st.out" &&
		grep -q "^policy empty" "$work/st.out" || fail "status's counters, slots or policy"
	# Twice: refused, and the first attachment untouched.
	tool attach $A --object "$OBJECT" >"$work/twice.out" 2>&1
	st=$?
	[ $st = 1 ] && grep -q "already attached" "$work/twice.out" ||
		{ cat "$work/twice.out"; fail "second attach: exit $st"; }
	tool status $A >/dev/null 2>&1 || fail "status after a refused second attach"
	# Policy add, list, del.
	tool policy add $A 10.9.0.0/16 5000-5999 >/dev/null || fail "policy add"
	tool policy add $A fd00:9::/64 >/dev/null || fail "policy add v6"
	tool policy list $A >"$work/pol.out" || fail "policy list"
	grep -q "^policy 10.9.0.0/16 ports 5000-5999$" "$work/pol.out" &&
		grep -q "^policy fd00:9::/64 ports 0-65535$" "$work/pol.out" ||
		{ cat "$work/pol.out"; fail "policy list"; }
	tool policy del $A 10.9.0.0/16 || fail "policy del"
	tool policy del $A 10.9.0.0/16 >/dev/null 2>&1 && fail "policy del of no entry succeeded"
	# Detach: nothing left (pins, routes, neighbours, the program on the device).
	detach
	[ -e "$PINS" ] && fail "$PINS left: $(ls "$PINS")"
	[ -z "$(inS ip -4 route show 198.18.0.0/16)" ] || fail "v4 route left"
	[ -z "$(inS ip -6 route show 100::/64)" ] || fail "v6 route left"
	inS ip -4 neigh show 198.18.255.254 | grep -q . && fail "v4 neighbour left"
	inS ip -6 neigh show 100::ffff:fffe | grep -q . && fail "v6 neighbour left"
	inS tc filter show dev $A egress 2>/dev/null | grep -q . && fail "a tc filter left"
	tool status $A >/dev/null 2>&1 && fail "status after detach succeeded"
	# Attach again after a detach works (nothing stale in the way).
	attach
	detach
	echo "tool: ok"
	;;
e2e)
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null && tool policy add $A fd00:9::/64 >/dev/null ||
		fail "policy add"
	inS "$DRIVER" csum-off $A || fail "csum-off"
	for n in 1 255 256 1024; do
		for f in 4 6; do
			dst=10.9.0.2 big=1472
			[ $f = 6 ] && dst=fd00:9::2 big=1452
			for size in 16 $big; do
				run --family $f --dst $dst --n $n --size $size --rounds 3 ||
					fail "N=$n IPv$f $size B"
			done
		done
	done
	# With the device's checksum offload on (CHECKSUM_PARTIAL: the program updates only the
	# pseudo-header sum, as the helpers must); the bytes are checked, the sums are not.
	detach
	ip -n $S link del $A
	ip -n $S link add $A type veth peer name $B netns $R || fail "veth again"
	ip -n $S link set $A up && ip -n $R link set $B up || fail "veth up"
	ip -n $S addr add 10.9.0.1/24 dev $A && ip -n $R addr add 10.9.0.2/24 dev $B || fail "addr"
	MAC=$(ip -n $R -br link show $B | awk '{print $3}')
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	run --family 4 --dst 10.9.0.2 --n 256 --size 1472 --rounds 2 || fail "offload on"
	echo "e2e: ok"
	;;
policy)
	attach --slice 64
	# Empty: nowhere.
	run --family 4 --dst 10.9.0.2 --n 64 --size 100 --rounds 2 --expect eperm ||
		fail "empty policy"
	grep -q "eperm 128" "$work/run.out" || fail "empty policy: not 128 -EPERM"
	# Two prefixes, one with a port range that splits the receivers' ephemeral ports.
	ip netns exec $R sh -c 'echo 40000 40999 >/proc/sys/net/ipv4/ip_local_port_range' ||
		fail "port range"
	tool policy add $A 10.9.0.2/32 >/dev/null && tool policy add $A 10.9.1.0/24 40000-40499 \
		>/dev/null || fail "policy add"
	run --family 4 --dst 10.9.0.2,10.9.1.2,10.9.0.3 --n 192 --size 100 --rounds 2 \
		--expect policy --allow 10.9.0.2/32:0-65535 --allow 10.9.1.0/24:40000-40499 ||
		fail "policy with prefixes and ports"
	ok=$(sed -n 's/.*statuses ok \([0-9]*\) eperm \([0-9]*\).*/\1 \2/p' "$work/run.out")
	set -- $ok
	[ "${1:-0}" -gt 128 ] && [ "${2:-0}" -gt 128 ] ||
		fail "policy: $ok: some of 10.9.1.2's ports should be allowed and 10.9.0.3 refused"
	# A longer prefix inside an allowed one decides: 10.9.0.3/32 with no port allowed.
	tool policy add $A 10.9.0.0/24 >/dev/null && tool policy add $A 10.9.0.3/32 0 >/dev/null ||
		fail "policy add"
	run --family 4 --dst 10.9.0.2,10.9.0.3 --n 64 --size 100 --expect policy \
		--allow 10.9.0.2/32:0-65535 || fail "longest prefix"
	echo "policy: ok"
	;;
perms)
	getent group users >/dev/null || { echo "SKIP: no group 'users'"; exit 77; }
	gid=$(getent group users | cut -d: -f3)
	attach --group users --mode 0660 --slice 64
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	# Outside the group: every pin EACCES, at bpf(BPF_OBJ_GET).
	setpriv --reuid 65534 --regid 65534 --clear-groups $WRAP "$DRIVER" open $A >"$work/open.out"
	st=$?
	cat "$work/open.out"
	[ $st = 1 ] && [ "$(grep -c ' EACCES$' "$work/open.out")" = 5 ] ||
		fail "uid 65534 outside the group: exit $st"
	# In the group: every pin opens, and it publishes (the driver drops to 65534 itself after
	# making its receivers and entering S, which needs root).
	setpriv --reuid 65534 --regid 65534 --groups "$gid" $WRAP "$DRIVER" open $A >"$work/open.out" ||
		{ cat "$work/open.out"; fail "uid 65534 in the group cannot open the pins"; }
	run --family 4 --dst 10.9.0.2 --n 64 --size 200 --rounds 2 --as 65534:65534:$gid ||
		fail "publishing as uid 65534 in the group"
	# Root's alone: policy and groups.
	setpriv --reuid 65534 --regid 65534 --groups "$gid" "$TOOL" policy list $A >"$work/p.out" 2>&1 &&
		fail "uid 65534 read the policy"
	grep -q "Permission denied" "$work/p.out" || fail "policy list as 65534: $(cat "$work/p.out")"
	echo "perms: ok"
	;;
group|group-consume)
	consume=
	[ "$CASE" = group-consume ] && consume=--consume
	attach --slice 64
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	inS ip route add 224.0.0.0/4 dev $A || fail "multicast route"
	for a in 10.9.0.2 10.9.0.3; do
		inS ip neigh replace $a lladdr "$MAC" dev $A nud permanent || fail "neigh $a"
	done
	# Receivers in R: three members (port 0, read back) and one socket joined to the group.
	# Told how many to expect through a FIFO (a regular file would read as empty at once).
	mkfifo "$work/rx.in" || fail "mkfifo"
	ip netns exec $R python3 -c '
import socket, struct, sys, time
ms = []
for a in ("10.9.0.2", "10.9.0.3", "10.9.0.2"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a, 0))
    ms.append(s)
g = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
g.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
g.bind(("239.7.7.7", 0))
g.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
             struct.pack("4s4s", socket.inet_aton("239.7.7.7"), socket.inet_aton("10.9.0.2")))
print(" ".join("%s:%d" % s.getsockname() for s in ms), g.getsockname()[1], flush=True)
want = int(sys.stdin.readline())          # datagrams per member, once the sender is done
import select
socks = ms + [g]
got = {s: [] for s in socks}
end = time.monotonic() + 30
while time.monotonic() < end and any(len(got[s]) < want for s in ms):
    r, _, _ = select.select(socks, [], [], 1)
    for s in r:
        got[s].append(s.recv(4096))
for s in socks:
    s.setblocking(False)
    try:
        while True:
            got[s].append(s.recv(4096))
    except BlockingIOError:
        pass
exp = [b"tick %d " % i + bytes(range(100)) for i in range(want)]
print(" ".join("ok" if sorted(got[s]) == sorted(exp) else "bad:%d" % len(got[s]) for s in ms),
      "group:%d" % len(got[g]), "groupok" if sorted(got[g]) == sorted(exp) else "groupbad", flush=True)
' <"$work/rx.in" >"$work/rx.out" 2>&1 &
	rxpid=$!
	rx_ready "the receivers"
	set -- $(head -n 1 "$work/rx.out")
	m1=$1 m2=$2 m3=$3 gport=$4
	# An unresolved member is refused, nothing added.
	tool group add $A 239.7.7.7:$gport $m1 10.9.0.99:7 >"$work/g.out" 2>&1 &&
		fail "a member with no neighbour was accepted"
	grep -q "not resolved" "$work/g.out" || fail "unresolved member: $(cat "$work/g.out")"
	tool group add $A 239.7.7.7:$gport $m1 $m2 $m3 $consume || fail "group add $consume"
	glist=$(tool group list $A)
	if [ -n "$consume" ]; then
		echo "$glist" | grep -q "^group 239.7.7.7:$gport slot [0-9]* consume members 3:" ||
			fail "group list: $glist"
	else
		echo "$glist" | grep -q "^group 239.7.7.7:$gport slot [0-9]* members 3:" ||
			fail "group list: $glist"
	fi
	# The publisher: python3, knowing nothing of any of this.
	ip netns exec $S python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("10.9.0.1"))
for i in range(100):
    s.sendto(b"tick %d " % i + bytes(range(100)), ("239.7.7.7", int(sys.argv[1])))
' "$gport" || fail "python3 sender"
	echo 100 >&3
	exec 3>&-
	wait $rxpid
	cat "$work/rx.out"
	if [ -n "$consume" ]; then
		# --consume: the members get every datagram once, the group's own socket none (the
		# original is consumed at the device, so nothing leaves for the group).
		tail -n 1 "$work/rx.out" | grep -q "^ok ok ok group:0 groupbad$" ||
			fail "--consume: every member once, the group's own socket nothing"
	else
		tail -n 1 "$work/rx.out" | grep -q "^ok ok ok group:100 groupok$" ||
			fail "every member once, the group's own copy once"
	fi
	tool status $A | grep -q "^group_datagrams 100$" || fail "group_datagrams: $(tool status $A)"
	tool status $A | grep -q "^clones 300$" || fail "clones: $(tool status $A)"
	tool group del $A 239.7.7.7:$gport || fail "group del"
	tool group list $A | grep -q . && fail "group left after del"
	tool status $A | grep -q "^slots in use 0 of 1024$" || fail "group slot not released"
	echo "$CASE: ok"
	;;
group-netfilter)
	# Who may send to a group is netfilter's to say: the original passes OUTPUT and
	# POSTROUTING before the program sees it at the device, so a rule that drops a user's
	# datagrams to the group stops their copies too (the copies themselves skip netfilter).
	command -v nft >/dev/null || { echo "SKIP: nft not found"; exit 77; }
	attach --slice 64
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	inS ip route add 224.0.0.0/4 dev $A || fail "multicast route"
	inS ip neigh replace 10.9.0.2 lladdr "$MAC" dev $A nud permanent || fail "neigh"
	mkfifo "$work/rx.in" || fail "mkfifo"
	# One member: it reads until root's 20 datagrams are in (uid 65534's, sent first on the
	# same path, would be in before them), then says what came.
	ip netns exec $R python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("10.9.0.2", 0))
print("%s:%d" % s.getsockname(), flush=True)
sys.stdin.readline()
s.settimeout(30)
got = []
try:
    while sum(1 for d in got if d.startswith(b"root ")) < 20:
        got.append(s.recv(4096))
except socket.timeout:
    pass
print("root %d nobody %d" % (sum(1 for d in got if d.startswith(b"root ")),
                             sum(1 for d in got if d.startswith(b"nobody "))), flush=True)
' <"$work/rx.in" >"$work/rx.out" 2>&1 &
	rxpid=$!
	rx_ready "the member"
	m1=$(head -n 1 "$work/rx.out")
	tool group add $A 239.7.7.8:5000 $m1 || fail "group add"
	inS nft -f - <<-EOF || fail "nft"
	table inet kfnf {
		chain out {
			type filter hook output priority 0; policy accept;
			meta skuid 65534 ip daddr 239.7.7.8 udp dport 5000 drop
		}
	}
	EOF
	echo go >&3
	sender='
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("10.9.0.1"))
for i in range(20):
    try:
        s.sendto(b"%s %d" % (sys.argv[1].encode(), i), ("239.7.7.8", 5000))
    except PermissionError:
        pass  # the drop rule: EPERM to the sender
'
	# (Debian's python3 for uid 65534: one found first in root's PATH may be under /root)
	py=/usr/bin/python3
	[ -x $py ] || py=$(command -v python3)
	inS setpriv --reuid 65534 --regid 65534 --clear-groups $py -c "$sender" nobody ||
		fail "uid 65534's sender"
	inS python3 -c "$sender" root || fail "root's sender"
	exec 3>&-
	wait $rxpid
	cat "$work/rx.out"
	tail -n 1 "$work/rx.out" | grep -q "^root 20 nobody 0$" ||
		fail "the drop rule's user reached the member through the group, or root did not"
	tool status $A | grep -q "^group_datagrams 20$" || fail "group_datagrams: $(tool status $A)"
	echo "group-netfilter: ok"
	;;
enobufs)
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	# A queue that takes a few kilobytes and sends 1 Mbit/s: part of a 256-clone slice is
	# queued (and arrives, slowly), the rest refused by the qdisc (NET_XMIT_DROP).
	inS tc qdisc add dev $A root tbf rate 1mbit burst 3000 limit 6000 || fail "tbf"
	run --family 4 --dst 10.9.0.2 --n 256 --size 100 --expect enobufs ||
		fail "a full queue"
	set -- $(sed -n 's/.*statuses ok \([0-9]*\) eperm [0-9]* enobufs \([0-9]*\).*/\1 \2/p' \
		"$work/run.out")
	[ "${1:-0}" -gt 0 ] && [ "${2:-0}" -gt 0 ] || fail "not a partial queue: ok ${1:-?} enobufs ${2:-?}"
	echo "enobufs: ok"
	;;
lib-e2e)
	mtu1520
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null && tool policy add $A fd00:9::/64 >/dev/null ||
		fail "policy add"
	inS "$DRIVER" csum-off $A || fail "csum-off"
	for n in 1 255 256 257 1024 4096; do
		for f in 4 6; do
			dst=10.9.0.2
			[ $f = 6 ] && dst=fd00:9::2
			for size in 16 1472; do
				lib --family $f --dst $dst --n $n --size $size --rounds 3 --slice 256 ||
					fail "N=$n IPv$f $size B"
			done
		done
	done
	# System calls per fan-out: the sends on the publisher's sockets (not rtnetlink's), counted
	# by strace over the warm-up call and 3 more: 4 x ceil(N / 256).
	if command -v strace >/dev/null; then
		for n in 257 1024 4096; do
			# (LeakSanitizer cannot run under ptrace: off for this run in an ASan build.)
			WRAP="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace -f -qq
				-e trace=sendto,sendmsg,sendmmsg -o $work/strace.out" \
				lib --family 4 --dst 10.9.0.2 --n $n --size 16 --rounds 3 --slice 256 ||
				fail "N=$n under strace"
			sends=$(grep -v nlmsg "$work/strace.out" | grep -c " send")
			want=$((4 * ((n + 255) / 256)))
			echo "N=$n: $sends send system calls in 4 calls (want $want)"
			[ "$sends" = $want ] || { head -n 20 "$work/strace.out"; fail "N=$n: $sends sends"; }
		done
	fi
	# A clone whose UDP checksum is zero (0xffff on the wire): IPv6 forbids 0x0000.
	for f in 4 6; do
		dst=10.9.0.2
		[ $f = 6 ] && dst=fd00:9::2
		lib --family $f --dst $dst --n 64 --size 100 --rounds 3 --slice 256 --csum-zero ||
			fail "IPv$f, a checksum of zero"
	done
	echo "lib-e2e: ok"
	;;
lib-policy)
	attach --slice 64
	tool policy add $A 10.9.0.2/32 >/dev/null || fail "policy add"
	lib --family 4 --dst 10.9.0.2,10.9.0.3 --n 200 --size 100 --rounds 3 --slice 64 \
		--refuse 10.9.0.3 || fail "a destination outside the policy"
	grep -q "eperm 300 .* refused 300 " "$work/run.out" || fail "not 300 -EPERM counted"
	echo "lib-policy: ok"
	;;
lib-perms)
	getent group users >/dev/null || { echo "SKIP: no group 'users'"; exit 77; }
	gid=$(getent group users | cut -d: -f3)
	attach --group users --mode 0660 --slice 64
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	MULTISEND_SHOW_BACKEND=1 $WRAP "$LIB" eacces --tx-ns /run/netns/$S --as 65534:65534 \
		>"$work/eacces.out" 2>&1
	st=$?
	cat "$work/eacces.out"
	[ $st = 0 ] || fail "uid 65534 outside the group: exit $st"
	grep -q "^NO_FALLBACK: .*ermission denied" "$work/eacces.out" || fail "not -EACCES"
	grep -q "kfanout skipped: .*$A.*ermission denied" "$work/eacces.out" ||
		fail "the reason is not said"
	lib --family 4 --dst 10.9.0.2 --n 300 --size 200 --rounds 3 --slice 64 \
		--as 65534:65534:$gid || fail "publishing as uid 65534 in the group"
	echo "lib-perms: ok"
	;;
lib-mixed)
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	lib --family 4 --dst 10.9.0.2,10.9.0.3 --n 1024 --size 300 --rounds 3 --slice 256 \
		--mixed || fail "a mixed group"
	echo "lib-mixed: ok"
	;;
lib-churn)
	attach --slice 64
	tool policy add $A fd00:9::/64 >/dev/null || fail "policy add"
	lib --family 6 --dst fd00:9::2 --n 300 --size 64 --rounds 8 --slice 64 --churn ||
		fail "churn"
	echo "lib-churn: ok"
	;;
lib-auto)
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	lib --family 4 --dst 10.9.0.2 --n 512 --size 64 --rounds 300 --slice 256 --auto ||
		fail "AUTO with an attachment"
	echo "lib-auto: ok"
	;;
lib-detach)
	attach --slice 128
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	# kf-lib's thread runs the detach in the sender's namespace, where kf-lib sends.
	lib --family 4 --dst 10.9.0.2 --n 512 --size 200 --rounds 40 --slice 128 \
		--detach "$WRAP $TOOL detach $A" || fail "detach while sending"
	attached=
	[ -e "$PINS" ] && fail "$PINS left after the detach"
	echo "lib-detach: ok"
	;;
lib-backstop)
	# No template leaves on the wire untaken, and none by another route: counted where they
	# would arrive (nft counters on the peers' ingress), while the library sends throughout.
	command -v nft >/dev/null || { echo "SKIP: nft not found"; exit 77; }
	attach --slice 128
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	# A second way out of S, the default route (C -> D in R): where a template without its
	# own route would go.
	C=kfc$tag D=kfd$tag
	ip -n $S link add $C type veth peer name $D netns $R || fail "veth 2"
	ip -n $S link set $C up && ip -n $R link set $D up || fail "veth 2 up"
	ip -n $S addr add 10.8.0.1/24 dev $C && ip -n $R addr add 10.8.0.2/24 dev $D || fail "addr 2"
	inS ip route add default via 10.8.0.2 dev $C || fail "default route"
	ip netns exec $R nft -f - <<-EOF || fail "nft"
	table netdev kfpeer {
		chain b { type filter hook ingress device $B priority 0; ip daddr 198.18.0.0/16 counter; ip6 daddr 100::/64 counter; }
		chain d { type filter hook ingress device $D priority 0; ip daddr 198.18.0.0/16 counter; ip6 daddr 100::/64 counter; }
	}
	EOF
	# 0. Traffic that is not a template goes on to whatever else is on the hook: an
	#    administrator's program after ours (and after the backstop) sees all of it (kf_egress
	#    passes with TCX_NEXT, not TCX_PASS, which would end the hook there).
	inS $WRAP "$DRIVER" after $A 10.9.0.2 50
	st=$?
	[ $st = 0 ] || [ $st = 77 ] || fail "a program after kf_egress did not see the traffic"
	leaked() {
		ip netns exec $R nft list table netdev kfpeer |
			awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") n += $(i + 1) } END { print n + 0 }'
	}
	# 1. The program taken off the hook by someone else (its tcx link's pin removed, or its
	#    clsact filter deleted) while sending: the backstop drops the templates, and the
	#    library sends by the kernel's path (every copy once: kf-lib checks).
	if [ -e "$PINS/kf_link" ]; then
		gone="rm -f $PINS/kf_link"
	else
		gone="tc filter del dev $A egress pref $((0x6b66)) handle 0x6b66 bpf"
	fi
	lib --family 4 --dst 10.9.0.2 --n 512 --size 200 --rounds 40 --slice 128 \
		--detach "$gone" || fail "the program taken away while sending"
	dropped=$(tool status $A | awk '$1 == "backstop_dropped" { print $2 }')
	echo "backstop_dropped $dropped; templates at the peers: $(leaked)"
	[ "${dropped:-0}" -gt 0 ] || fail "the backstop dropped nothing"
	[ "$(leaked)" = 0 ] || fail "templates reached a peer"
	tool status $A | grep -q "the program's link is gone" || [ ! -e "$PINS/kf_backstop" ] ||
		fail "status does not say the program is gone"
	detach
	# 2. The template routes removed while sending (as detach does, between taking the program
	#    off and the backstop): the templates name their interface, so none goes by the default
	#    route, and the library goes on by the kernel's path.
	attach --slice 128
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	lib --family 4 --dst 10.9.0.2 --n 512 --size 200 --rounds 40 --slice 128 \
		--detach "ip route del 198.18.0.0/16" || fail "the template route removed while sending"
	echo "templates at the peers: $(leaked)"
	[ "$(leaked)" = 0 ] || fail "templates left by another route"
	# (The tool says it could not remove the route it made: someone did.)
	tool detach $A >/dev/null 2>&1
	attached=
	# 3. A detach while sending, as lib-detach, counted at the peers too.
	attach --slice 128
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	lib --family 4 --dst 10.9.0.2 --n 512 --size 200 --rounds 40 --slice 128 \
		--detach "$WRAP $TOOL detach $A" || fail "detach while sending"
	attached=
	echo "templates at the peers: $(leaked)"
	[ "$(leaked)" = 0 ] || fail "templates reached a peer during the detach"
	echo "lib-backstop: ok"
	;;
lib-enobufs)
	attach --slice 256
	tool policy add $A 10.9.0.0/24 >/dev/null || fail "policy add"
	inS tc qdisc add dev $A root tbf rate 1mbit burst 3000 limit 6000 || fail "tbf"
	lib --family 4 --dst 10.9.0.2 --n 256 --size 100 --rounds 1 --slice 256 --enobufs ||
		fail "a full queue"
	echo "lib-enobufs: ok"
	;;
*)
	echo "unknown case $CASE"
	exit 2
	;;
esac
exit 0
