#!/bin/sh
# SPDX-License-Identifier: MIT
# A fan-out tree across private network namespaces joined by a bridge (registered by
# examples/meson.build, suite 'topology'; root, skipped otherwise):
#
#   topology.sh PUBLISHER RELAY SUBSCRIBER
#
#   pub (10.78.0.1) md-publisher, UDP control, connected sockets; its group also holds two
#                   multicast destinations: 239.78.0.1 (IPv4) and ff15::78 (IPv6)
#   ra  (10.78.0.2) md-relay A: upstream UDP to pub, serves UDP and TCP
#   rb  (10.78.0.3) md-relay B: upstream TCP to A (a two-hop chain)
#   s1, s2          50 subscriber sockets each, by UDP to A; 5 IPv4 group members each
#   s3              50 subscriber sockets by UDP to B; 5 IPv6 group members
#
# Every namespace has one veth into bridge br0 (namespace br, multicast snooping off, so the
# group reaches every port as a segment without a querier would). The tree is built before the
# first tick: B waits for its 50 subscribers before connecting to A, A for its 100 and B
# before joining pub, pub for A. Then relay A is killed (SIGKILL) mid-feed and restarted:
# its subscribers find it again by their JOIN2 lease and B reconnects; the test goes on once
# every subscriber has reported its gap, that is once ticks flow again everywhere. Then the
# same for relay B (its upstream is TCP), and the feed is stopped (SIGTERM to the publisher,
# which sends END). Checked:
#   - every subscriber socket: each tick 1..END once, in order, or inside a gap it reported;
#     behind A exactly one gap, ending at or after the restarted A's first tick - 1;
#   - behind B exactly two: first exactly the upstream gap B reported (B forwards all it gets:
#     nothing else may be missing), then one that spans B's restart;
#   - the restarted relays forward every tick from their first to END once (no upstream gap,
#     nothing stale), and A's policy removed the killed B's stream;
#   - every multicast member (10 IPv4, 5 IPv6): every tick 1..END exactly once, in order;
#   - publisher and relays agree on END's sequence number, and the relays saw END.
# Waits are bounded conditions (a line in a file), never a fixed delay before an assertion.
set -u

. "$(dirname "$0")/../harness.sh"
harness_init topology

pub=$1 relay=$2 sub=$3
for f in "$pub" "$relay" "$sub"; do
	[ -x "$f" ] || skip "$f is not built"
done
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null 2>&1 || skip "ip is not installed (iproute2)"

ipq() { env -u LD_PRELOAD ip "$@"; }
# Only under bg: exec, so that $bgpid is the program itself (ip netns exec and env exec too),
# which the test kills.
inns() {
	_ns=$1
	shift
	exec env -u LD_PRELOAD ip netns exec "$_ns" env ${LD_PRELOAD:+LD_PRELOAD="$LD_PRELOAD"} \
		"$@"
}

r=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
nodes="pub ra rb s1 s2 s3"
allns="br $nodes"
ns() { echo "ms18-$r-$1"; }
cleanup() {
	for _p in $pids; do
		kill -KILL "$_p" 2>/dev/null
	done
	for _n in $allns; do
		ipq netns del "$(ns "$_n")" 2>/dev/null
	done
	harness_cleanup
}
trap cleanup EXIT

for n in $allns; do
	ipq netns add "$(ns "$n")" || skip "cannot make network namespaces"
	ipq -n "$(ns "$n")" link set lo up || fail "lo up in $n"
done
B=$(ns br)
ipq -n "$B" link add br0 type bridge mcast_snooping 0 || skip "no bridge device"
ipq -n "$B" link set br0 up || fail "br0 up"
i=0
for n in $nodes; do
	case $n in
	pub) a=1 ;; ra) a=2 ;; rb) a=3 ;; s1) a=11 ;; s2) a=12 ;; s3) a=13 ;;
	esac
	N=$(ns "$n")
	ipq -n "$B" link add "v-$n" type veth peer name eth0 netns "$N" || skip "no veth"
	ipq -n "$B" link set "v-$n" master br0 up || fail "v-$n into br0"
	ipq -n "$N" addr add "10.78.0.$a/24" dev eth0 || fail "address of $n"
	ipq -n "$N" addr add "fd78::$a/64" dev eth0 nodad || fail "IPv6 address of $n"
	ipq -n "$N" link set eth0 up || fail "eth0 up in $n"
done
# Usable once the IPv6 address has its local route (nodad: no duplicate detection to wait for).
for n in $nodes; do
	_i=0
	until ipq -n "$(ns "$n")" -6 route show table local | grep -q 'fd78::'; do
		_i=$((_i + 1))
		[ "$_i" -lt 200 ] || fail "no IPv6 local route in $n"
		sleep 0.05
	done
done

# Fixed ports are fine: each program is alone in its namespace.
RELAY_A="--bind 10.78.0.2 --control 6000 --tcp 6001 --upstream 10.78.0.1:5000 --rejoin-idle 300"
SUB="--sockets 50 --expect-end --allow-gaps --rejoin-idle 300 --timeout 120 --progress 50"
MEMBER="--sockets 5 --expect-end --timeout 120"

# shellcheck disable=SC2086 # word lists
bg inns "$(ns rb)" "$relay" --bind 10.78.0.3 --control 6000 --upstream-tcp 10.78.0.2:6001 \
	--subscribers 50 --join-timeout 60 >"$tmp/relay-b" 2>"$tmp/relay-b.err"
rbpid=$bgpid
# shellcheck disable=SC2086
bg inns "$(ns ra)" "$relay" $RELAY_A --subscribers 101 --join-timeout 60 \
	>"$tmp/relay-a" 2>"$tmp/relay-a.err"
rapid=$bgpid
subs=
for n in s1 s2 s3; do
	to=10.78.0.2:6000
	[ "$n" = s3 ] && to=10.78.0.3:6000
	# shellcheck disable=SC2086
	bg inns "$(ns "$n")" "$sub" --control "$to" $SUB >"$tmp/sub-$n" 2>"$tmp/sub-$n.err"
	subs="$subs $bgpid:sub-$n"
done
for n in s1 s2; do
	# shellcheck disable=SC2086
	bg inns "$(ns "$n")" "$sub" --group 239.78.0.1:7000 --iface eth0 $MEMBER \
		>"$tmp/mc-$n" 2>"$tmp/mc-$n.err"
	subs="$subs $bgpid:mc-$n"
done
# shellcheck disable=SC2086
bg inns "$(ns s3)" "$sub" --group '[ff15::78]:7000' --iface eth0 $MEMBER \
	>"$tmp/mc6-s3" 2>"$tmp/mc6-s3.err"
subs="$subs $bgpid:mc6-s3"

showall() {
	for _f in relay-a relay-a.err relay-a2 relay-a2.err relay-b relay-b.err relay-b2 \
		relay-b2.err publisher publisher.err; do
		show "$tmp/$_f"
	done
	for _s in $subs; do
		grep -v ': gap \|: reached \|: received .*, gaps [12] .*duplicates 0,.*reordered 0, invalid 0' \
			"$tmp/${_s#*:}" | sed "s|^|  ${_s#*:}: |"
		show "$tmp/${_s#*:}.err"
	done
}
# Every subscription in before the first tick: the relays' and the members' own lines.
for s in $subs; do
	wait_line "$tmp/${s#*:}" '^joined ' "${s%%:*}" 60 ||
		{ showall; fail "${s#*:} did not join"; }
done
wait_line "$tmp/relay-b.err" 'upstream connected' "$rbpid" 60 ||
	{ showall; fail "relay B did not connect to A"; }
wait_line "$tmp/relay-a.err" 'relaying to 101 ' "$rapid" 60 ||
	{ showall; fail "relay A did not get its 101 subscribers"; }

bg inns "$(ns pub)" "$pub" --bind 10.78.0.1 --control 5000 --connected --subscribers 1 \
	--join-timeout 60 --count 1000000000 --rate 200 --size 100 \
	--dest 239.78.0.1:7000 --dest '[ff15::78]:7000' --mcast-if eth0 --mcast-ttl 1 \
	--mcast-loop 0 >"$tmp/publisher" 2>"$tmp/publisher.err"
pubpid=$bgpid
for f in relay-a relay-b; do
	p=$rapid
	[ "$f" = relay-b ] && p=$rbpid
	wait_line "$tmp/$f.err" 'first tick seq 1$' "$p" 60 ||
		{ showall; fail "$f: the feed did not start at tick 1"; }
done
# The kill comes once every subscriber socket has had tick 50, so that each one's gap starts
# after ticks it did get.
for n in s1 s2 s3; do
	_i=0
	while [ "$(grep -c ': reached 50$' "$tmp/sub-$n")" -lt 50 ]; do
		_i=$((_i + 1))
		[ "$_i" -lt 1200 ] || { showall; fail "sub-$n: the feed did not reach tick 50"; }
		sleep 0.05
	done
done
[ "$(cat "/proc/$rapid/comm" 2>/dev/null)" = md-relay ] ||
	{ showall; fail "pid $rapid is not md-relay ($(cat "/proc/$rapid/comm" 2>&1))"; }
kill -KILL "$rapid"
wait "$rapid" 2>/dev/null
# The restart waits until the publisher has dropped the dead A (a send refused after the ICMP
# error of one before): ticks were sent while A was down, so every subscriber has a gap to
# report however fast the restart is.
wait_line "$tmp/publisher.err" 'refuses datagrams: dropped it' "$pubpid" 60 ||
	{ showall; fail "the publisher did not notice relay A was gone"; }
# shellcheck disable=SC2086
bg inns "$(ns ra)" "$relay" $RELAY_A >"$tmp/relay-a2" 2>"$tmp/relay-a2.err"
ra2pid=$bgpid
wait_line "$tmp/relay-a2.err" 'first tick seq' "$ra2pid" 60 ||
	{ showall; fail "the restarted relay A gets no ticks"; }
wait_line "$tmp/relay-b.err" 'upstream connected again' "$rbpid" 60 ||
	{ showall; fail "relay B did not reconnect to the restarted A"; }
# wait_gaps N K: until each of the 50 sockets of sub-N has reported K gaps: a socket reports a
# gap when the first tick after it arrives, so then the feed has resumed for all of them.
wait_gaps() {
	_i=0
	while [ "$(grep -c ': gap ' "$tmp/sub-$1")" -lt $((50 * $2)) ]; do
		_i=$((_i + 1))
		[ "$_i" -lt 1200 ] || { showall; fail "sub-$1: not every socket saw ticks again"; }
		sleep 0.05
	done
}
for n in s1 s2 s3; do
	wait_gaps "$n" 1
done

# Then relay B, whose upstream is TCP: A's policy removes the dead stream, the restarted B
# connects again and its subscribers find it by their lease.
[ "$(cat "/proc/$rbpid/comm" 2>/dev/null)" = md-relay ] ||
	{ showall; fail "pid $rbpid is not md-relay ($(cat "/proc/$rbpid/comm" 2>&1))"; }
kill -KILL "$rbpid"
wait "$rbpid" 2>/dev/null
# Likewise, until A's policy has removed B's dead stream: a tick went nowhere.
wait_line "$tmp/relay-a2.err" 'TCP subscriber [0-9]* removed' "$ra2pid" 60 ||
	{ showall; fail "relay A did not notice relay B was gone"; }
bg inns "$(ns rb)" "$relay" --bind 10.78.0.3 --control 6000 --upstream-tcp 10.78.0.2:6001 \
	>"$tmp/relay-b2" 2>"$tmp/relay-b2.err"
rb2pid=$bgpid
wait_line "$tmp/relay-b2.err" 'first tick seq' "$rb2pid" 60 ||
	{ showall; fail "the restarted relay B gets no ticks"; }
wait_gaps s3 2
kill -TERM "$pubpid"

status=0
for s in $subs; do
	wait "${s%%:*}" || { echo "${s#*:} exited with $?" >&2; status=1; }
done
wait "$pubpid" # 1: stopped by a signal, as asked
wait "$ra2pid" || { echo "restarted relay A exited with $?" >&2; status=1; }
wait "$rb2pid" || { echo "restarted relay B exited with $?" >&2; status=1; }
showall

end=$(sed -n 's/.*interrupted after \([0-9]*\) ticks$/\1/p' "$tmp/publisher.err")
[ -n "$end" ] || fail "the publisher did not stop on SIGTERM"
echo "feed: $end ticks"
grep -q ", ticks $end," "$tmp/publisher" || { echo "publisher summary" >&2; status=1; }
a2first=$(sed -n 's/^md-relay: first tick seq \([0-9]*\)$/\1/p' "$tmp/relay-a2.err")
b2first=$(sed -n 's/^md-relay: first tick seq \([0-9]*\)$/\1/p' "$tmp/relay-b2.err")
for f in relay-a2 relay-b2; do
	grep -q "\.\.$end), upstream gaps 0 (missing 0), stale 0, invalid 0, .*, end yes," \
		"$tmp/$f" || { echo "$f: not every tick up to END ($end), once" >&2; status=1; }
done
# The killed B's stream: removed by A's slow-consumer policy once it failed.
grep -q 'joined 102, .*dropped 1)' "$tmp/relay-a2" ||
	{ echo "relay A2: B's dead stream not removed" >&2; status=1; }
[ "$(grep -c 'upstream gap ' "$tmp/relay-b.err")" = 1 ] ||
	{ echo "relay B: not one upstream gap" >&2; status=1; }
bgap=$(sed -n 's/^md-relay: upstream gap \([0-9]*\.\.[0-9]*\) .*/\1/p' "$tmp/relay-b.err")

# Per subscriber socket: one summary line, every gap where it must be. Gap lines come in the
# order found, so the first of a socket behind B is B's upstream gap, the second B's restart.
for n in s1 s2 s3; do
	f=$tmp/sub-$n
	k=1
	[ "$n" = s3 ] && k=2
	[ "$(grep -c ': received ' "$f")" = 50 ] || { echo "sub-$n: not 50 summaries" >&2; status=1; }
	[ "$(grep -c ': received .*, gaps '$k' (missing [1-9][0-9]*), duplicates 0, last seq '"$end"', reordered 0, invalid 0,' "$f")" = 50 ] ||
		{ echo "sub-$n: not $k gaps, in order, up to $end each" >&2; status=1; }
	[ "$(grep -c ': gap ' "$f")" = $((50 * k)) ] ||
		{ echo "sub-$n: not $k gaps each" >&2; status=1; }
	bad=$(sed -n 's/^\(.*\): gap \([0-9]*\)\.\.\([0-9]*\) .*/\1 \2 \3/p' "$f" |
		while read -r _ who lo hi; do
			if [ "$n" != s3 ]; then
				first=$a2first
			elif ! grep -q "^subscriber $who: gap" "$tmp/seen" 2>/dev/null; then
				echo "subscriber $who: gap" >>"$tmp/seen"
				[ "$lo..$hi" = "$bgap" ] || echo "$who: $lo..$hi is not B's gap $bgap"
				continue
			else
				first=$b2first
			fi
			[ "$hi" -ge $((first - 1)) ] && [ "$lo" -gt 1 ] && [ "$hi" -lt "$end" ] ||
				echo "$who: $lo..$hi does not span the restart (first tick $first)"
		done)
	[ -z "$bad" ] || { echo "sub-$n: $bad" | head -3 >&2; status=1; }
done
for m in mc-s1 mc-s2 mc6-s3; do
	[ "$(grep -c ": received $end, gaps 0 (missing 0), duplicates 0, last seq $end, reordered 0, invalid 0," "$tmp/$m")" = 5 ] ||
		{ echo "$m: not every tick once in order at all 5 members" >&2; status=1; }
done
# One-way delays, for information only (never asserted): the median over a tier's sockets of
# each socket's p50 and p99, from the publisher's timestamp to arrival.
tier() {
	_d=$(cat "$@" | sed -n 's/.*delay p50 \([0-9.]*\) p99 \([0-9.]*\) .*/\1 \2/p')
	_n=$(echo "$_d" | wc -l)
	_m=$(((_n + 1) / 2))
	echo "p50 $(echo "$_d" | cut -d' ' -f1 | sort -n | sed -n "${_m}p") us," \
		"p99 $(echo "$_d" | cut -d' ' -f2 | sort -n | sed -n "${_m}p") us ($_n sockets)"
}
echo "delay, publisher -> multicast member (1 hop): $(tier "$tmp/mc-s1" "$tmp/mc-s2")"
echo "delay, publisher -> A -> subscriber (2 hops): $(tier "$tmp/sub-s1" "$tmp/sub-s2")"
echo "delay, publisher -> A -> B -> subscriber (3 hops): $(tier "$tmp/sub-s3")"
[ "$status" = 0 ] || fail "topology"
echo "PASS: topology: $end ticks, publisher -> A -> B (TCP) -> 3 x 50 subscribers, A and B" \
	"restarted: every missing tick inside a reported gap ($bgap: B's upstream gap)," \
	"15 multicast members with every tick"
