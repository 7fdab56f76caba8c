#!/bin/sh
# SPDX-License-Identifier: MIT
# The shim's bypass mode (multisend-run --bypass; docs/shim.md, "Bypass mode"):
# every send the AF_XDP path can carry goes at once as a frame, everything else by the kernel's
# path in the same call, and the program can tell no difference. Every test makes its own
# two network namespaces (tests/harness.sh ns_pair_up: S with xs0 10.77.0.1 fd77::1, R with
# xr0 10.77.0.2 fd77::2, deleted at exit), sends from S under the shim and checks every
# datagram with a real receiver in R (or on S's loopback). Programs whose output can differ
# are run twice, without the shim and under --bypass, and their outputs compared. Ports are
# fixed, but only inside the test's own namespaces.
#
#   bypass-test.sh legacy v4|v6 N SIZE plain|identical   legacy-fanout to fanout-receiver
#   bypass-test.sh legacy-local | legacy-mtu v4|v6 | legacy-neigh v4|v6 | legacy-gateway v4|v6
#                  | legacy-default v4|v6 | legacy-noiface
#   bypass-test.sh foreign python|perl|socat|nc|sockperf|iperf3
#   bypass-test.sh patterns twosockets|dup|threads|processes|descriptors|closeall|zerolength|highfd|
#                           headers|headers-v6|concurrent|concurrent-cold
#   bypass-test.sh errno all|changes|changes-fast|efault|eperm   tests/shim/bypass-errno.c
#   bypass-test.sh sendmmsg v4|v6                        tests/shim/bypass-sendmmsg.c
#   bypass-test.sh multicast                             IPv4 multicast, loop off and on
#   bypass-test.sh sigsend                               tests/shim/bypass-sigsend.c
#   bypass-test.sh live                                  multisend-stat's final shim slot
#   bypass-test.sh efault                                tests/shim/efault.c: bad pointers
#   bypass-test.sh queue local|peer                      when the port takes its queue
#
# Environment as shim-test.sh's (SHIM_DIR, EXAMPLES_DIR, TESTS_DIR, STAT_BIN). Exit status: 0 pass,
# 1 fail, 77 skip (not root, no network namespaces or veth, AF_XDP unavailable: the shim's
# "kernel bypass ... unavailable" warning, a program not installed). POSIX sh (dash).
set -u

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness.sh"
harness_init bt-bypass
chmod 755 "$tmp"

. "$here/shim-env.sh"

py=$(command -v python3 || true)
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
[ -n "$py" ] || skip "python3 is not installed"
precv="$here/bypass-recv.py"
psend="$here/bypass-send.py"

# rig: the two namespaces; R answers every datagram to a closed port with its ICMP error
# (no rate limit: the errno tests' results must not depend on how many were sent before).
rig() {
	ns_pair_up
	inns "$nsR" sysctl -qw net.ipv4.icmp_ratemask=0 net.ipv6.icmp.ratemask=0 >/dev/null 2>&1 ||
		inns "$nsR" sysctl -qw net.ipv4.icmp_ratelimit=0 net.ipv6.icmp.ratelimit=0 ||
		fail "cannot lift R's ICMP rate limits"
}

# bypass NAME PROGRAM...: PROGRAM in S under multisend-run --bypass $xopt (--xdp-iface xs0), the
# report in $tmp/NAME.json, stdout in $tmp/NAME.out, stderr in $tmp/NAME.err; its exit
# status in $rc. Skips when the shim says the bypass is unavailable.
bypass() {
	_name=$1
	shift
	# shellcheck disable=SC2086 # $xopt is one option and its value, or nothing
	inns "$nsS" "$run" --bypass $xopt --stats "$tmp/$_name.json" -- "$@" \
		>"$tmp/$_name.out" 2>"$tmp/$_name.err"
	rc=$?
	# A forked child may say so for itself (its parent's port is not its own): only when no
	# process sent a single frame is the bypass unavailable here.
	if grep -q 'kernel bypass.*unavailable' "$tmp/$_name.err" &&
		[ "$(frames "$tmp/$_name.json")" = 0 ]; then
		show "$tmp/$_name.err"
		skip "the shim says AF_XDP is unavailable here"
	fi
}

# frames FILE: the xdp_frames of every report in FILE, summed (0 without a report).
frames() {
	"$py" -c '
import json, sys
try:
    print(sum(json.loads(l)["total"].get("xdp_frames", 0) for l in open(sys.argv[1]) if l.strip()))
except (OSError, ValueError, KeyError):
    print(0)' "$1"
}

xopt='--xdp-iface xs0'

# plain NAME PROGRAM...: the same in S without the shim.
plain() {
	_name=$1
	shift
	inns "$nsS" "$@" >"$tmp/$_name.out" 2>"$tmp/$_name.err"
	rc=$?
}

# check_stats FILE PYTHON-CONDITIONS...: every report in FILE (one JSON object per line, one
# per process that sent) is loaded: r is the list, t the first report's totals, x its
# xdp_fallback; tot(KEY) and fb(REASON) sum a total and a fallback reason over all reports.
check_stats() {
	_f=$1
	shift
	"$py" - "$_f" "$@" <<'PY' || { show "$_f"; fail "report check"; }
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
r = [json.loads(l) for l in lines]
if not r:
    sys.exit("no report was written")
t = r[0]["total"]
x = t.get("xdp_fallback", {})
def tot(k):
    return sum(q["total"].get(k, 0) for q in r)
def fb(k):
    return sum(q["total"].get("xdp_fallback", {}).get(k, 0) for q in r)
def fball():
    return sum(sum(q["total"].get("xdp_fallback", {}).values()) for q in r)
for cond in sys.argv[2:]:
    if not eval(cond):
        sys.exit("report check failed: " + cond)
PY
}

# The checks every bypass report must pass: mode, every key of the spec, and
# xdp_frames + sum(xdp_fallback) == datagrams when nothing failed.
reasons="local iface mtu route neigh sockopt error other not_udp flags control reentered unavailable"
check_shape() {
	# shellcheck disable=SC2086 # a word list
	_keys=$(printf "'%s'," $reasons)
	check_stats "$1" "all(q['mode'] == 'bypass' for q in r)" \
		"all(set(q['total']['xdp_fallback']) == {$_keys} for q in r)" \
		"all(isinstance(q['total']['xdp_frames'], int) and q['total']['xdp_kicks'] >= 0 for q in r)" \
		"all(q['total']['errors'] > 0 or q['total']['xdp_frames'] + sum(q['total']['xdp_fallback'].values()) == q['total']['datagrams'] for q in r)"
}

show_report() {
	sed -n 's/^/  report: /p' "$1" | cut -c1-300
	"$py" - "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.strip():
        t = json.loads(l)["total"]
        print("  bypass: datagrams %d frames %d kicks %d errors %d fallback %s" % (
            t["datagrams"], t.get("xdp_frames", -1), t.get("xdp_kicks", -1), t["errors"],
            {k: v for k, v in t.get("xdp_fallback", {}).items() if v}))
PY
}

frames_kicks() {
	"$py" -c 'import json,sys; t=json.loads(open(sys.argv[1]).readline())["total"]; print("frames %d, kicks %d" % (t["xdp_frames"], t["xdp_kicks"]))' "$1"
}

# start_recv NS NAME ARGS...: bypass-recv.py ARGS in namespace NS, output in $tmp/NAME;
# waits until it is ready. Sets $recvpid.
start_recv() {
	_ns=$1 _rn=$2
	shift 2
	bg inns "$_ns" "$py" "$precv" "$@" >"$tmp/$_rn" 2>"$tmp/$_rn.err"
	recvpid=$bgpid
	wait_line "$tmp/$_rn" '^ready$' "$recvpid" 10 || { show "$tmp/$_rn.err"; fail "$_rn did not start"; }
}

# end_recv NAME: waits for the receiver started as NAME; fails unless it verified everything.
end_recv() {
	wait "$recvpid" || { show "$tmp/$1" "$tmp/$1.err"; fail "$1: exit status $?"; }
	sed -i '/^ready$/d' "$tmp/$1"
}

# same A B WHAT: files A and B are identical, or fail showing both.
same() {
	cmp -s "$1" "$2" && return 0
	echo "--- without the shim / +++ under --bypass:" >&2
	diff -u "$1" "$2" >&2
	fail "$3 differs under --bypass"
}

# udp_drops NS: datagrams NS's UDP sockets dropped for a full receive buffer (IPv4 and IPv6;
# the namespace's own counters, so the test's alone).
udp_drops() {
	inns "$1" cat /proc/net/snmp /proc/net/snmp6 | awk '
		/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 } else d += $c["RcvbufErrors"] }
		$1 == "Udp6RcvbufErrors" { d += $2 }
		END { print d + 0 }'
}

# ---- legacy-fanout ----------------------------------------------------------------------------

# legacy FAMILY N SIZE VARIANT [KIND]: legacy-fanout in S under --bypass to fanout-receiver in
# R (KIND local: on S's loopback; mtu: xs0's MTU 1280 below the datagrams; neigh: R's
# neighbour entry not there yet). Every datagram exactly once, in order per destination, byte
# for byte (fanout-receiver), and the report's counts exact.
legacy() {
	fam=$1 n=$2 size=$3 variant=$4 kind=${5:-}
	[ -x "$legacy_bin" ] && [ -x "$recv_bin" ] || skip "examples are not built (-Dexamples=false)"
	rig
	case $n in
	1) m=2000 rate=10000 ;;
	64) m=300 rate=2000 ;;
	*) m=40 rate=100 ;;
	esac
	vopt='' v6=''
	[ "$variant" = identical ] && vopt=--identical
	case $fam in
	v4) addr=10.77.0.2 ;;
	v6) addr='[fd77::2]' v6=--ipv6 ;;
	*) fail "legacy: v4 or v6" ;;
	esac
	recvns=$nsR
	case $kind in
	local)
		recvns=$nsS
		addr=127.0.0.1
		[ "$fam" = v6 ] && addr='[::1]' ;;
	mtu) ipq -n "$nsS" link set xs0 mtu 1280 || fail "mtu" ;;
	neigh)
		ipq -n "$nsS" neigh del 10.77.0.2 dev xs0 && ipq -n "$nsS" neigh del fd77::2 dev xs0 ||
			fail "neigh del" ;;
	gateway|default)
		# R's addresses 10.55.0.5 and fd55::5 (on its loopback) through R as a gateway:
		# frames to R's link-layer address with another IP destination. default: by
		# S's default routes, and no --xdp-iface: the shim finds xs0 by itself.
		ipq -n "$nsR" addr add 10.55.0.5/32 dev lo && ipq -n "$nsR" addr add fd55::5/128 dev lo ||
			fail "R's loopback addresses"
		if [ "$kind" = gateway ]; then
			ipq -n "$nsS" route add 10.55.0.0/24 via 10.77.0.2 &&
				ipq -n "$nsS" -6 route add fd55::/64 via fd77::2 || fail "routes via R"
		else
			ipq -n "$nsS" route add default via 10.77.0.2 &&
				ipq -n "$nsS" -6 route add default via fd77::2 || fail "default routes"
			xopt=''
		fi
		addr=10.55.0.5
		[ "$fam" = v6 ] && addr='[fd55::5]' ;;
	noiface)
		# No default route and no --xdp-iface: the shim says it has no interface, and
		# every send goes by the kernel's path (counted unavailable).
		xopt='' ;;
	esac
	base=20000
	# --idle-timeout 60: the receiver's wait for the first datagram too. Under load (ASan,
	# two cores shared by several test runs) the sender's start under the shim, its AF_XDP
	# socket and UMEM took longer than the 10 s this was, and the receiver ended with
	# "received 0 of 40960" before the first frame. A pass ends as soon as all are in.
	bg inns "$recvns" "$recv_bin" --listen "$addr:$base" --subscribers "$n" --messages "$m" \
		--size "$size" $vopt --idle-timeout 60 >"$tmp/receiver" 2>"$tmp/receiver.err"
	recvpid=$bgpid
	wait_line "$tmp/receiver" '^ready$' "$recvpid" 10 ||
		{ show "$tmp/receiver.err"; fail "fanout-receiver did not start"; }
	if [ "$kind" = noiface ]; then
		inns "$nsS" "$run" --bypass --stats "$tmp/legacy.json" -- "$legacy_bin" \
			--dest "$addr:$base" --subscribers "$n" --messages "$m" --rate "$rate" \
			--size "$size" $vopt $v6 >"$tmp/legacy.out" 2>"$tmp/legacy.err"
		rc=$?
		grep -q 'kernel bypass unavailable, .*no IPv4 default route' "$tmp/legacy.err" ||
			{ show "$tmp/legacy.err"; fail "no warning: no interface and no default route"; }
		[ "$(grep -c . "$tmp/legacy.err")" = 1 ] || { show "$tmp/legacy.err"; fail "more than one warning"; }
	else
		bypass legacy "$legacy_bin" --dest "$addr:$base" --subscribers "$n" --messages "$m" \
			--rate "$rate" --size "$size" $vopt $v6
	fi
	[ "$rc" = 0 ] || { show "$tmp/legacy.out" "$tmp/legacy.err"; fail "legacy-fanout exited with $rc"; }
	wait "$recvpid"
	_rrc=$?
	# A datagram lost to a full receive buffer (a receiver stalled under load) is said as
	# such, not taken for the shim's.
	_drops=$(udp_drops "$recvns")
	echo "  datagrams dropped by full receive buffers in the receiver's namespace: $_drops"
	[ "$_drops" = 0 ] || { show "$tmp/receiver" "$tmp/receiver.err"; fail "$_drops datagrams dropped by the receiver's full buffers"; }
	[ "$_rrc" = 0 ] || { show "$tmp/receiver" "$tmp/receiver.err"; fail "receiver: exit $_rrc"; }
	show "$tmp/receiver" "$tmp/legacy.out" "$tmp/legacy.err"
	grep -q ', errors 0,' "$tmp/legacy.out" || fail "legacy-fanout saw errors"
	total=$((n * m))
	check_shape "$tmp/legacy.json"
	check_stats "$tmp/legacy.json" "len(r) == 1" "t['calls'] == $total" \
		"t['datagrams'] == $total" "t['bytes'] == $total * $size" "t['errors'] == 0" \
		"t['calls_by']['sendto'] == $total"
	case $kind in
	''|gateway|default)
		# One kick per call (nothing deferred, nothing gathered).
		check_stats "$tmp/legacy.json" "t['xdp_frames'] == $total" "sum(x.values()) == 0" \
			"t['xdp_kicks'] == $total" ;;
	local)
		check_stats "$tmp/legacy.json" "t['xdp_frames'] == 0" "x['local'] == $total" \
			"sum(x.values()) == $total" ;;
	mtu)
		check_stats "$tmp/legacy.json" "t['xdp_frames'] == 0" "x['mtu'] == $total" \
			"sum(x.values()) == $total" ;;
	noiface)
		check_stats "$tmp/legacy.json" "t['xdp_frames'] == 0" "x['unavailable'] == $total" \
			"sum(x.values()) == $total" ;;
	neigh)
		# The first datagram finds no neighbour entry (the kernel resolves it); from some
		# point on every one is a frame.
		check_stats "$tmp/legacy.json" "x['neigh'] >= 1" "t['xdp_frames'] > 0" \
			"t['xdp_frames'] + x['neigh'] == $total" ;;
	esac
	show_report "$tmp/legacy.json"
	echo "PASS: legacy-fanout under --bypass ($fam${kind:+, $kind}), $n subscribers x $m, $size B, $variant"
}

# ---- programs nobody here wrote ---------------------------------------------------------------

input_lines() { # 400 lines of 100 bytes
	awk 'BEGIN { for (i = 1; i <= 400; i++) printf "%-99s\n", "line " i " of the input" }' >"$tmp/input"
}

# stream_twice NAME COMMAND...: COMMAND (reading $tmp/input on stdin, sending it to
# 10.77.0.2:40000) without the shim and under --bypass, each with a stream receiver in R
# that writes what it got; both received files must be the input, both outputs identical.
stream_twice() {
	_sn=$1
	shift
	input_lines
	for _w in plain bypass; do
		start_recv "$nsR" "recv.$_w" stream 10.77.0.2 40000 40000 "$tmp/got.$_w"
		"$_w" "$_sn.$_w" "$@" <"$tmp/input"
		[ "$rc" = 0 ] || { show "$tmp/$_sn.$_w.out" "$tmp/$_sn.$_w.err"; fail "$_sn ($_w) exited with $rc"; }
		end_recv "recv.$_w"
		cmp "$tmp/input" "$tmp/got.$_w" || fail "$_sn ($_w): what R received differs from the input"
	done
	show "$tmp/recv.bypass" "$tmp/$_sn.bypass.out" "$tmp/$_sn.bypass.err"
	same "$tmp/$_sn.plain.out" "$tmp/$_sn.bypass.out" "$_sn's output"
	check_shape "$tmp/$_sn.bypass.json"
	check_stats "$tmp/$_sn.bypass.json" "tot('bytes') == 40000" "tot('errors') == 0" \
		"${frames_check:-tot('xdp_frames') > 0}"
}

foreign() {
	case $1 in
	python)
		rig
		for w in plain bypass; do
			start_recv "$nsR" "recv.$w" dgram 10.77.0.2 40000 8
			"$w" "py.$w" "$py" "$psend" 10.77.0.2 40000 calls
			[ "$rc" = 0 ] || { show "$tmp/py.$w.out" "$tmp/py.$w.err"; fail "python ($w): exit $rc"; }
			end_recv "recv.$w"
		done
		show "$tmp/py.bypass.out" "$tmp/recv.bypass" "$tmp/py.bypass.err"
		same "$tmp/py.plain.out" "$tmp/py.bypass.out" "python's output"
		same "$tmp/recv.plain" "$tmp/recv.bypass" "what R received"
		check_shape "$tmp/py.bypass.json"
		# Everything it sends the frames can carry: sendto, sendmsg gathered from three
		# buffers, send, write and writev on a connected socket, sendmmsg. Kicks: one per
		# call; a vector of 64 frames takes two (in copy mode the kernel transmits at most
		# 32 frames per kick, TX_BATCH_SIZE): 10 of the sendmmsg calls; the one of 1100
		# (1024 sent, as the kernel does) 32.
		check_stats "$tmp/py.bypass.json" "len(r) == 1" "t['errors'] == 0" \
			"t['xdp_frames'] == t['datagrams']" "sum(x.values()) == 0" \
			"t['calls_by']['sendmmsg'] == 31" "t['calls_by']['write'] + t['calls_by']['writev'] == 200" \
			"t['calls'] <= t['xdp_kicks'] <= t['calls'] + 10 + 31" ;;
	perl)
		need perl
		perl -MIO::Socket::INET -e 1 2>/dev/null || skip "perl has no IO::Socket::INET"
		rig
		cat >"$tmp/send.pl" <<'PL'
use strict;
use IO::Socket::INET;
use Socket qw(pack_sockaddr_in inet_aton);
my ($host, $port) = @ARGV;
# A connected socket (IO::Socket::INET with PeerAddr) for the odd lines, an unconnected one
# with send's address argument for the even lines.
my $c = IO::Socket::INET->new(PeerAddr => $host, PeerPort => $port, Proto => 'udp')
    or die "socket: $!";
my $u = IO::Socket::INET->new(Proto => 'udp') or die "socket: $!";
my $dest = pack_sockaddr_in($port, inet_aton($host));
my ($n, $bytes) = (0, 0);
while (my $line = <STDIN>) {
    my $r = ($n % 2) ? $u->send($line, 0, $dest) : $c->send($line);
    defined $r or die "send: $!";
    $n++;
    $bytes += $r;
}
print "perl: $n datagrams, $bytes bytes\n";
PL
		stream_twice perl perl "$tmp/send.pl" 10.77.0.2 40000
		check_stats "$tmp/perl.bypass.json" "t['datagrams'] == 400" \
			"t['xdp_frames'] == 400" "sum(x.values()) == 0" ;;
	socat)
		need socat
		rig
		# UDP4-SENDTO: an unconnected socket, sendto per 100-byte read of the file.
		stream_twice socat socat -u -b 100 - UDP4-SENDTO:10.77.0.2:40000
		check_stats "$tmp/socat.bypass.json" "t['xdp_frames'] == t['datagrams']" \
			"sum(x.values()) == 0" "t['datagrams'] == 400" ;;
	nc)
		need nc
		rig
		# netcat-openbsd: a connected UDP socket, one write per read of its stdin (a pipe
		# fed line by line: how the reads split the input is the scheduler's, so the
		# datagrams' count and sizes vary; reads above the MTU go by the kernel's path,
		# fragmented). -q 1: quits 1 s after its stdin ends.
		# A slow machine (the sanitizer builds) may have the whole input in the pipe at
		# nc's first read: then every datagram is over the MTU and none is a frame.
		frames_check="tot('xdp_frames') > 0 or fb('mtu') == tot('datagrams')" \
			stream_twice nc sh -c 'while IFS= read -r l; do printf "%s\n" "$l"; done | nc -u -q 1 10.77.0.2 40000'
		check_stats "$tmp/nc.bypass.json" "sum(x.values()) == x['mtu']" ;;
	sockperf) sockperf_test ;;
	iperf3) iperf3_test ;;
	*) fail "foreign: python, perl, socat, nc, sockperf or iperf3" ;;
	esac
	for _j in "$tmp"/*.bypass.json; do show_report "$_j"; break; done
	echo "PASS: $1 without the shim and under --bypass: the same output, every datagram received intact"
}

# udp_drained NS PORT: until the UDP socket on PORT in NS has nothing queued (rx_queue 0 in
# /proc/net/udp), 20 s at most. Prints its drop count.
udp_drained() {
	_hex=$(printf ':%04X' "$2")
	_ud=0
	while [ "$_ud" -lt 400 ]; do
		_l=$(inns "$1" cat /proc/net/udp | awk -v p="$_hex" '$2 ~ p"$" { print $5, $NF; exit }')
		case $_l in
		*:00000000\ *) echo "${_l#* }"; return 0 ;;
		esac
		sleep 0.05
		_ud=$((_ud + 1))
	done
	return 1
}

sockperf_test() {
	need sockperf
	rig
	for w in plain bypass; do
		# The server's own pid (SIGINT makes it print its count), written by the shell
		# that then becomes it.
		rm -f "$tmp/srv.pid"
		# --buffer-size: SO_RCVBUF, as large as net.core.rmem_max lets it be.
		bg sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$tmp/srv.pid" \
			env -u LD_PRELOAD ip netns exec "$nsR" sockperf sr -i 10.77.0.2 -p 11111 \
			--buffer-size 8388608 >"$tmp/srv.$w" 2>&1
		wait_line "$tmp/srv.$w" 'using .* to block' "$bgpid" 10 || { show "$tmp/srv.$w"; fail "sockperf server"; }
		srv=$(cat "$tmp/srv.pid")
		# As many datagrams as the server's buffer holds at once, 2 KiB each (a 64-byte
		# datagram costs 832 bytes of it, measured), at most 5,000 a second for 1 s, and
		# half that for sockperf's own overshoot: a server that reads nothing until the
		# client is done (a loaded machine: 18 were dropped at 5,000/s with the 208 KiB
		# default buffer) still loses none, so any loss is the shim's.
		rb=$(inns "$nsR" env -u LD_PRELOAD ss -Huamn 'sport = :11111' |
			sed -n 's/.*skmem:([^)]*,rb\([0-9]*\),.*/\1/p' | head -1)
		[ -n "$rb" ] || fail "no receive buffer size for the sockperf server's socket"
		room=$((rb / 2048))
		mps=$((room / 2))
		[ "$mps" -gt 5000 ] && mps=5000
		echo "sockperf ($w): the server's buffer holds $room datagrams ($rb bytes): $mps a second for 1 s"
		"$w" "sp.$w" sockperf tp -i 10.77.0.2 -p 11111 --time 1 -m 64 --mps "$mps"
		[ "$rc" = 0 ] || { show "$tmp/sp.$w.out" "$tmp/sp.$w.err"; fail "sockperf ($w): exit $rc"; }
		drops=$(udp_drained "$nsR" 11111) || fail "the sockperf server's socket did not drain"
		[ "$drops" = 0 ] || fail "R's socket dropped $drops datagrams (a full receive buffer)"
		kill -INT "$srv"
		wait "$bgpid"
		cat "$tmp/sp.$w.out" "$tmp/sp.$w.err" >"$tmp/sp.$w.all"
		sent=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' "$tmp/sp.$w.all")
		got=$(sed -n 's/.*Total \([0-9]*\) messages received.*/\1/p' "$tmp/srv.$w")
		echo "sockperf ($w): client sent $sent, server received $got"
		[ -n "$sent" ] && [ "$sent" -le "$room" ] ||
			fail "sockperf ($w) sent $sent, more than the $room datagrams the server's buffer holds"
		[ -n "$sent" ] && [ "$sent" -gt 0 ] && [ "$sent" = "$got" ] ||
			{ show "$tmp/sp.$w.all" "$tmp/srv.$w"; fail "sockperf ($w): sent $sent, received $got"; }
		grep -qi 'error' "$tmp/sp.$w.all" "$tmp/srv.$w" &&
			{ show "$tmp/sp.$w.all" "$tmp/srv.$w"; fail "sockperf ($w) reports an error"; }
		# What must match: the lines without timing or counts.
		grep -v -e 'Total of' -e 'Summary' -e '^$' "$tmp/sp.$w.out" | sed 's/\[tid [0-9]*\]//' >"$tmp/sp.$w.cmp"
	done
	same "$tmp/sp.plain.cmp" "$tmp/sp.bypass.cmp" "sockperf's output (counts and rates aside)"
	check_shape "$tmp/sp.bypass.json"
	check_stats "$tmp/sp.bypass.json" "tot('errors') == 0" "tot('xdp_frames') >= $sent"
}

iperf3_test() {
	need iperf3
	rig
	for w in plain bypass; do
		bg inns "$nsR" iperf3 -s -1 -J >"$tmp/srv.$w" 2>"$tmp/srv.$w.err"
		srv=$bgpid
		# Until its TCP control port listens (5201: 1451 in hex, state 0A).
		_n=0
		until inns "$nsR" cat /proc/net/tcp /proc/net/tcp6 | grep -q ':1451 [0-9A-F:]* 0A'; do
			_n=$((_n + 1))
			[ "$_n" -lt 200 ] && kill -0 "$srv" 2>/dev/null || { show "$tmp/srv.$w.err"; fail "iperf3 server"; }
			sleep 0.05
		done
		"$w" "ip.$w" iperf3 -u -c 10.77.0.2 -b 10M -t 1 -l 512 -J
		[ "$rc" = 0 ] || { show "$tmp/ip.$w.out" "$tmp/ip.$w.err"; fail "iperf3 ($w): exit $rc"; }
		wait "$srv" || { show "$tmp/srv.$w" "$tmp/srv.$w.err"; fail "iperf3 server ($w): exit $?"; }
		"$py" - "$tmp/ip.$w.out" "$tmp/srv.$w" "$w" >"$tmp/ip.$w.cmp" <<'PY' || fail "iperf3 ($w)"
import json, sys
c, s = (json.load(open(p)) for p in sys.argv[1:3])
if "error" in c or "error" in s:
    sys.exit("iperf3 error: %s %s" % (c.get("error"), s.get("error")))
cs, ss = c["end"]["sum"], s["end"]["sum"]
sent, got = cs["packets"], ss["packets"]
udp = s["end"]["streams"][0]["udp"]
print("iperf3 (%s): client sent %d datagrams, server: %d, lost %d, out of order %d" % (
    sys.argv[3], sent, got, ss["lost_packets"], udp.get("out_of_order", 0)), file=sys.stderr)
if sent == 0 or got != sent or ss["lost_packets"] != 0 or udp.get("out_of_order", 0) != 0:
    sys.exit("iperf3: the server did not receive exactly what the client sent")
# What must be the same in both runs: the test's parameters.
st = c["start"]["test_start"]
print(json.dumps({k: st[k] for k in ("protocol", "num_streams", "blksize", "duration", "reverse")}))
print("lost 0, out of order 0, all received")
PY
		sent=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum"]["packets"])' "$tmp/ip.$w.out")
	done
	same "$tmp/ip.plain.cmp" "$tmp/ip.bypass.cmp" "iperf3's results (counts and rates aside)"
	check_shape "$tmp/ip.bypass.json"
	check_stats "$tmp/ip.bypass.json" "tot('errors') == 0" "tot('xdp_frames') >= $sent"
}

# ---- order -----------------------------------------------------------------------------------

patterns() {
	rig
	k=3 uo='--unordered 2'
	case $1 in
	twosockets|dup) k=2 uo= ;;
	concurrent|concurrent-cold) k=8 uo= ;;
	headers|headers-v6) k=6 uo=--headers ;;
	descriptors|highfd) k=3 uo= ;;
	zerolength) k=2 uo= ;;
	closeall) k=1 uo= ;;
	threads|processes) ;;
	*) fail "patterns: twosockets, dup, threads, processes, descriptors, closeall, zerolength, highfd, headers, headers-v6, concurrent or concurrent-cold" ;;
	esac
	peer=10.77.0.2 pat=$1
	[ "$1" = headers-v6 ] && peer=fd77::2 pat=headers
	for w in plain bypass; do
		# shellcheck disable=SC2086 # $uo is a word list
		start_recv "$nsR" "recv.$w" dgram "$peer" 40000 "$k" $uo
		"$w" "pat.$w" "$py" "$psend" "$peer" 40000 "$pat"
		[ "$rc" = 77 ] && { show "$tmp/pat.$w.err"; skip "$1: the program cannot run here"; }
		[ "$rc" = 0 ] || { show "$tmp/pat.$w.out" "$tmp/pat.$w.err"; fail "$1 ($w): exit $rc"; }
		end_recv "recv.$w"
	done
	show "$tmp/recv.bypass" "$tmp/pat.bypass.out" "$tmp/pat.bypass.err"
	same "$tmp/pat.plain.out" "$tmp/pat.bypass.out" "the program's output"
	same "$tmp/recv.plain" "$tmp/recv.bypass" "what R received"
	case $1 in headers*)
		# The same sources, TTLs and TOS as the kernel's datagrams (compared above).
		grep -q "^sock 3: 100 from .* port 20003 .*200" "$tmp/recv.bypass" || fail "headers: socket 3"
		# IPv4 IP_TOS 0xb8 also gives the socket the priority its TOS implies (4): that
		# alone keeps nothing from the frames (a priority the program sets does).
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "t['errors'] == 0" \
			"t['xdp_frames'] == t['datagrams'] == 606" "fball() == 0"
		show_report "$tmp/pat.bypass.json"
		echo "PASS: patterns $1: the frames' addresses, ports, TTL and TOS are the kernel's"
		return 0 ;;
	esac
	if [ "$1" = closeall ]; then
		grep -qx 'sock 0: 500 datagrams: 0-499' "$tmp/recv.bypass" || fail "closeall: R's receiver"
		# close_range and close leave the port alone (frames go on); a dup2 over its
		# descriptors makes it give them up (the kernel's path from then on).
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "t['errors'] == 0" \
			"t['xdp_frames'] >= 300" "t['xdp_frames'] + fball() == t['datagrams']"
		show_report "$tmp/pat.bypass.json"
		echo "PASS: patterns closeall: descriptors the program did not open, closed and replaced"
		return 0
	fi
	if [ "$1" = zerolength ]; then
		# (compared above: the same empty datagrams, in the same places.)
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "t['errors'] == 0" "t['xdp_frames'] > 0"
		show_report "$tmp/pat.bypass.json"
		echo "PASS: patterns zerolength: the same empty datagrams as the kernel's"
		return 0
	fi
	if [ "$1" = highfd ]; then
		grep -qx 'sock 0: 150 datagrams: 0-149' "$tmp/recv.bypass" &&
			grep -qx 'sock 1: 150 datagrams: 0-149' "$tmp/recv.bypass" &&
			grep -qx 'sock 2: 50 datagrams: 0-49' "$tmp/recv.bypass" || fail "highfd: R's receiver"
		# The 250 on number 70000 by the kernel's path (other, if the totals count them);
		# the 100 on the low one and the 3 end markers as frames.
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "t['errors'] == 0" \
			"t['xdp_frames'] == 103" "fball() == x['other']" "x['other'] in (0, 250)"
		show_report "$tmp/pat.bypass.json"
		echo "PASS: patterns highfd: a number past the shim's table by the kernel's path"
		return 0
	fi
	if [ "$1" = descriptors ]; then
		grep -qx 'sock 0: 6 datagrams: 0-5' "$tmp/recv.bypass" &&
			grep -qx 'sock 1: 10 datagrams: 0-9' "$tmp/recv.bypass" &&
			grep -qx 'sock 2: 3 datagrams: 0-2' "$tmp/recv.bypass" || fail "descriptors: R's receiver"
		# One send without a peer (EDESTADDRREQ) by the kernel's path (not a datagram).
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "t['errors'] == 1" \
			"t['xdp_frames'] == t['datagrams'] == 22" "fball() == 1"
		show_report "$tmp/pat.bypass.json"
		echo "PASS: patterns descriptors: every datagram to the peer its socket had at the time"
		return 0
	fi
	# Destinations 0 and 1 saw every number in the order it was sent, across sockets,
	# descriptors, threads or processes.
	case $1 in
	twosockets|dup) n=2000 ;;
	concurrent*) n=3000 ;;
	threads) n=600 ;;
	processes) n=400 ;;
	esac
	_i=1
	case $1 in concurrent*) _i=7 ;; esac # one sender per destination: all in order
	for i in $(seq 0 $_i); do
		grep -qx "sock $i: $n datagrams: 0-$((n - 1))" "$tmp/recv.bypass" ||
			fail "$1: destination $i did not see 0..$((n - 1)) in send order"
	done
	check_shape "$tmp/pat.bypass.json"
	check_stats "$tmp/pat.bypass.json" "tot('errors') == 0" "tot('xdp_frames') > 0"
	case $1 in
	concurrent-cold)
		# The threads' first sends while one of them makes the port go by the kernel's
		# path (no port yet: unavailable), in order all the same.
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "fball() == fb('unavailable')" ;;
	processes)
		# A forked child may have no port of its own (counted unavailable); nothing
		# else may go by the kernel's path. (multiprocessing's child ends in _exit: it
		# may write no report.)
		check_stats "$tmp/pat.bypass.json" "fball() == fb('unavailable')" ;;
	*)
		check_stats "$tmp/pat.bypass.json" "len(r) == 1" "fball() == 0" \
			"t['xdp_frames'] == t['datagrams']" ;;
	esac
	show_report "$tmp/pat.bypass.json"
	echo "PASS: patterns $1: exact send order under --bypass"
}

# ---- signals ----------------------------------------------------------------------------------

# A 50 us timer's handler sends while the main thread is inside the shim's send: the handler's
# datagrams by the kernel's path (reentered), the main thread's as frames; each stream in order,
# exactly once.
sigsend_test() {
	bin=${TESTS_DIR:?}/bypass-sigsend
	[ -x "$bin" ] || fail "$bin is not built"
	rig
	start_recv "$nsR" recv.bypass dgram 10.77.0.2 40000 2
	bypass sig "$bin" 10.77.0.2 40000 20000
	[ "$rc" = 0 ] || { show "$tmp/sig.out" "$tmp/sig.err"; fail "bypass-sigsend: exit $rc"; }
	end_recv recv.bypass
	show "$tmp/sig.out" "$tmp/recv.bypass" "$tmp/sig.err"
	h=$(sed -n 's/^main 20000 handler \([0-9]*\)$/\1/p' "$tmp/sig.out")
	[ -n "$h" ] && [ "$h" -gt 0 ] || fail "the handler sent nothing"
	grep -qx 'sock 0: 20000 datagrams: 0-19999' "$tmp/recv.bypass" &&
		grep -qx "sock 1: $h datagrams: 0-$((h - 1))" "$tmp/recv.bypass" ||
		fail "R did not get each stream exactly once, in order"
	check_shape "$tmp/sig.json"
	check_stats "$tmp/sig.json" "len(r) == 1" "t['errors'] == 0" \
		"t['datagrams'] == 20002 + $h" "x['reentered'] > 0" \
		"fball() == x['reentered']" "t['xdp_frames'] >= 20002"
	show_report "$tmp/sig.json"
	echo "PASS: a signal handler's sends inside the shim's: by the kernel's path, both streams in order"
}

# ---- multicast --------------------------------------------------------------------------------

# IPv4 multicast out of xs0 to a group R joined: with IP_MULTICAST_LOOP off the frames carry it;
# on (the default) it goes by the kernel's path, counted local (a copy loops back to S).
multicast_test() {
	rig
	for w in plain bypass; do
		start_recv "$nsR" "recv.$w" dgram 239.77.0.1@10.77.0.2 40000 2
		"$w" "mc.$w" "$py" "$psend" 239.77.0.1 40000 multicast
		[ "$rc" = 0 ] || { show "$tmp/mc.$w.out" "$tmp/mc.$w.err"; fail "multicast ($w): exit $rc"; }
		end_recv "recv.$w"
	done
	show "$tmp/recv.bypass" "$tmp/mc.bypass.out" "$tmp/mc.bypass.err"
	same "$tmp/mc.plain.out" "$tmp/mc.bypass.out" "the program's output"
	same "$tmp/recv.plain" "$tmp/recv.bypass" "what R received"
	grep -qx 'sock 0: 500 datagrams: 0-499' "$tmp/recv.bypass" &&
		grep -qx 'sock 1: 500 datagrams: 0-499' "$tmp/recv.bypass" || fail "R's receiver"
	check_shape "$tmp/mc.bypass.json"
	# 500 and an end marker each way.
	check_stats "$tmp/mc.bypass.json" "len(r) == 1" "t['errors'] == 0" "t['xdp_frames'] == 501" \
		"x['local'] == 501" "sum(x.values()) == 501"
	show_report "$tmp/mc.bypass.json"
	echo "PASS: multicast: loop off as frames, loop on by the kernel's path, all received in order"
}

# ---- errno -------------------------------------------------------------------------------------

routes() {
	# A second veth pair, xs1 10.88.0.1/24 in S to xr1 10.88.0.2/24 in R: a route that
	# leaves by another interface than the bypass's.
	ipq -n "$nsS" link add xs1 type veth peer name xr1 netns "$nsR" || fail "veth xs1"
	ipq -n "$nsS" addr add 10.88.0.1/24 dev xs1 && ipq -n "$nsR" addr add 10.88.0.2/24 dev xr1 &&
		ipq -n "$nsS" link set xs1 up && ipq -n "$nsR" link set xr1 up || fail "xs1"
	ipq -n "$nsR" addr add 10.55.0.5/32 dev lo && ipq -n "$nsR" addr add fd55::5/128 dev lo ||
		fail "R's loopback addresses"
	for _c in "route add unreachable 10.98.0.0/24" "route add prohibit 10.97.0.0/24" \
		"route add blackhole 10.96.0.0/24" "-6 route add unreachable 2001:db8:98::/64" \
		"-6 route add prohibit 2001:db8:97::/64" "rule add fwmark 1 lookup 100" \
		"route add unreachable 10.77.0.2/32 table 100" \
		"route add 10.55.0.5/32 via 10.77.0.2 mtu lock 1000" \
		"-6 route add fd55::5/128 via fd77::2 mtu 1280"; do
		# shellcheck disable=SC2086 # a word list
		ipq -n "$nsS" $_c || fail "ip $_c"
	done
}

errno_test() {
	what=$1
	bin=${TESTS_DIR:?}/bypass-errno
	[ -x "$bin" ] || fail "$bin is not built"
	rig
	routes
	if [ "$what" = eperm ]; then
		if command -v nft >/dev/null 2>&1; then
			printf '%s\n' 'table ip bt { chain out { type filter hook output priority 0; ip daddr 10.77.0.2 udp dport 7 drop; }; }' |
				inns "$nsS" nft -f - || skip "nft cannot add the rule"
		elif command -v iptables >/dev/null 2>&1; then
			inns "$nsS" iptables -A OUTPUT -d 10.77.0.2 -p udp --dport 7 -j DROP ||
				skip "iptables cannot add the rule"
		else
			skip "neither nft nor iptables is installed"
		fi
	fi
	if [ "$what" = eperm ]; then
		# Frames would skip the rule: so the port takes no queue, says why, and every
		# datagram goes by the kernel's path, where the rule refuses it with EPERM. With
		# --xdp-skip-netfilter (the operator accepting it) the frames go and skip the rule.
		plain errno.plain "$bin" eperm
		[ "$rc" = 0 ] || { show "$tmp/errno.plain.out" "$tmp/errno.plain.err"; fail "bypass-errno eperm without the shim: exit $rc"; }
		grep -q 'eperm_firewall.*EPERM' "$tmp/errno.plain.out" ||
			{ show "$tmp/errno.plain.out"; fail "the rule did not refuse the kernel's datagram"; }
		inns "$nsS" "$run" --bypass $xopt --stats "$tmp/errno.bypass.json" -- "$bin" eperm \
			>"$tmp/errno.bypass.out" 2>"$tmp/errno.bypass.err"
		rc=$?
		show "$tmp/errno.bypass.out" "$tmp/errno.bypass.err"
		[ "$rc" = 0 ] || fail "bypass-errno eperm under --bypass: exit $rc"
		same "$tmp/errno.plain.out" "$tmp/errno.bypass.out" "bypass-errno eperm's output"
		grep -q 'kernel bypass on xs0 unavailable, sends go by the kernel.s path: netfilter filters output here (nftables chain ip bt out (output)); frames would skip it (multisend-run --xdp-skip-netfilter accepts that)' \
			"$tmp/errno.bypass.err" || fail "the shim did not say why it took no queue"
		[ "$(frames "$tmp/errno.bypass.json")" = 0 ] || fail "frames were sent past the rule"
		inns "$nsS" "$run" --bypass $xopt --xdp-skip-netfilter --stats "$tmp/errno.skip.json" \
			-- "$bin" eperm >"$tmp/errno.skip.out" 2>"$tmp/errno.skip.err"
		rc=$?
		show "$tmp/errno.skip.out" "$tmp/errno.skip.err"
		[ "$rc" = 0 ] || fail "bypass-errno eperm under --xdp-skip-netfilter: exit $rc"
		if grep -q 'kernel bypass.*unavailable' "$tmp/errno.skip.err"; then
			skip "the shim says AF_XDP is unavailable here"
		fi
		[ "$(frames "$tmp/errno.skip.json")" -ge 2 ] || fail "--xdp-skip-netfilter sent no frames"
		grep -q 'eperm_firewall.*EPERM' "$tmp/errno.skip.out" &&
			fail "--xdp-skip-netfilter: the frame did not skip the rule"
		grep 'eperm_other_port_ok' "$tmp/errno.plain.out" >"$tmp/other.plain"
		grep 'eperm_other_port_ok' "$tmp/errno.skip.out" >"$tmp/other.skip"
		same "$tmp/other.plain" "$tmp/other.skip" "eperm_other_port_ok"
		# Without CAP_NET_ADMIN the chains cannot be listed: no queue either, saying so.
		inns "$nsS" setpriv --bounding-set=-net_admin --inh-caps=-net_admin \
			"$run" --bypass $xopt --stats "$tmp/errno.nocap.json" -- "$bin" eperm \
			>"$tmp/errno.nocap.out" 2>"$tmp/errno.nocap.err"
		rc=$?
		show "$tmp/errno.nocap.out" "$tmp/errno.nocap.err"
		[ "$rc" = 0 ] || fail "bypass-errno eperm without CAP_NET_ADMIN: exit $rc"
		same "$tmp/errno.plain.out" "$tmp/errno.nocap.out" "bypass-errno eperm's output without CAP_NET_ADMIN"
		grep -q 'frames would skip netfilter, and its output rules here are unknown: cannot list nftables chains: Operation not permitted (needs CAP_NET_ADMIN) (multisend-run --xdp-skip-netfilter accepts that)' \
			"$tmp/errno.nocap.err" || fail "without CAP_NET_ADMIN the shim did not say why it took no queue"
		[ "$(frames "$tmp/errno.nocap.json")" = 0 ] || fail "frames were sent without knowing the rules"
		echo "PASS: bypass-errno eperm: no queue past netfilter's rule (EPERM as without the shim); frames skip it only with --xdp-skip-netfilter"
		return 0
	elif [ "$what" = efault ]; then
		# One process per case, each one's output and exit status.
		for w in plain bypass; do
			: >"$tmp/errno.$w.all"
			for k in 0 1 2 3 4 5; do
				"$w" "errno.$w" "$bin" efault "$k"
				cat "$tmp/errno.$w.out" "$tmp/errno.$w.err" >>"$tmp/errno.$w.all"
				echo "case $k: exit status $rc" >>"$tmp/errno.$w.all"
				[ "$w" = plain ] || cat "$tmp/errno.$w.json" >>"$tmp/errno.json"
			done
		done
		show "$tmp/errno.bypass.all"
		same "$tmp/errno.plain.all" "$tmp/errno.bypass.all" "bypass-errno efault's output"
		mv "$tmp/errno.json" "$tmp/errno.bypass.json"
	else
		plain errno.plain "$bin" "$what"
		[ "$rc" = 0 ] || { show "$tmp/errno.plain.out" "$tmp/errno.plain.err"; fail "bypass-errno $what without the shim: exit $rc"; }
		bypass errno.bypass "$bin" "$what"
		show "$tmp/errno.bypass.out" "$tmp/errno.bypass.err"
		same "$tmp/errno.plain.out" "$tmp/errno.bypass.out" "bypass-errno $what's output"
		[ "$rc" = 0 ] || fail "bypass-errno $what under --bypass: exit $rc"
	fi
	check_shape "$tmp/errno.bypass.json"
	case $what in
	all)
		# By the kernel's path where the spec says so (at least: a case may be counted
		# before the kernel refuses it). The ICMP errors of the connected sockets:
		# 2 x (5 + 2 + 3) sends returned ECONNREFUSED.
		check_stats "$tmp/errno.bypass.json" \
			"x['route'] >= 8" "x['local'] >= 2" "x['iface'] >= 1" "x['mtu'] >= 8" "x['error'] == 20" \
			"x['flags'] >= 3" "x['sockopt'] >= 7" "x['control'] >= 2" "x['not_udp'] >= 1" \
			"x['unavailable'] == 0" "x['other'] <= 6"
		# (other: what the kernel must judge: the v6 address on a v4 socket, AF_UNSPEC,
		# port 0, two short addresses, and the destination-less send at most.)
		# And the rest as frames: 2000 non-blocking, 14 + 18 connected, 9 unicast to the
		# peer (one after UDP_CORK is off again), 3 under a route's MTU, and maybe the
		# zero-length one, the v4-mapped one and the AF_UNSPEC one.
		check_stats "$tmp/errno.bypass.json" "2044 <= t['xdp_frames'] <= 2047" ;;
	efault)
		# The good send after each went as a frame.
		check_stats "$tmp/errno.bypass.json" "len(r) == 6" "tot('xdp_frames') == 6" ;;
	changes|changes-fast)
		# The sends that the route let through went as frames.
		check_stats "$tmp/errno.bypass.json" "tot('xdp_frames') > 0" ;;
	eperm)
		# Frames do not pass the sender's netfilter hooks: a rule there must send the
		# datagram by the kernel's path (the outputs above are the same).
		: ;;
	esac
	show_report "$tmp/errno.bypass.json"
	echo "PASS: bypass-errno $what: the same results under --bypass"
}

# ---- bad pointers ------------------------------------------------------------------------------

# tests/shim/efault.c peer: every send call with memory or lengths the kernel refuses, between
# good sends to the peer that go as frames: the same results (the kernel's errno, no signal)
# without the shim and under --bypass. Issue 26, item 9.
efault_test() {
	bin=${TESTS_DIR:?}/shim-efault
	[ -x "$bin" ] || fail "$bin is not built"
	rig
	plain ef.plain "$bin" peer 10.77.0.2
	echo "exit status $rc" >>"$tmp/ef.plain.out"
	[ "$rc" = 0 ] || { show "$tmp/ef.plain.out" "$tmp/ef.plain.err"; fail "efault without the shim: exit $rc"; }
	bypass ef.bypass "$bin" peer 10.77.0.2
	echo "exit status $rc" >>"$tmp/ef.bypass.out"
	show "$tmp/ef.bypass.err"
	same "$tmp/ef.plain.out" "$tmp/ef.bypass.out" "efault's results"
	check_shape "$tmp/ef.bypass.json"
	# The good fan-outs between the bad calls went as frames; the bad ones by the kernel's
	# path, which refused them.
	check_stats "$tmp/ef.bypass.json" "len(r) == 1" "t['xdp_frames'] > 50" "x['other'] > 20" \
		"t['errors'] > 20"
	show_report "$tmp/ef.bypass.json"
	# The shim checked the memory of the sends it framed with its touch (shim/fault.c), not
	# with process_vm_readv (main, before fault.c, made 178 such calls in this run).
	if command -v strace >/dev/null 2>&1 && [ -z "${VALGRIND:-}" ]; then
		inns "$nsS" strace -f -qq -o "$tmp/ef.strace" -e trace=process_vm_readv \
			"$run" --bypass $xopt -- "$bin" peer 10.77.0.2 >"$tmp/ef.st.out" 2>&1 ||
			{ show "$tmp/ef.st.out"; fail "efault under strace"; }
		_pv=$(grep -c 'process_vm_readv(' "$tmp/ef.strace") || true
		echo "  process_vm_readv calls under --bypass: $_pv"
		[ "$_pv" = 0 ] || fail "efault: $_pv process_vm_readv calls under --bypass (the touch was not used)"
	fi
	echo "PASS: bad pointers and lengths under --bypass: the kernel's answers, no signal"
}

# ---- the queue ---------------------------------------------------------------------------------

# queue local|peer: tests/shim/bypass-queue.c under --bypass, with S's default route out of xs0
# and no --xdp-iface (the shim picks xs0 itself, as a user's would): 200 datagrams to loopback
# leave the process holding no AF_XDP socket (no queue of xs0 taken), the report says "none"
# and every datagram went by the kernel's path (local); 200 to the peer take one, as frames.
queue_test() {
	bin=${TESTS_DIR:?}/bypass-queue
	[ -x "$bin" ] || fail "$bin is not built"
	rig
	ipq -n "$nsS" route add default via 10.77.0.2 || fail "default route"
	xopt=''
	case $1 in
	local)
		bypass q "$bin" 127.0.0.1 9 200
		show "$tmp/q.out" "$tmp/q.err"
		[ "$rc" = 0 ] || fail "bypass-queue: exit $rc"
		grep -qx 'sent 200, AF_XDP sockets 0' "$tmp/q.out" ||
			fail "loopback datagrams only, and the process holds an AF_XDP socket"
		check_stats "$tmp/q.json" "len(r) == 1" "r[0]['total']['xdp_queue'] == 'none'" \
			"t['xdp_iface'] == 'xs0'" "t['xdp_frames'] == 0" "x['local'] == 200" \
			"fball() == 200" ;;
	peer)
		bypass q "$bin" 10.77.0.2 9 200
		show "$tmp/q.out" "$tmp/q.err"
		[ "$rc" = 0 ] || fail "bypass-queue: exit $rc"
		grep -qx 'sent 200, AF_XDP sockets 1' "$tmp/q.out" ||
			fail "datagrams out of xs0, and the process holds no AF_XDP socket"
		check_stats "$tmp/q.json" "len(r) == 1" "r[0]['total']['xdp_queue'] == 'taken'" \
			"t['xdp_frames'] == 200" "fball() == 0" ;;
	*) fail "queue: local or peer" ;;
	esac
	show_report "$tmp/q.json"
	echo "PASS: --bypass takes a queue only for a datagram that leaves by its interface ($1)"
}

# ---- live counters ------------------------------------------------------------------------------

# bypass-errno all (a send for nearly every reason) under --stats-shm: once it has exited,
# multisend-stat's final "shim" slot carries the report's numbers, every xdp counter included.
live_test() {
	bin=${TESTS_DIR:?}/bypass-errno
	stat=${STAT_BIN:?}
	[ -x "$bin" ] && [ -x "$stat" ] || fail "$bin or $stat is not built"
	rig
	routes
	xopt="--xdp-iface xs0 --stats-shm $tmp/live-%p"
	bypass live "$bin" all
	[ "$rc" = 0 ] || { show "$tmp/live.out" "$tmp/live.err"; fail "bypass-errno: exit $rc"; }
	set -- "$tmp"/live-*
	[ $# = 1 ] && [ -s "$1" ] || fail "expected one live-counter file, found: $*"
	timeout 20 "$stat" --json --interval 100 "$1" >"$tmp/after" 2>"$tmp/after.err" ||
		{ show "$tmp/after.err"; fail "multisend-stat: exit $?"; }
	"$py" - "$tmp/after" "$tmp/live.json" <<'PY' || { show "$tmp/after" "$tmp/live.json"; fail "live counters"; }
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
z = [s for s in last["slots"] if s["name"] == "shim"][0]["counters"]
t = json.loads(open(sys.argv[2]).readline())["total"]
want = {"calls": t["calls"], "datagrams": t["datagrams"], "xdp_frames": t["xdp_frames"],
        "xdp_kicks": t["xdp_kicks"]}
want.update({"xdp_fallback_" + k: v for k, v in t["xdp_fallback"].items()})
bad = {k: (z.get(k), v) for k, v in want.items() if z.get(k) != v}
if bad:
    sys.exit("live counter != report: %s" % bad)
print("live counters = report: %s" % {k: v for k, v in want.items() if v})
PY
	echo "PASS: the live counters' xdp numbers are the report's"
}

# ---- sendmmsg ----------------------------------------------------------------------------------

sendmmsg_test() {
	fam=$1
	bin=${TESTS_DIR:?}/bypass-sendmmsg
	[ -x "$bin" ] || fail "$bin is not built"
	rig
	addr=10.77.0.2
	[ "$fam" = v6 ] && addr=fd77::2
	for w in plain bypass; do
		start_recv "$nsR" "recv.$w" dgram "$addr" 40000 2
		"$w" "mm.$w" "$bin" 40000 "$fam"
		[ "$rc" = 0 ] || { show "$tmp/mm.$w.out" "$tmp/mm.$w.err"; fail "bypass-sendmmsg ($w): exit $rc"; }
		end_recv "recv.$w"
	done
	show "$tmp/mm.bypass.out" "$tmp/recv.bypass" "$tmp/mm.bypass.err"
	same "$tmp/mm.plain.out" "$tmp/mm.bypass.out" "sendmmsg's return values and msg_len"
	same "$tmp/recv.plain" "$tmp/recv.bypass" "what R received"
	grep -q 'local receiver: 28 of 28 datagrams, in order, intact' "$tmp/mm.bypass.out" ||
		fail "the local receiver"
	grep -qx 'sock 0: 44 datagrams: 0-43' "$tmp/recv.bypass" &&
		grep -qx 'sock 1: 44 datagrams: 0-43' "$tmp/recv.bypass" || fail "R's receiver"
	check_shape "$tmp/mm.bypass.json"
	# Kicks: a call's frames go before a datagram of the same call that goes by the kernel's
	# path (in order), so a vector takes one kick per run of frames between such datagrams
	# (one for a vector of frames alone), never more; the 2 end markers one each. Counted
	# from the calls the program printed: "[OFF]=N" sent pattern[OFF:OFF+N].
	runs=$("$py" - "$tmp/mm.plain.out" <<'PY'
import re, sys
runs = 2
for l in open(sys.argv[1]):
    m = re.match(r".*\(([^)]*)\):(.*) lens", l)
    if not m:
        continue
    pat = m.group(1)
    for off, res in re.findall(r"\[(\d+)\]=(\S+)", m.group(2)):
        if res.isdigit():
            part = pat[int(off):int(off) + int(res)]
            runs += len([x for x in re.split(r"[^01]+", part) if x])
print(runs)
PY
)
	# 88 datagrams to the peer and its 2 end markers as frames; the loopback ones local;
	# the failures by the kernel's path.
	check_stats "$tmp/mm.bypass.json" "len(r) == 1" "t['xdp_frames'] == 90" \
		"x['local'] >= 28" "x['route'] >= 6" "x['mtu'] >= 1" \
		"0 < t['xdp_kicks'] <= $runs" "x['unavailable'] == 0 and x['other'] == 0"
	echo "kicks: at most $runs (runs of frames), $(frames_kicks "$tmp/mm.bypass.json")"
	show_report "$tmp/mm.bypass.json"
	echo "PASS: sendmmsg ($fam): the same return values, msg_len and deliveries under --bypass"
}

case ${1:-} in
legacy) legacy "$2" "$3" "$4" "$5" ;;
legacy-local) legacy v4 64 64 plain local ;;
legacy-mtu) legacy "$2" 64 1400 plain mtu ;;
legacy-neigh) legacy "$2" 64 64 plain neigh ;;
legacy-gateway) legacy "$2" 64 64 plain gateway ;;
legacy-default) legacy "$2" 64 64 plain default ;;
legacy-noiface) legacy v4 64 64 plain noiface ;;
foreign) foreign "$2" ;;
patterns) patterns "$2" ;;
errno) errno_test "$2" ;;
sendmmsg) sendmmsg_test "$2" ;;
multicast) multicast_test ;;
sigsend) sigsend_test ;;
live) live_test ;;
efault) efault_test ;;
queue) queue_test "$2" ;;
*) fail "usage: $0 efault|queue|legacy|legacy-local|legacy-mtu|legacy-neigh|legacy-gateway|legacy-default|legacy-noiface|foreign|patterns|errno|sendmmsg|multicast|sigsend|live ..." ;;
esac
