#!/bin/sh
# SPDX-License-Identifier: MIT
# The serving side's resource limits (examples/md-serve.h), on loopback (registered by
# examples/meson.build; peers made by serve-peers.py):
#
#   serve-limits.sh nofile publisher|relay PUBLISHER RELAY SUBSCRIBER PYTHON cap|fd
#       The server (md-publisher, or md-relay fed by one) under RLIMIT_NOFILE 64 with a TCP
#       subscriber, then 100 more connections: it keeps serving, refuses the excess (cap: by
#       its default connection cap; fd: --max-conns 1000, so accept4 runs out of descriptors)
#       and counts exactly the connections that were closed unserved; the subscriber gets
#       every tick and END, and so does every connection that was taken.
#   serve-limits.sh memory PUBLISHER SUBSCRIBER PYTHON
#       40 TCP subscribers that never read, --backlog-max 8M: the publisher's peak resident
#       size grows by less than the cap plus a margin, the ones dropped for it are counted,
#       and a reading subscriber gets every tick.
#   serve-limits.sh churn PUBLISHER SUBSCRIBER PYTHON
#       1000 connections reset as soon as they are made: the per-peer lines on stderr are
#       rate-limited, and the lines printed plus those suppressed are the messages counted.
#
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh (dash).
set -u

# Under `meson test --setup valgrind`, memcheck goes in front of the servers, as in
# test-examples.sh (a resident size under valgrind means nothing: the memory test skips).
vg=''
if [ -n "${EXAMPLES_VALGRIND:-}" ]; then
	vg="valgrind --quiet --error-exitcode=99 --leak-check=full"
	vg="$vg --errors-for-leak-kinds=definite,indirect"
else
	case $(readlink /proc/$$/exe 2>/dev/null) in
	*/valgrind/*) EXAMPLES_VALGRIND=1 exec /bin/sh "$0" "$@" ;;
	esac
fi

here=$(dirname "$0")
. "$here/../harness.sh"
harness_init serve-limits
peers="$here/serve-peers.py"

need_exe() {
	for _f in "$@"; do
		[ -x "$_f" ] || skip "$_f is not built"
	done
}

# port_of FILE PID WHAT: the port a server (started as PID, stdout in FILE) printed for WHAT.
port_of() {
	wait_line "$1" "^$3 port [0-9]" "$2" 20 || { show "$1" "$1.err"; fail "$1 did not start"; }
	sed -n "s/^$3 port \\([0-9]*\\)\$/\\1/p" "$1"
}

# field FILE REGEX: the number captured by REGEX's \(...\) in FILE's first matching line.
field() {
	sed -n "s/.*$2.*/\\1/p" "$1" | head -n 1
}

nofile() {
	target=$1 pub=$2 relay=$3 sub=$4 py=$5 how=$6
	need_exe "$pub" "$relay" "$sub"
	command -v prlimit >/dev/null || skip "prlimit (util-linux) is not installed"
	count=20000
	case $how in
	cap) cap='' ;;
	fd) cap='--max-conns 1000' ;;
	*) fail "unknown way '$how'" ;;
	esac
	# The feed lasts 10 s at 2000 ticks/s, long enough for 100 connections to be made and
	# handled on a loaded machine; the counts below say if it was not.
	if [ "$target" = publisher ]; then
		# shellcheck disable=SC2086 # $vg and $cap are word lists, or nothing
		bg prlimit --nofile=64 $vg "$pub" --control 0 --tcp 0 $cap --subscribers 1 \
			--count "$count" --rate 2000 --size 100 >"$tmp/server" 2>"$tmp/server.err"
		srvpid=$bgpid
	else
		bg "$pub" --control 0 --subscribers 1 --count "$count" --rate 2000 --size 100 \
			>"$tmp/publisher" 2>"$tmp/publisher.err"
		pubpid=$bgpid
		port=$(port_of "$tmp/publisher" "$pubpid" control)
		# shellcheck disable=SC2086
		bg prlimit --nofile=64 $vg "$relay" --upstream "127.0.0.1:$port" --control 0 \
			--tcp 0 $cap --subscribers 1 >"$tmp/server" 2>"$tmp/server.err"
		srvpid=$bgpid
	fi
	tport=$(port_of "$tmp/server" "$srvpid" tcp)
	bg "$sub" --tcp "127.0.0.1:$tport" --timeout 120 --expect "$count" >"$tmp/sub" 2>&1
	subpid=$bgpid
	# The subscriber is in once the server feeds it (it waits for one subscriber).
	if [ "$target" = publisher ]; then
		wait_line "$tmp/server.err" 'publishing to 1 ' "$srvpid" 30 ||
			{ show "$tmp/server.err"; fail "md-publisher did not start the feed"; }
	else
		wait_line "$tmp/server.err" 'first tick seq' "$srvpid" 30 ||
			{ show "$tmp/server.err"; fail "md-relay did not start relaying"; }
	fi
	"$py" "$peers" hold "$tport" 100 120 >"$tmp/hold" 2>&1
	hstatus=$?
	status=0
	wait "$srvpid" || { echo "$target exited with $?" >&2; status=1; }
	wait "$subpid" || { echo "subscriber exited with $?" >&2; status=1; }
	if [ "$target" = relay ]; then
		wait "$pubpid" || { echo "publisher exited with $?" >&2; status=1; }
	fi
	show "$tmp/server" "$tmp/server.err" "$tmp/sub" "$tmp/hold"
	[ "$hstatus" = 0 ] || { echo "hold: connections still open at its timeout" >&2; status=1; }
	refused=$(field "$tmp/server" ', refused \([0-9]*\) (no descriptor')
	nofd=$(field "$tmp/server" '(no descriptor \([0-9]*\))')
	conns=$(field "$tmp/server" 'tcp connections \([0-9]*\) (at most')
	hrefused=$(field "$tmp/hold" ', refused \([0-9]*\),')
	hserved=$(field "$tmp/hold" ', served \([0-9]*\),')
	[ -n "$refused" ] && [ -n "$hrefused" ] ||
		{ echo "no counts of refused connections" >&2; status=1; refused=0 hrefused=0; }
	# Every connection was either served to END or closed unserved, and the server counts
	# exactly those it closed; the subscriber is one more connection. (Under valgrind an
	# accept4 past its share of descriptors is made by the kernel, closed by valgrind and
	# returned as EMFILE: that connection is closed uncounted, and the next one refused.)
	exact=$refused
	[ -n "$vg" ] && [ "$how" = fd ] && [ "$hrefused" -ge "$refused" ] && exact=$hrefused
	[ "$refused" -gt 0 ] && [ "$exact" = "$hrefused" ] ||
		{ echo "refused: server says '$refused', peers saw '$hrefused'" >&2; status=1; }
	[ "$((${hserved:-0} + hrefused))" = 100 ] ||
		{ echo "peers: not every connection served or refused" >&2; status=1; }
	[ "${conns:-x}" = "$((${hserved:-0} + 1))" ] ||
		{ echo "server took '$conns' connections, peers served '$hserved' + 1" >&2; status=1; }
	case $how in
	fd) [ "${nofd:-0}" -gt 0 ] ||
		{ echo "no connection was refused for want of a descriptor" >&2; status=1; } ;;
	cap) [ "${nofd:-x}" = 0 ] ||
		{ echo "the default cap let descriptors run out ($nofd)" >&2; status=1; } ;;
	esac
	grep -q "^tcp 0: received $count, gaps 0 (missing 0), duplicates 0," "$tmp/sub" ||
		{ echo "subscriber: not every tick once" >&2; status=1; }
	if [ "$target" = publisher ]; then
		grep -q ", ticks $count, " "$tmp/server" ||
			{ echo "publisher: not every tick" >&2; status=1; }
	else
		grep -q "ticks forwarded $count (seq 1\\.\\.$count), .*, end yes," "$tmp/server" ||
			{ echo "relay: not every tick forwarded, or no END" >&2; status=1; }
	fi
	[ "$status" = 0 ] || fail "nofile $target $how"
	echo "PASS: nofile $target $how (RLIMIT_NOFILE 64, 100 connections: $hrefused refused" \
		"($nofd for want of a descriptor), $hserved served to END, every tick to the subscriber)"
}

memory() {
	pub=$1 sub=$2 py=$3
	need_exe "$pub" "$sub"
	[ -z "$vg" ] || skip "a resident size under valgrind means nothing"
	count=20000
	# An ASan build keeps freed memory in quarantine (256 MB): the resident size would
	# measure that, not what the publisher holds. Without a sanitizer the option is unread.
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
	export ASAN_OPTIONS
	# The feed starts once the reader and the 40 stalled streams are all in, so each of
	# those is sent all 20 MB.
	bg "$pub" --control 0 --tcp 0 --backlog-max 8M --subscribers 41 --count "$count" \
		--rate 5000 --size 1000 >"$tmp/server" 2>"$tmp/server.err"
	srvpid=$bgpid
	tport=$(port_of "$tmp/server" "$srvpid" tcp)
	bg "$sub" --tcp "127.0.0.1:$tport" --timeout 120 --expect "$count" >"$tmp/sub" 2>&1
	subpid=$bgpid
	bg "$py" "$peers" stall "$tport" 40 "$srvpid" 120 >"$tmp/stall" 2>&1
	stallpid=$bgpid
	wait "$stallpid"
	hstatus=$?
	status=0
	wait "$srvpid" || { echo "publisher exited with $?" >&2; status=1; }
	wait "$subpid" || { echo "subscriber exited with $?" >&2; status=1; }
	show "$tmp/server" "$tmp/server.err" "$tmp/sub" "$tmp/stall"
	[ "$hstatus" = 0 ] || { echo "stall: connections still open at its timeout" >&2; status=1; }
	start=$(field "$tmp/stall" 'start-rss \([0-9]*\),')
	peak=$(field "$tmp/stall" 'peak-hwm \([0-9]*\),')
	cut=$(field "$tmp/stall" ', cut \([0-9]*\),')
	served=$(field "$tmp/stall" ', served \([0-9]*\),')
	evicted=$(field "$tmp/server" 'dropped for the backlog cap \([0-9]*\) ')
	[ -n "$start" ] && [ -n "$peak" ] && [ -n "$evicted" ] ||
		{ echo "no figures" >&2; fail "memory"; }
	# 20 MB go to each of the 40 (4 MiB each would be queued without the cap): the peak
	# may pass the start by the 8 MiB cap, one tick per stream, and a 32 MiB margin for the
	# allocator (ASan's included).
	grow=$((peak - start))
	[ "$grow" -lt $(((8 + 32) * 1024)) ] ||
		{ echo "publisher grew by $grow kB, the cap is 8 MiB" >&2; status=1; }
	# Each stalled peer was dropped for the cap, or was still held at END and then let go
	# with its backlog undelivered (both cut), or got END; the drops are counted.
	[ "$evicted" -gt 0 ] && [ "$evicted" -le "$cut" ] && [ "$((cut + served))" = 40 ] ||
		{ echo "dropped: server says $evicted, peers saw $cut cut, $served served" >&2
		  status=1; }
	grep -q "^tcp 0: received $count, gaps 0 (missing 0), duplicates 0," "$tmp/sub" ||
		{ echo "subscriber: not every tick once" >&2; status=1; }
	[ "$status" = 0 ] || fail "memory"
	echo "PASS: memory (40 stalled streams, --backlog-max 8M: grew by $grow kB," \
		"$evicted dropped for the cap, every tick to the reader)"
}

churn() {
	pub=$1 sub=$2 py=$3
	need_exe "$pub" "$sub"
	# 20 s of feed: time for the connections on a loaded machine.
	count=40000
	# shellcheck disable=SC2086
	bg $vg "$pub" --control 0 --tcp 0 --subscribers 1 --count "$count" --rate 2000 \
		--size 100 >"$tmp/server" 2>"$tmp/server.err"
	srvpid=$bgpid
	tport=$(port_of "$tmp/server" "$srvpid" tcp)
	bg "$sub" --tcp "127.0.0.1:$tport" --timeout 120 --expect "$count" >"$tmp/sub" 2>&1
	subpid=$bgpid
	wait_line "$tmp/server.err" 'publishing to 1 ' "$srvpid" 30 ||
		{ show "$tmp/server.err"; fail "md-publisher did not start the feed"; }
	t0=$(date +%s)
	"$py" "$peers" churn "$tport" 1000 120 >"$tmp/churn" 2>&1
	cstatus=$?
	status=0
	wait "$srvpid" || { echo "publisher exited with $?" >&2; status=1; }
	t1=$(date +%s)
	wait "$subpid" || { echo "subscriber exited with $?" >&2; status=1; }
	show "$tmp/server" "$tmp/sub" "$tmp/churn"
	sed -n '1,20p;$p' "$tmp/server.err" | sed 's|^|  server.err: |'
	[ "$cstatus" = 0 ] || { echo "churn: out of time" >&2; status=1; }
	msgs=$(field "$tmp/server" 'per-peer messages \([0-9]*\) (')
	supp=$(field "$tmp/server" '(suppressed \([0-9]*\))')
	[ -n "$msgs" ] && [ -n "$supp" ] || { echo "no message counts" >&2; fail "churn"; }
	# The lines on stderr: the feed's start, each per-peer message printed, and the
	# "suppressed" lines that count the others.
	printed=$(grep -cv -e 'publishing to' -e 'more per-peer messages suppressed' \
		-e '^md-publisher: behind --rate' "$tmp/server.err")
	said=$(sed -n 's/.*: \([0-9]*\) more per-peer messages suppressed.*/\1/p' \
		"$tmp/server.err" | awk '{ s += $1 } END { print s + 0 }')
	lines=$(wc -l <"$tmp/server.err")
	secs=$((t1 - t0 + 1))
	[ "$msgs" -ge 1000 ] ||
		{ echo "only $msgs per-peer messages for 1000 connections" >&2; status=1; }
	[ "$((printed + said))" = "$msgs" ] && [ "$said" = "$supp" ] ||
		{ echo "printed $printed + suppressed $said != messages $msgs ($supp)" >&2
		  status=1; }
	# At most 10 a second, plus one "suppressed" line a second, plus the start line, plus
	# a 'behind --rate' line per 10 s when the machine is too loaded for the feed's rate.
	[ "$lines" -le $((11 * (secs + 1) + 1 + secs / 10 + 1)) ] ||
		{ echo "$lines lines on stderr in $secs s" >&2; status=1; }
	grep -q "^tcp 0: received $count, gaps 0 (missing 0), duplicates 0," "$tmp/sub" ||
		{ echo "subscriber: not every tick once" >&2; status=1; }
	[ "$status" = 0 ] || fail "churn"
	echo "PASS: churn (1000 connections reset: $msgs per-peer messages, $lines lines on" \
		"stderr in $secs s, $supp suppressed)"
}

case ${1:-} in
nofile) shift; [ $# -eq 6 ] || fail "usage: $0 nofile publisher|relay PUB RELAY SUB PYTHON cap|fd"
	nofile "$@" ;;
memory) shift; [ $# -eq 3 ] || fail "usage: $0 memory PUBLISHER SUBSCRIBER PYTHON"
	memory "$@" ;;
churn) shift; [ $# -eq 3 ] || fail "usage: $0 churn PUBLISHER SUBSCRIBER PYTHON"
	churn "$@" ;;
*) fail "usage: $0 nofile|memory|churn ..." ;;
esac
