#!/bin/sh
# SPDX-License-Identifier: MIT
# md-publisher, md-relay and md-subscriber against hostile peers of the control protocol
# (md-proto.h; docs/relay.md "Who may subscribe, and what is trusted"). Registered by
# examples/meson.build:
#
#   serve-test.sh reflect PUBLISHER RELAY SUBSCRIBER       (root: a namespace, raw sockets)
#       spoofed JOIN2, JOIN and LEAVE2 in a victim's and a real subscriber's name: the victim
#       gets at most one CHALLENGE2 per request, each smaller than it, never a tick; the real
#       subscriber keeps every tick.
#   serve-test.sh flood PUBLISHER RELAY SUBSCRIBER
#       unproven JOIN2 and old JOIN from 256 loopback sources for the whole feed: the proven
#       subscriber gets every tick, the flood's sources never one, and the publisher counted
#       the flood and added nobody.
#   serve-test.sh lease PUBLISHER RELAY SUBSCRIBER
#       a subscriber that proves itself once and never renews stops getting ticks after
#       --lease, and the publisher counts it expired.
#   serve-test.sh caps PUBLISHER RELAY SUBSCRIBER
#       --max-per-source 2 and three subscriptions from one address, then --max-subscribers 1
#       and two: the ones over the cap are never acknowledged, and counted as refused.
#   serve-test.sh forged PUBLISHER RELAY SUBSCRIBER        (root: a namespace, raw sockets)
#       mid-feed, a tick with seq 2^62 and an END to every port, from an ordinary socket and
#       then spoofed from the publisher's control port, and the tick alone spoofed from its
#       data port: the relay forwards every real tick and only the real END, reports the
#       implausible jump and never adopts it, and its subscriber and the publisher's get
#       every tick.
#   serve-test.sh pingpong PUBLISHER RELAY SUBSCRIBER      (root: a namespace, raw sockets)
#       one spoofed datagram of each kind between two publishers' and a relay's control ports:
#       a bounded number of datagrams follows (the namespace's Udp InDatagrams), not a loop.
#
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh (dash).
set -u

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../harness.sh"
harness_init serve-test

[ $# -eq 4 ] ||
	fail "usage: $0 reflect|flood|lease|caps|forged|pingpong PUBLISHER RELAY SUBSCRIBER"
what=$1 pub=$2 relay=$3 sub=$4
for _f in "$pub" "$relay" "$sub"; do
	[ -x "$_f" ] || skip "$_f is not built"
done
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
ctl() { python3 "$here/ctl.py" "$@"; }

# in_namespace: run this test again inside a network namespace of its own (lo up), so that
# spoofed datagrams and port sweeps reach only the test's own programs; deleted at exit.
in_namespace() {
	[ -n "${SERVE_TEST_NS:-}" ] && return 0
	[ "$(id -u)" = 0 ] || skip "needs root (a network namespace, raw sockets)"
	command -v ip >/dev/null 2>&1 || skip "ip is not installed (iproute2)"
	ns=msctl-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
	trap 'ipq netns del "$ns" 2>/dev/null; harness_cleanup' EXIT
	ipq netns add "$ns" || skip "cannot make network namespaces"
	ipq -n "$ns" link set lo up || fail "lo up in $ns"
	SERVE_TEST_NS=$ns inns "$ns" sh "$0" "$@"
	exit $?
}

# start_pub NAME ARGS...: md-publisher on any port, its output in $tmp/NAME{,.err}, its pid
# in $pubpid and control port in $port.
start_pub() {
	_n=$1
	shift
	bg "$pub" --control 0 "$@" >"$tmp/$_n" 2>"$tmp/$_n.err"
	pubpid=$bgpid
	wait_line "$tmp/$_n" '^control port [0-9]' "$pubpid" 20 ||
		{ show "$tmp/$_n" "$tmp/$_n.err"; fail "$_n did not start"; }
	port=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/$_n")
}

# counter FILE NAME: the number after "NAME " in FILE's summary line.
counter() { sed -n "s/.*[ ,]$2 \([0-9]*\).*/\1/p" "$1" | tail -n 1; }

# stop PID: SIGTERM and wait (a server prints its summary and exits).
stop() {
	kill -TERM "$1" 2>/dev/null
	wait "$1"
}

case $what in
reflect)
	in_namespace "$@"
	# A long feed: it ends by SIGTERM once the checks are done.
	start_pub pub --count 100000000 --rate 500
	bg "$sub" --control "127.0.0.1:$port" --timeout 60 >"$tmp/sub" 2>&1
	subpid=$bgpid
	wait_line "$tmp/sub" '^joined 1' "$subpid" 30 || fail "the subscriber did not join"
	bg ctl victim "$tmp/vport" "$tmp/stop-victim" 60 >"$tmp/victim" 2>&1
	vpid=$bgpid
	wait_line "$tmp/vport" '^[0-9]' "$vpid" 10 || fail "the victim did not start"
	vport=$(cat "$tmp/vport")
	# In the victim's name: JOIN2 and LEAVE2 without a cookie and with a wrong one (four
	# requests of 64 bytes), and the first protocol's JOIN (4 bytes).
	set --
	for t in JOIN2 "JOIN2 0123456789abcdef" LEAVE2 "LEAVE2 0123456789abcdef" "raw:JOIN"; do
		set -- "$@" "$vport:$port:$t"
	done
	sent=$((4 * 64 + 4)) nreq=4
	# LEAVE2 without a valid cookie, and the first protocol's LEAVE, in the name of every
	# UDP socket in the namespace, the real subscriber's among them: nobody may be cut off.
	for p in $(ss -Hun -a | awk '{print $4}' | sed 's/.*://' | grep -vx -e "$port" -e "$vport"); do
		for t in LEAVE2 "LEAVE2 0123456789abcdef" "raw:LEAVE"; do
			set -- "$@" "$p:$port:$t"
		done
	done
	ctl spoof "$@" || fail "raw socket"
	# A new subscriber still gets in after the spoofed requests. Its JOIN2 queues behind
	# them, so once it has a tick the publisher has answered them all.
	bg "$sub" --control "127.0.0.1:$port" --timeout 30 --progress 1 --leave-after 1 \
		>"$tmp/probe" 2>&1
	probepid=$bgpid
	wait "$probepid" || { show "$tmp/probe"; fail "probe subscriber"; }
	: >"$tmp/stop-victim"
	wait "$vpid" || fail "the victim failed"
	stop "$pubpid" # END goes out: the subscriber ends by itself
	wait "$subpid" || echo "md-subscriber exited with $?" >&2
	show "$tmp/victim" "$tmp/pub" "$tmp/pub.err" "$tmp/sub"
	status=0
	read -r _ vn _ vbytes _ vticks _ vchal <"$tmp/victim"
	[ "$vticks" = 0 ] || { echo "the victim got $vticks ticks" >&2; status=1; }
	[ "$vbytes" -le "$sent" ] ||
		{ echo "the victim got $vbytes bytes for $sent sent in its name" >&2; status=1; }
	[ "$vn" -le "$nreq" ] && [ "$vchal" = "$vn" ] ||
		{ echo "the victim got $vn datagrams ($vchal challenges) for $nreq requests" >&2; status=1; }
	[ "$vchal" -ge 1 ] || { echo "no CHALLENGE2 at all" >&2; status=1; }
	# The probe joined and left; the real subscriber was in to the last tick.
	ticks=$(counter "$tmp/pub" ticks)
	grep -q '^md-publisher: .*subscribers 1 (joined 2, ' "$tmp/pub" ||
		{ echo "publisher: a spoofed request added or removed a subscriber" >&2; status=1; }
	grep -q "subscriber 0: received [1-9][0-9]*, gaps 0 (missing 0), duplicates 0, last seq $ticks," \
		"$tmp/sub" || { echo "the real subscriber lost ticks" >&2; status=1; }
	[ "$status" = 0 ] || fail "reflection"
	echo "PASS: reflect: $vn answers, $vbytes bytes for $sent bytes of spoofed requests, no tick"
	;;

flood)
	# 6000 ticks at 2000/s: 3 s of feed, most of it under the flood.
	count=6000
	# The subscriber proves itself first (the feed starts then); the flood runs through the
	# rest of the feed.
	start_pub pub --count "$count" --rate 2000 --subscribers 1 --join-timeout 30
	bg "$sub" --control "127.0.0.1:$port" --timeout 60 --expect "$count" >"$tmp/sub" 2>&1
	subpid=$bgpid
	wait_line "$tmp/sub" '^joined 1' "$subpid" 30 || fail "the subscriber did not join"
	bg ctl flood "$port" 60 "$tmp/stop-flood" >"$tmp/flood" 2>&1
	floodpid=$bgpid
	status=0
	wait "$pubpid" || { echo "md-publisher exited with $?" >&2; status=1; }
	wait "$subpid" || { echo "md-subscriber exited with $?" >&2; status=1; }
	: >"$tmp/stop-flood"
	wait "$floodpid" || { echo "the flood failed" >&2; status=1; }
	show "$tmp/pub" "$tmp/pub.err" "$tmp/sub" "$tmp/flood"
	read -r _ fsent _ frecv _ fticks _ fbytes <"$tmp/flood"
	unknown=$(counter "$tmp/pub" unknown)
	challenged=$(counter "$tmp/pub" challenged)
	limited=$(counter "$tmp/pub" rate-limited)
	seen=$((${unknown:-0} + ${challenged:-0} + ${limited:-0}))
	# The flood really ran: the publisher read at least a thousand of its datagrams.
	[ "$seen" -ge 1000 ] ||
		{ echo "the publisher saw $seen flood datagrams of $fsent sent" >&2; status=1; }
	[ "$fticks" = 0 ] || { echo "the flood's sources got $fticks ticks" >&2; status=1; }
	grep -q "^md-publisher: .*subscribers 1 (joined 1, .*, ticks $count, .*, failures 0," \
		"$tmp/pub" || { echo "publisher: not exactly one subscriber, every tick" >&2; status=1; }
	grep -q "received $count, gaps 0 (missing 0), duplicates 0," "$tmp/sub" ||
		{ echo "the proven subscriber lost ticks under the flood" >&2; status=1; }
	[ "$status" = 0 ] || fail "flood"
	echo "PASS: flood: $fsent datagrams sent, $seen read by the publisher, every tick to the proven subscriber, none to the flood ($frecv answers, $fbytes bytes)"
	;;

lease)
	start_pub pub --count 100000000 --rate 1000 --lease 500
	ctl lease "$port" 20 >"$tmp/lease" 2>&1
	status=$?
	stop "$pubpid"
	show "$tmp/lease" "$tmp/pub" "$tmp/pub.err"
	expired=$(counter "$tmp/pub" expired)
	grep -q '^acked yes lease_ms 500 ticks [1-9][0-9]* stopped yes$' "$tmp/lease" ||
		{ echo "the ticks did not stop after the lease" >&2; status=1; }
	[ "${expired:-0}" = 1 ] || { echo "publisher: expired ${expired:-none}, want 1" >&2; status=1; }
	[ "$status" = 0 ] || fail "lease"
	echo "PASS: lease: an unrenewed subscription expired and its ticks stopped"
	;;

caps)
	status=0
	for c in "--max-per-source 2:3:2" "--max-subscribers 1:2:1"; do
		opt=${c%%:*} k=${c#*:} k=${k%%:*} want=${c##*:}
		# shellcheck disable=SC2086 # an option and its value
		start_pub pub --count 100000000 --rate 200 $opt
		# Every subscription the cap admits gets a tick; the others wait for an ACK2
		# that never comes, until the timeout (exit 1).
		"$sub" --control "127.0.0.1:$port" --sockets "$k" --timeout 5 --leave-after 1 \
			>"$tmp/sub" 2>&1
		stop "$pubpid"
		show "$tmp/pub" "$tmp/sub"
		got=$(grep -c 'received 1, gaps 0' "$tmp/sub")
		never=$(grep -c ', id -1, ' "$tmp/sub")
		refused=$(counter "$tmp/pub" refused)
		[ "$got" = "$want" ] && [ "$never" = $((k - want)) ] ||
			{ echo "$opt: $got of $k subscriptions in, $never never acknowledged" >&2; status=1; }
		[ "${refused:-0}" -ge 1 ] ||
			{ echo "$opt: refused ${refused:-none}" >&2; status=1; }
		grep -q "^md-publisher: .*(joined $want, " "$tmp/pub" ||
			{ echo "$opt: publisher did not join exactly $want" >&2; status=1; }
	done
	[ "$status" = 0 ] || fail "caps"
	echo "PASS: caps: per source and in total, the subscriptions over the cap refused"
	;;

forged)
	in_namespace "$@"
	# The feed runs until the sweeps are done; then SIGTERM, and the publisher's real END.
	start_pub pub --count 100000000 --rate 1000 --subscribers 2 --join-timeout 30
	bg "$relay" --upstream "127.0.0.1:$port" --control 0 --subscribers 1 --join-timeout 30 \
		>"$tmp/relay" 2>"$tmp/relay.err"
	relaypid=$bgpid
	wait_line "$tmp/relay" '^control port [0-9]' "$relaypid" 20 || fail "md-relay did not start"
	rport=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/relay")
	bg "$sub" --control "127.0.0.1:$rport" --timeout 120 --expect-end --progress 500 \
		>"$tmp/sub-relay" 2>&1
	s1=$bgpid
	bg "$sub" --control "127.0.0.1:$port" --timeout 120 --expect-end >"$tmp/sub-pub" 2>&1
	s2=$bgpid
	wait_line "$tmp/sub-relay" 'reached 500' "$s1" 60 || fail "the feed did not start"
	# seq 2^62 and END, to every port: from another port of the same host, then with the
	# upstream's own control address as the source.
	ctl sweep "$port" 4611686018427387904 >"$tmp/sweep" 2>&1 || fail "sweep"
	ctl sweep "$port" 4611686018427387904 "$port" >>"$tmp/sweep" 2>&1 || fail "raw sweep"
	# And a tick (no END: that one would be the upstream's own) from the publisher's data
	# port, which passes the source check: the sequence number must not be adopted.
	dport=$(ss -Hunp -a | grep "pid=$pubpid," | awk '{print $4}' | sed 's/.*://' |
		grep -vx "$port" | head -n 1)
	[ -n "$dport" ] || fail "no data socket of the publisher in ss"
	ctl sweep "$port" 4611686018427387904 "$dport" tick >>"$tmp/sweep" 2>&1 || fail "raw sweep"
	status=0
	kill -0 "$relaypid" 2>/dev/null || { echo "the relay exited during the sweep" >&2; status=1; }
	stop "$pubpid" || [ $? = 1 ] || { echo "md-publisher failed" >&2; status=1; }
	for p in "$relaypid:relay" "$s1:sub-relay" "$s2:sub-pub"; do
		wait "${p%%:*}" || { echo "${p#*:} exited with $?" >&2; status=1; }
	done
	count=$(counter "$tmp/pub" ticks)
	show "$tmp/sweep" "$tmp/pub" "$tmp/relay" "$tmp/relay.err" "$tmp/sub-relay" "$tmp/sub-pub"
	grep -q "ticks forwarded $count (seq 1\.\.$count), upstream gaps 0 (missing 0), stale 0, invalid 0, .*, end yes, .*, failures 0, .*implausible 1, foreign [1-9]" \
		"$tmp/relay" || { echo "relay: not every real tick forwarded, or no forgery seen" >&2; status=1; }
	for f in sub-relay sub-pub; do
		grep -q "received $count, gaps 0 (missing 0), duplicates 0, last seq $count, reordered 0, invalid 0, .*implausible [01], foreign [1-9]" \
			"$tmp/$f" || { echo "$f: not every tick, or no forgery seen" >&2; status=1; }
	done
	[ "$status" = 0 ] || fail "forged ticks and END"
	echo "PASS: forged: $(tr '\n' ' ' <"$tmp/sweep")ignored; every real tick and the real END delivered"
	;;

pingpong)
	in_namespace "$@"
	start_pub a --count 100000000 --rate 10
	apid=$pubpid aport=$port
	start_pub b --count 100000000 --rate 10
	bpid=$pubpid bport=$port
	bg "$relay" --upstream "127.0.0.1:$aport" --control 0 >"$tmp/r" 2>"$tmp/r.err"
	rpid=$bgpid
	wait_line "$tmp/r" '^control port [0-9]' "$rpid" 20 || fail "md-relay did not start"
	rport=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/r")
	wait_line "$tmp/r.err" 'upstream ACK' "$rpid" 20 || fail "md-relay did not subscribe"
	# One datagram of each kind, each spoofed from one server's control port to another's:
	# the old "ERR" loop, an unproven JOIN2 and LEAVE2 (their CHALLENGE2 goes to the other
	# server), answers, and old JOIN. Then a window in which a loop would carry thousands of
	# datagrams; without one, at most an answer per spoofed datagram arrives, beside the
	# ticks to the relay (10/s) and its lease.
	set --
	for pair in "$aport:$bport" "$bport:$rport" "$rport:$aport"; do
		for t in "raw:ERR unknown command" JOIN2 LEAVE2 "raw:CHALLENGE2 0123456789abcdef" \
			"raw:ACK2 1 2 3 0123456789abcdef" "raw:JOIN"; do
			set -- "$@" "$pair:$t"
		done
	done
	n=$#
	delta=$(ctl spoof -w 2 "$@" | sed -n 's/^received //p')
	[ -n "$delta" ] || fail "raw socket"
	stop "$rpid"
	stop "$apid"
	stop "$bpid"
	show "$tmp/a" "$tmp/a.err" "$tmp/b" "$tmp/b.err" "$tmp/r" "$tmp/r.err"
	status=0
	[ "$delta" -le $((2 * n + 200)) ] ||
		{ echo "$delta datagrams after $n spoofed ones: a loop" >&2; status=1; }
	for f in a b r; do
		u=$(counter "$tmp/$f" unknown)
		[ "${u:-0}" -ge 1 ] && [ "${u:-0}" -le "$n" ] ||
			{ echo "$f: unknown ${u:-none}, want 1..$n" >&2; status=1; }
	done
	[ "$status" = 0 ] || fail "ping-pong"
	echo "PASS: pingpong: $n spoofed datagrams, $delta datagrams in all in the namespace"
	;;
*)
	fail "unknown test '$what'"
	;;
esac
