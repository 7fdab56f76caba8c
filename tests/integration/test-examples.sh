#!/bin/sh
# SPDX-License-Identifier: MIT
# End-to-end runs of the examples on loopback (registered by examples/meson.build):
#
#   test-examples.sh md-pubsub PUBLISHER SUBSCRIBER BACKEND connected|unconnected
#       one publisher, three subscribers; each must get every tick exactly once.
#   test-examples.sh md-churn PUBLISHER SUBSCRIBER BACKEND connected|unconnected
#       as above, plus one subscriber joining mid-feed and one leaving mid-feed.
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
*) fail "usage: $0 md-pubsub|md-churn|md-xdp|fanout ..." ;;
esac
