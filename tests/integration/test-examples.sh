#!/bin/sh
# SPDX-License-Identifier: MIT
# End-to-end runs of the examples on loopback (registered by examples/meson.build):
#
#   test-examples.sh md-pubsub PUBLISHER SUBSCRIBER BACKEND connected|unconnected
#       one publisher, three subscribers; each must get every tick exactly once.
#   test-examples.sh md-churn PUBLISHER SUBSCRIBER BACKEND connected|unconnected
#       as above, plus one subscriber joining mid-feed and one leaving mid-feed.
#   test-examples.sh md-tcp PUBLISHER SUBSCRIBER
#       md-publisher --tcp: two TCP subscribers and one UDP subscriber, every tick once each.
#   test-examples.sh md-behind PUBLISHER SUBSCRIBER
#       md-publisher asked for a rate no machine reaches: it says it is behind while it runs
#       (at most one line per 10 s) and counts the one-second windows in its summary.
#   test-examples.sh md-relay PUBLISHER RELAY SUBSCRIBER
#       publisher -> md-relay (UDP upstream) -> md-relay (TCP upstream), subscribers at every
#       level: every tick exactly once everywhere, the same sequence numbers end to end.
#   test-examples.sh md-mcast PUBLISHER SUBSCRIBER ipv4|ipv6
#       md-publisher --dest GROUP in a private namespace (root; ns_pair_up): three group
#       members on the publisher's host get every tick once with --mcast-loop 1, none with 0.
#   test-examples.sh fanout LEGACY RECEIVER SUBSCRIBERS MESSAGES RATE plain|ipv6|identical
#       legacy-fanout into fanout-receiver, every datagram checked byte for byte.
#   test-examples.sh md-xdp PUBLISHER SUBSCRIBER connected|unconnected
#       md-publisher --backend xdp in a private namespace, three md-subscribers in another
#       across a veth pair (tests/harness.sh ns_pair_up); each must get every tick once.
#
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh: Debian runs it with dash.
set -u

# `meson test --setup valgrind` wraps the test program, here the shell, in memcheck: that
# would check dash, not the examples. Re-exec the shell natively (memcheck does not follow
# exec by default) and put memcheck in front of md-publisher, the program using the library.
vg=''
if [ -n "${EXAMPLES_VALGRIND:-}" ]; then
	vg="valgrind --quiet --error-exitcode=99 --leak-check=full"
	vg="$vg --errors-for-leak-kinds=definite,indirect"
else
	case $(readlink /proc/$$/exe 2>/dev/null) in
	*/valgrind/*) EXAMPLES_VALGRIND=1 exec /bin/sh "$0" "$@" ;;
	esac
fi

. "$(dirname "$0")/../harness.sh"
harness_init test-examples

need_exe() {
	for _f in "$@"; do
		[ -x "$_f" ] || skip "$_f is not built"
	done
}

# --------------------------------------------------------------------------------------------
# md-publisher and md-subscriber

# publisher_port: wait for the publisher started as $pubpid to print its control port: $port.
publisher_port() {
	if ! wait_line "$tmp/publisher" '^control port [0-9]' "$pubpid" 10; then
		show "$tmp/publisher" "$tmp/publisher.err"
		fail "md-publisher did not start"
	fi
	port=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/publisher")
}

# wait_feed: wait for the publisher and every subscriber in $subs (pid:name ...), show what
# they printed; status=1 if one of them failed.
wait_feed() {
	status=0
	wait "$pubpid" || { echo "md-publisher exited with $?" >&2; status=1; }
	for s in $subs; do
		wait "${s%%:*}" || { echo "${s#*:} exited with $?" >&2; status=1; }
	done
	show "$tmp/publisher" "$tmp/publisher.err"
	for s in $subs; do
		show "$tmp/${s#*:}"
	done
}

md() {
	kind=$1 pub=$2 sub=$3 backend=$4 mode=$5
	need_exe "$pub" "$sub"
	case $mode in
	connected) copt=--connected ;;
	unconnected) copt='' ;;
	*) fail "unknown mode '$mode'" ;;
	esac
	# 3000 ticks at 10000/s: short, and at a rate no loopback socket drops at.
	count=3000 rate=10000 want=3
	if [ "$kind" = md-churn ]; then
		count=10000 rate=10000 want=2 # 1 s, so that the late joiners land mid-feed
	fi

	# --control 0: the kernel picks a free port and the publisher prints it, so parallel
	# tests never collide.
	# shellcheck disable=SC2086 # $vg and $copt are word lists, or nothing
	bg $vg "$pub" --control 0 --backend "$backend" $copt --subscribers "$want" \
		--count "$count" --rate "$rate" --size 100 >"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	publisher_port

	subs=
	for i in $(seq 1 "$want"); do
		bg "$sub" --control "127.0.0.1:$port" --timeout 60 --expect "$count" \
			>"$tmp/subscriber$i" 2>&1
		subs="$subs $bgpid:subscriber$i"
	done
	if [ "$kind" = md-churn ]; then
		# These two join a running feed.
		wait_line "$tmp/publisher.err" 'publishing to' "$pubpid" 30 ||
			fail "md-publisher did not start publishing"
		sleep 0.1
		bg "$sub" --control "127.0.0.1:$port" --timeout 60 >"$tmp/late-joiner" 2>&1
		subs="$subs $bgpid:late-joiner"
		bg "$sub" --control "127.0.0.1:$port" --timeout 60 --leave-after 500 \
			>"$tmp/leaver" 2>&1
		subs="$subs $bgpid:leaver"
	fi

	wait_feed

	summary=$(grep '^md-publisher:' "$tmp/publisher")
	used=$(echo "$summary" | sed -n 's/.*backend \([a-z_]*\),.*/\1/p')
	[ -n "$summary" ] || fail "md-publisher printed no summary"
	[ "$used" = "$backend" ] || echo "note: asked for $backend, the library chose '$used'"
	echo "$summary" | grep -q ", ticks $count," || { echo "not all ticks sent" >&2; status=1; }
	echo "$summary" | grep -q ", failures 0," || { echo "sends failed" >&2; status=1; }
	if [ "$kind" = md-churn ]; then
		echo "$summary" | grep -q "joined $((want + 2))," ||
			{ echo "the late joiners were not all added" >&2; status=1; }
		grep -q 'received [1-9][0-9]*, gaps 0 (missing 0), duplicates 0,' \
			"$tmp/late-joiner" || { echo "late joiner: bad feed" >&2; status=1; }
		grep -q 'received 500, gaps 0 (missing 0), duplicates 0,' "$tmp/leaver" ||
			{ echo "leaver: bad feed" >&2; status=1; }
	fi
	[ "$status" = 0 ] || fail "$kind $backend $mode"
	echo "PASS: $kind $backend $mode ($count ticks, backend $used)"
}

# md-publisher with the xdp backend (kernel bypass) to subscribers in another namespace
md_xdp() {
	pub=$1 sub=$2 mode=$3
	need_exe "$pub" "$sub"
	case $mode in
	connected) copt=--connected ;;
	unconnected) copt='' ;;
	*) fail "unknown mode '$mode'" ;;
	esac
	ns_pair_up
	count=3000 want=3
	# shellcheck disable=SC2086 # $vg and $copt are word lists, or nothing
	bg inns "$nsS" $vg "$pub" --bind 10.77.0.1 --control 0 --backend xdp --xdp-iface xs0 \
		$copt --subscribers "$want" --count "$count" --rate 10000 --size 100 \
		>"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	publisher_port
	subs=
	for i in $(seq 1 "$want"); do
		bg inns "$nsR" "$sub" --control "10.77.0.1:$port" --timeout 60 --expect "$count" \
			>"$tmp/subscriber$i" 2>&1
		subs="$subs $bgpid:subscriber$i"
	done
	wait_feed
	if grep -q 'falls back\|-ENOTSUP\|not supported' "$tmp/publisher.err"; then
		skip "the xdp backend is unavailable here"
	fi
	summary=$(grep '^md-publisher:' "$tmp/publisher")
	echo "$summary" | grep -q "backend xdp," || { echo "not the xdp backend" >&2; status=1; }
	echo "$summary" | grep -q ", ticks $count," || { echo "not all ticks sent" >&2; status=1; }
	echo "$summary" | grep -q ", failures 0," || { echo "sends failed" >&2; status=1; }
	[ "$status" = 0 ] || fail "md-xdp $mode"
	echo "PASS: md-xdp $mode ($count ticks to $want subscribers in another namespace)"
}

# md-publisher's TCP subscribers: ticks framed by their size field on the stream
md_tcp() {
	pub=$1 sub=$2
	need_exe "$pub" "$sub"
	count=3000
	# shellcheck disable=SC2086 # $vg is a word list, or nothing
	bg $vg "$pub" --control 0 --tcp 0 --subscribers 3 --count "$count" --rate 10000 \
		--size 100 >"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	publisher_port
	tport=$(sed -n 's/^tcp port \([0-9]*\)$/\1/p' "$tmp/publisher")
	[ -n "$tport" ] || fail "md-publisher printed no TCP port"
	bg "$sub" --tcp "127.0.0.1:$tport" --sockets 2 --timeout 60 --expect "$count" \
		>"$tmp/tcp" 2>&1
	subs="$bgpid:tcp"
	bg "$sub" --control "127.0.0.1:$port" --timeout 60 --expect "$count" >"$tmp/udp" 2>&1
	subs="$subs $bgpid:udp"
	wait_feed
	grep -q ", ticks $count, .*, failures 0," "$tmp/publisher" ||
		{ echo "publisher: not every tick sent without failure" >&2; status=1; }
	[ "$(grep -c "^tcp [01]: received $count, gaps 0 (missing 0), duplicates 0," "$tmp/tcp")" = 2 ] ||
		{ echo "TCP subscribers: not every tick once" >&2; status=1; }
	# (a loaded machine may fall behind --rate: said, and no fault of the feed's)
	[ -s "$tmp/publisher.err" ] &&
		! grep -v -e 'publishing to' -e '^md-publisher: behind --rate' "$tmp/publisher.err" |
		grep -q . ||
		{ echo "publisher: unexpected messages" >&2; status=1; }
	[ "$status" = 0 ] || fail "md-tcp"
	echo "PASS: md-tcp ($count ticks to 2 TCP and 1 UDP subscribers)"
}

# md-publisher behind its --rate: a rate no machine reaches (10^9 ticks/s) to one subscriber.
# It says so on stderr while it runs (waited for, however long the machine takes: no timing
# asserted), keeps publishing, and its summary counts the one-second windows it was behind.
md_behind() {
	pub=$1 sub=$2
	need_exe "$pub" "$sub"
	# shellcheck disable=SC2086 # $vg is a word list, or nothing
	bg $vg "$pub" --control 0 --subscribers 1 --count 1000000000000 --rate 1000000000 \
		--size 100 >"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	publisher_port
	bg "$sub" --control "127.0.0.1:$port" --timeout 300 >"$tmp/subscriber" 2>&1
	subpid=$bgpid
	wait_line "$tmp/publisher.err" '^md-publisher: behind --rate 1000000000: [0-9]* ticks/s in the last [0-9.]* s (1 second behind since the last warning)$' \
		"$pubpid" 120 || { show "$tmp/publisher.err"; fail "no 'behind' line"; }
	kill -TERM "$pubpid"
	wait "$pubpid"
	rc=$?
	[ "$rc" = 1 ] || { show "$tmp/publisher.err"; fail "md-publisher interrupted: exit $rc, not 1"; }
	show "$tmp/publisher" "$tmp/publisher.err"
	n=$(sed -n 's/.* (behind --rate in \([0-9]*\) one-second windows), .*/\1/p' "$tmp/publisher")
	[ -n "$n" ] && [ "$n" -ge 1 ] || fail "the summary does not count the windows behind"
	# One line per 10 s at most: the windows behind are counted, not each said.
	lines=$(grep -c '^md-publisher: behind --rate' "$tmp/publisher.err")
	[ "$lines" -le $((n / 10 + 1)) ] || fail "$lines 'behind' lines for $n windows"
	kill "$subpid" 2>/dev/null
	echo "PASS: md-behind ($n one-second windows behind --rate, $lines line(s) said)"
}

# relay_port FILE PID WHAT: the port md-relay (started as PID, stdout in FILE) printed for
# WHAT ("control" or "tcp").
relay_port() {
	wait_line "$1" "^$3 port [0-9]" "$2" 10 || { show "$1" "$1.err"; fail "$1 did not start"; }
	sed -n "s/^$3 port \\([0-9]*\\)\$/\\1/p" "$1"
}

# publisher -> relay A (UDP) -> relay B (TCP), subscribers at each level, on loopback
md_relay() {
	pub=$1 relay=$2 sub=$3
	need_exe "$pub" "$relay" "$sub"
	count=3000
	# Built leaves first: B waits for its 2 subscribers before connecting to A, A for its
	# 2 and B before joining the publisher, the publisher for A and its own subscriber.
	# shellcheck disable=SC2086 # $vg is a word list, or nothing
	bg $vg "$pub" --control 0 --subscribers 2 --count "$count" --rate 10000 --size 100 \
		>"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	publisher_port
	# shellcheck disable=SC2086
	bg $vg "$relay" --upstream "127.0.0.1:$port" --control 0 --tcp 0 --subscribers 3 \
		>"$tmp/relay-a" 2>"$tmp/relay-a.err"
	rapid=$bgpid
	actl=$(relay_port "$tmp/relay-a" "$rapid" control)
	atcp=$(relay_port "$tmp/relay-a" "$rapid" tcp)
	# shellcheck disable=SC2086
	bg $vg "$relay" --upstream-tcp "127.0.0.1:$atcp" --control 0 --subscribers 2 \
		>"$tmp/relay-b" 2>"$tmp/relay-b.err"
	rbpid=$bgpid
	bctl=$(relay_port "$tmp/relay-b" "$rbpid" control)
	subs=
	for t in "pub:$port:1" "a:$actl:2" "b:$bctl:2"; do
		n=${t##*:}
		p=${t#*:}
		p=${p%:*}
		bg "$sub" --control "127.0.0.1:$p" --sockets "$n" --timeout 60 --expect "$count" \
			>"$tmp/sub-${t%%:*}" 2>&1
		subs="$subs $bgpid:sub-${t%%:*}"
	done
	wait_feed
	for r in "$rapid:relay-a" "$rbpid:relay-b"; do
		wait "${r%%:*}" || { echo "${r#*:} exited with $?" >&2; status=1; }
		show "$tmp/${r#*:}" "$tmp/${r#*:}.err"
		grep -q "ticks forwarded $count (seq 1\.\.$count), upstream gaps 0 (missing 0), stale 0, invalid 0, .*, end yes, .*, failures 0," \
			"$tmp/${r#*:}" || { echo "${r#*:}: not every tick forwarded once" >&2; status=1; }
	done
	grep -q ", ticks $count, .*, failures 0," "$tmp/publisher" ||
		{ echo "publisher: not every tick sent without failure" >&2; status=1; }
	[ "$status" = 0 ] || fail "md-relay"
	echo "PASS: md-relay ($count ticks, publisher -> relay (UDP) -> relay (TCP), 5 subscribers)"
}

# md-publisher --dest GROUP: multicast, with the caller's socket options
md_mcast() {
	pub=$1 sub=$2 fam=$3
	need_exe "$pub" "$sub"
	case $fam in
	ipv4) group=239.77.0.1:7000 ;;
	ipv6) group='[ff15::77]:7000' ;;
	*) fail "unknown family '$fam'" ;;
	esac
	# Publisher and members in S, on xs0: what leaves xs0 reaches R, where nobody is in the
	# group, so a member in S gets a copy only by the loopback that IP_MULTICAST_LOOP /
	# IPV6_MULTICAST_LOOP asks for.
	ns_pair_up
	count=2000
	for loop in 1 0; do
		# Members first: they are in the group before the first tick. With loop 0, one
		# more in R, across the veth: it gets the feed by the wire, which shows that the
		# ticks and END did go out.
		# Not by inns (a shell function, so a subshell): $bgpid must be the program,
		# which gets a SIGTERM below.
		bg env -u LD_PRELOAD ip netns exec "$nsS" "$sub" --group "$group" --iface xs0 \
			--sockets 3 --expect "$count" --timeout 60 >"$tmp/members-$loop" 2>&1
		mpid=$bgpid
		wait_line "$tmp/members-$loop" '^joined 3$' "$mpid" 10 ||
			{ show "$tmp/members-$loop"; fail "members did not join the group"; }
		if [ "$loop" = 0 ]; then
			bg inns "$nsR" "$sub" --group "$group" --iface xr0 --expect "$count" \
				--timeout 60 >"$tmp/remote" 2>&1
			rpid=$bgpid
			wait_line "$tmp/remote" '^joined 1$' "$rpid" 10 ||
				{ show "$tmp/remote"; fail "the member in R did not join"; }
		fi
		# shellcheck disable=SC2086 # $vg is a word list, or nothing
		inns "$nsS" $vg "$pub" --control 0 --dest "$group" --mcast-if xs0 --mcast-ttl 1 \
			--mcast-loop "$loop" --count "$count" --rate 20000 --size 100 \
			>"$tmp/publisher-$loop" 2>&1 || { show "$tmp/publisher-$loop"; fail "publisher"; }
		if [ "$loop" = 0 ]; then
			wait "$rpid" || { show "$tmp/remote"; fail "the member in R missed ticks"; }
			# A looped copy is queued on the member's socket inside the sender's send
			# call, so by now every one there could be is there: the members count what
			# is queued and stop.
			kill -TERM "$mpid"
		fi
		wait "$mpid"
		mrc=$?
		show "$tmp/publisher-$loop" "$tmp/members-$loop"
		grep -q ", ticks $count, destinations accepted $count, failures 0," \
			"$tmp/publisher-$loop" || fail "publisher: not one destination per tick"
		if [ "$loop" = 1 ]; then
			[ "$mrc" = 0 ] && [ "$(grep -c "^member [0-2]: received $count, gaps 0 (missing 0), duplicates 0, last seq $count, reordered 0," "$tmp/members-$loop")" = 3 ] ||
				fail "--mcast-loop 1: not every tick once at each member"
		else
			show "$tmp/remote"
			[ "$mrc" != 0 ] && [ "$(grep -c "^member [0-2]: received 0," "$tmp/members-$loop")" = 3 ] ||
				fail "--mcast-loop 0: a member on the sending host got ticks"
		fi
	done
	echo "PASS: md-mcast $fam ($count ticks to one group destination, 3 members by loopback;" \
		"none without it)"
}

# --------------------------------------------------------------------------------------------
# legacy-fanout and fanout-receiver

fanout() {
	legacy=$1 recv=$2 n=$3 m=$4 rate=$5 variant=$6
	need_exe "$legacy" "$recv"
	host=127.0.0.1 lopt='' ropt='' size=64
	case $variant in
	plain) ;;
	ipv6) host='[::1]' lopt=--ipv6 ;;
	identical) lopt=--identical ropt=--identical ;;
	*) fail "unknown variant '$variant'" ;;
	esac
	[ "$n" -eq 1 ] && size=1400 # one subscriber: check a full-size datagram instead
	if command -v readelf >/dev/null &&
		readelf -d "$legacy" | grep -q 'NEEDED.*libmultisend'; then
		fail "legacy-fanout links libmultisend; it must stay a plain sendto loop"
	fi

	# The receiver needs n consecutive free ports: random ones below the ephemeral range
	# (32768 and up by default), where no kernel-chosen port can take them, and more tries
	# when parallel tests hold some of them.
	tries=0
	while :; do
		tries=$((tries + 1))
		r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
		base=$((10000 + (r + $$) % (22000 - n)))
		bg "$recv" --listen "$host:$base" --subscribers "$n" --messages "$m" \
			--size "$size" --idle-timeout 10 $ropt \
			>"$tmp/receiver" 2>"$tmp/receiver.err"
		recvpid=$bgpid
		wait_line "$tmp/receiver" '^ready$' "$recvpid" 10 && break
		wait "$recvpid"
		rc=$?
		show "$tmp/receiver.err"
		case $rc in
		3) [ "$tries" -lt 20 ] && continue ;;
		4) skip "not enough file descriptors for $n sockets" ;;
		5) skip "no $host on this machine" ;;
		esac
		fail "fanout-receiver did not start (exit $rc)"
	done

	status=0
	"$legacy" --dest "$host:$base" --subscribers "$n" --messages "$m" --rate "$rate" \
		--size "$size" $lopt >"$tmp/legacy" 2>&1 ||
		{ echo "legacy-fanout exited with $?" >&2; status=1; }
	wait "$recvpid" || { echo "fanout-receiver exited with $?" >&2; status=1; }
	show "$tmp/legacy" "$tmp/receiver" "$tmp/receiver.err"
	grep -q ', errors 0,' "$tmp/legacy" || { echo "sendto failed" >&2; status=1; }
	[ "$status" = 0 ] || fail "fanout $n subscribers x $m messages ($variant)"
	echo "PASS: fanout $n subscribers x $m messages of $size bytes ($variant)"
}

case ${1:-} in
md-pubsub | md-churn) [ $# -eq 5 ] || fail "usage: $0 $1 PUBLISHER SUBSCRIBER BACKEND MODE"
	md "$@" ;;
fanout) [ $# -eq 7 ] || fail "usage: $0 fanout LEGACY RECEIVER N M RATE VARIANT"
	shift
	fanout "$@" ;;
md-xdp) [ $# -eq 4 ] || fail "usage: $0 md-xdp PUBLISHER SUBSCRIBER MODE"
	shift
	md_xdp "$@" ;;
md-behind) [ $# -eq 3 ] || fail "usage: $0 md-behind PUBLISHER SUBSCRIBER"
	shift
	md_behind "$@" ;;
md-tcp) [ $# -eq 3 ] || fail "usage: $0 md-tcp PUBLISHER SUBSCRIBER"
	shift
	md_tcp "$@" ;;
md-relay) [ $# -eq 4 ] || fail "usage: $0 md-relay PUBLISHER RELAY SUBSCRIBER"
	shift
	md_relay "$@" ;;
md-mcast) [ $# -eq 4 ] || fail "usage: $0 md-mcast PUBLISHER SUBSCRIBER ipv4|ipv6"
	shift
	md_mcast "$@" ;;
*) fail "usage: $0 md-pubsub|md-churn|md-xdp|md-tcp|md-behind|md-relay|md-mcast|fanout ..." ;;
esac
