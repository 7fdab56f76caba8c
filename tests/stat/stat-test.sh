#!/bin/sh
# SPDX-License-Identifier: MIT
# The 'stat' suite's driver (registered by tests/stat/meson.build): multisend-stat against
# real live-counter files (lib/obs/shm-format.h). The preload shim's slot is tested by
# tests/shim/shim-test.sh (live), also in this suite.
#
#   stat-test.sh md PUBLISHER SUBSCRIBER STAT
#       attach to a running md-publisher and detach, twice, and interrupt a third watcher:
#       the fanouts counter never falls and rises while watched, the publisher keeps running
#       and ends well when stopped (every tick delivered, no error), and once it is gone
#       multisend-stat says so and stops by itself, on the closed slot's final values. (The
#       feeds of md, md-ts and screen have no fixed length: SIGTERM ends them once the
#       watchers are done.)
#   stat-test.sh md-ts PUBLISHER SUBSCRIBER STAT
#       the same publisher with transmit timestamps: the histograms' summaries, and the
#       refreshing screen on a terminal (through script(1)).
#   stat-test.sh refuse PUBLISHER STAT
#       files that are not live-counter files of this version are refused with exit status 2
#       and a message saying why; a missing one with 1; none of them is ever written.
#   stat-test.sh replace PUBLISHER STAT
#       a watched file truncated, rewritten by a new owner and replaced by another file:
#       multisend-stat carries on, and ends on the last owner's values.
#   stat-test.sh lockout PUBLISHER STAT        (root: a second user)
#       another user holds every lock a reader can take (flock, POSIX and OFD read locks) on
#       a stale live-counter file: the owner's next publisher publishes there all the same.
#   stat-test.sh planted PUBLISHER STAT        (root: a second user)
#       a file planted by another user under a process's name (and locked by its owner):
#       `multisend-stat PID` refuses it, and read by its name it is not called alive.
#   stat-test.sh names PUBLISHER STAT
#       names in the file with terminal escape sequences, C1 controls and bytes that are not
#       UTF-8: the screen shows them escaped, the JSON is valid UTF-8 and gives them back.
#   stat-test.sh livefile LIVEFILE SHIM STAT
#       tests/stat/livefile.c: no descriptor kept (a socket on "its" number survives fork,
#       ms_ctx_free and the shim's exec), a damaged slot never stops or misleads the
#       publisher, a file truncated under its publisher (alone, under offload, shared with
#       the shim) is survived and made again with every slot, the program sets and reads its
#       own SIGBUS handler under the shim's, and the shim keeps its file when the program
#       frees its last context.
#   stat-test.sh rawfork LIVEEDGE SHIM STAT
#       tests/stat/liveedge.c rawfork: children made by _Fork() (sends on the inherited
#       context, exit) and by syscall(SYS_fork) (exec under the shim) run no atfork handler
#       and must not touch the parent's mapping (which they do not have): both exit 0, and
#       the parent's file ends with the parent's counts.
#   stat-test.sh noproc LIVEEDGE               (root: a mount namespace)
#       tests/stat/liveedge.c noproc in a mount namespace where /proc/PID/fd, then all of
#       /proc, is a tmpfs: files are made and replaced without /proc/self/fd.
#   stat-test.sh hostile HOSTILE STAT
#       tests/stat/hostile.c's files in /dev/shm, each with a live owner: one of 4,352 distinct
#       names and one that never settles are left out and counted (skipped_total{reason}),
#       a big honest one is exported whole; --listen answers every GET while clients that
#       never send or never read hold connections, and ends at once on SIGTERM.
#   stat-test.sh owners HOSTILE STAT          (root: a second user)
#       a scan reads only root's files unless --owner / --all-owners names others; another
#       user's 0600 file is counted (reason owner), unread; every series has an owner label.
#   stat-test.sh isolation HOSTILE STAT       (root: a mount namespace)
#       a file planted in the host's /dev/shm is not seen by the tests, which run with a
#       /dev/shm of their own (the 'scan' mode, as every other mode runs).
#   stat-test.sh pidns LIVEEDGE STAT          (root: a PID namespace)
#       a publisher in a PID namespace of its own (liveedge hold): multisend-stat outside it
#       shows it alive (its write lock) though /proc does not show the pid it names
#       ("pid_verified": false); once it has let the file go, not alive.
#
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh (dash).
set -u

# Every test but 'isolation' runs with a /dev/shm of its own, so that it never sees a file it
# did not make (another user's, another test's; issue 26): as root, in a mount namespace with
# a private tmpfs there. Not as root, there is none: files are named after the test's scratch
# directory, and a scan of /dev/shm reads only this user's files.
private_shm_works() {
	command -v unshare >/dev/null 2>&1 &&
		unshare --mount --propagation private sh -c \
			'mount -t tmpfs -o mode=1777 tmpfs /dev/shm' 2>/dev/null
}
if [ "$(id -u)" = 0 ] && [ -z "${STAT_TEST_PRIVATE_SHM:-}" ] && [ "${1:-}" != isolation ] &&
	private_shm_works; then
	STAT_TEST_PRIVATE_SHM=1 exec unshare --mount --propagation private sh -c \
		'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec sh "$0" "$@"' "$0" "$@"
fi

. "$(dirname "$0")/../harness.sh"
harness_init stat-test

need() {
	for _c in "$@"; do
		command -v "$_c" >/dev/null 2>&1 || skip "$_c is not installed"
	done
}

need_exe() {
	for _f in "$@"; do
		[ -x "$_f" ] || skip "$_f is not built"
	done
}

# check FILE PYTHON-CONDITIONS...: FILE holds multisend-stat's JSON lines. j is the list of
# objects, c the list of counter dicts of the first slot named "ctx ...", r its rates,
# h its histograms, st its states. Every line must parse; each condition must be true.
check() {
	_f=$1
	shift
	python3 - "$_f" "$@" <<'PY' || { show "$_f"; fail "check of multisend-stat's output"; }
import json, sys
j = [json.loads(x) for x in open(sys.argv[1]).read().splitlines() if x.strip()]
def ctx(o):
    s = [s for s in o.get("slots", []) if s["name"].startswith("ctx ")]
    return s[0] if s else {"counters": {}, "rates": {}, "histograms": {}, "state": None}
c = [ctx(o)["counters"] for o in j]
r = [ctx(o)["rates"] for o in j]
h = [ctx(o)["histograms"] for o in j]
st = [ctx(o)["state"] for o in j]
def rising(k, xs=c):
    return all(a[k] < b[k] for a, b in zip(xs, xs[1:]))
def never_falls(k, xs=c):
    return all(a[k] <= b[k] for a, b in zip(xs, xs[1:]))
for cond in sys.argv[2:]:
    if not eval(cond):
        sys.exit("failed: " + cond)
PY
}

# last_fanouts FILE: the fanouts counter of FILE's last line (multisend-stat's JSON).
last_fanouts() {
	python3 -c 'import json, sys
o = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print([s for s in o["slots"] if s["name"].startswith("ctx ")][0]["counters"]["fanouts"])' "$1"
}

# watch_until OUT SECONDS CONDITION STAT-OPTIONS...: multisend-stat --json STAT-OPTIONS $file
# (no --count) writes OUT until CONDITION (Python on the complete lines so far, as check's)
# holds, then is interrupted, a clean end (exit 0). Fails if it ends first or after SECONDS:
# a hang, never a pace (a watcher sees no tick while the machine runs no publisher).
watch_until() {
	_wo=$1 _ws=$2 _wcond=$3
	shift 3
	bg "$stat" --json "$@" "$file" >"$_wo" 2>"$_wo.err"
	_wpid=$bgpid
	# A deadline by the clock: one python3 may take seconds to start on a loaded machine.
	_wend=$(($(date +%s) + _ws))
	until python3 - "$_wo" "$_wcond" <<'PY'
import json, sys
j = [json.loads(x) for x in open(sys.argv[1]).read().split("\n")[:-1] if x.strip()]
def ctx(o):
    s = [s for s in o.get("slots", []) if s["name"].startswith("ctx ")]
    return s[0] if s else {"counters": {}, "histograms": {}}
c = [ctx(o)["counters"] for o in j]
h = [ctx(o)["histograms"] for o in j]
sys.exit(not (len(j) >= 2 and eval(sys.argv[2])))
PY
	do
		kill -0 "$_wpid" 2>/dev/null || { show "$_wo.err"; fail "multisend-stat ended: $_wcond"; }
		[ "$(date +%s)" -lt "$_wend" ] || { show "$_wo"; fail "not in $_ws s: $_wcond"; }
		sleep 0.05
	done
	kill -INT "$_wpid"
	wait "$_wpid" || { show "$_wo.err"; fail "multisend-stat interrupted: exit $?"; }
	show "$_wo.err"
}

# wait_count FILE N PID SECONDS: until FILE has N lines or more (false if PID is gone first or
# SECONDS pass: a hang, never a pace).
wait_count() {
	_wc_left=$(($4 * 20))
	while [ "$(wc -l <"$1")" -lt "$2" ]; do
		kill -0 "$3" 2>/dev/null || return 1
		[ "$_wc_left" -gt 0 ] || return 1
		sleep 0.05
		_wc_left=$((_wc_left - 1))
	done
}

# start_md PUBLISHER SUBSCRIBER [publisher options]: a publisher with one subscriber, at 5000
# ticks/s, publishing its live counters in $tmp/md-PID ($stat reads them); sets $pubpid,
# $subpid, $file. The feed has no fixed length: it runs until stop_md, once the watchers have
# what they need, however slow the machine (feeds of 2 and 5 s ended under their watchers on
# a loaded one). Returns once the first tick is in the file ("publishing to" comes before it;
# a first read before it would see no rate); the wait is bounded (60 s: a hang), not paced.
start_md() {
	_pub=$1 _sub=$2
	shift 2
	bg "$_pub" --control 0 --subscribers 1 --count 1000000000 --rate 5000 --size 100 \
		--stats-shm "$tmp/md-%p" "$@" >"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	if ! wait_line "$tmp/publisher" '^control port [0-9]' "$pubpid" 10; then
		wait "$pubpid"
		_rc=$?
		show "$tmp/publisher" "$tmp/publisher.err"
		grep -q 'ms_ctx_new: .*not supported' "$tmp/publisher.err" &&
			skip "md-publisher $*: not supported here"
		fail "md-publisher did not start (exit $_rc)"
	fi
	_port=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/publisher")
	# --timeout: the bound on a hang (no END), under the test's own timeout.
	bg "$_sub" --control "127.0.0.1:$_port" --timeout 100 --expect-end \
		>"$tmp/subscriber" 2>&1
	subpid=$bgpid
	wait_line "$tmp/publisher.err" 'publishing to' "$pubpid" 30 ||
		{ show "$tmp/publisher.err"; fail "md-publisher did not start publishing"; }
	file=$tmp/md-$pubpid
	[ -s "$file" ] || { show "$tmp/publisher.err"; fail "md-publisher made no $file"; }
	_end=$(($(date +%s) + 60))
	until "$stat" --json --count 1 --interval 10 "$file" 2>/dev/null | python3 -c '
import json, sys
s = [s for s in json.load(sys.stdin)["slots"] if s["name"].startswith("ctx ")]
sys.exit(not s or s[0]["counters"]["fanouts"] < 1)'; do
		kill -0 "$pubpid" 2>/dev/null || { show "$tmp/publisher.err"; fail "md-publisher died"; }
		[ "$(date +%s)" -lt "$_end" ] || fail "no tick in $file after 60 s"
		sleep 0.05
	done
}

# stop_md: SIGTERM ends the feed at the publisher's next tick (END after its last one; by
# md-publisher's rule an interrupted feed exits 1, after its summary); it and its subscriber
# end well, undisturbed by any watcher. Sets $count, the ticks it sent.
stop_md() {
	kill -TERM "$pubpid"
	wait "$pubpid"
	_rc=$?
	[ "$_rc" = 1 ] && grep -q '^md-publisher: interrupted after [0-9]* ticks$' "$tmp/publisher.err" ||
		{ show "$tmp/publisher" "$tmp/publisher.err"; fail "md-publisher stopped: exit $_rc"; }
	wait "$subpid" || { show "$tmp/subscriber"; fail "md-subscriber exited with $?"; }
	show "$tmp/publisher" "$tmp/publisher.err" "$tmp/subscriber"
	count=$(sed -n 's/^md-publisher: .*, ticks \([0-9]*\), destinations .*/\1/p' "$tmp/publisher")
	[ -n "$count" ] && [ "$count" -gt 0 ] || fail "md-publisher sent no tick"
	grep -q "^md-publisher: .*, ticks $count, .*, failures 0," "$tmp/publisher" ||
		fail "md-publisher did not send every tick without failure"
	grep -q "^md-publisher: interrupted after $count ticks$" "$tmp/publisher.err" ||
		fail "md-publisher's summary and its interruption disagree"
	# Its only lines on stderr are its start and its end: no warning about the live counters,
	# no error (a loaded machine may fall behind --rate: said, and no fault of the counters').
	[ "$(grep -cv -e '^md-publisher: publishing to' -e '^md-publisher: interrupted after' \
		-e '^md-publisher: behind --rate' "$tmp/publisher.err")" = 0 ] ||
		fail "md-publisher wrote more than its start and its end on stderr"
	grep -q "received $count, gaps 0 (missing 0), duplicates 0," "$tmp/subscriber" ||
		fail "the subscriber did not get every tick once"
}

# after_md STAT: the publisher is gone; multisend-stat, without --count, reads the closed
# slot, says the publisher has exited and stops by itself, and leaves the file as it was.
after_md() {
	cp "$file" "$tmp/copy"
	timeout 20 "$1" --json --interval 100 "$file" >"$tmp/after" 2>"$tmp/after.err" ||
		{ show "$tmp/after.err"; fail "multisend-stat on the finished publisher: exit $?"; }
	show "$tmp/after.err"
	grep -q "publisher $pubpid (md-publisher) has exited and closed all its slots" \
		"$tmp/after.err" || fail "multisend-stat did not say that the publisher had exited"
	accepted=$(sed -n 's/.*destinations accepted \([0-9]*\),.*/\1/p' "$tmp/publisher")
	check "$tmp/after" "len(j) == 1" "st == ['closed']" "j[0]['alive'] is False" \
		"c[0]['fanouts'] >= $count" "c[0]['dests_accepted'] >= $accepted" \
		"c[0]['dests_failed'] == 0"
	cmp -s "$file" "$tmp/copy" || fail "multisend-stat changed the file"
}

md_test() { # ts PUBLISHER SUBSCRIBER STAT
	ts=$1 pub=$2 sub=$3 stat=$4
	need python3 timeout cmp
	need_exe "$pub" "$sub" "$stat"
	if [ "$ts" = ts ]; then
		need script
		# One tick in 16 stamped.
		start_md "$pub" "$sub" --ts-sample 16
		# Watched until stamped sends have come between its reads (however long that takes).
		watch_until "$tmp/stat1" 60 \
			"h[-1]['call_last_ns']['count'] > h[0]['call_last_ns']['count']" --interval 300
		check "$tmp/stat1" "len(j) >= 2" "never_falls('fanouts')" "never_falls('ts_sampled')" \
			"c[-1]['fanouts'] > c[0]['fanouts']" "c[-1]['ts_sampled'] > c[0]['ts_sampled']" \
			"h[-1]['call_last_ns']['count'] > 0" \
			"all(x['min'] <= x['p50'] <= x['p90'] <= x['p99'] <= x['p999'] <= x['max']
			     for x in h[-1].values() if x['count'])" \
			"all(x['p50'] > 0 for k, x in h[-1].items() if x['count'] and k != 'first_last_ns')" \
			"all(b[k]['interval']['count'] == b[k]['count'] - a[k]['count']
			     for a, b in zip(h, h[1:]) for k in b if b[k]['count'] > a[k]['count'])" \
			"any(b['call_last_ns']['interval'] is not None for b in h[1:])" \
			"all(b[k]['interval'] is None
			     for a, b in zip(h, h[1:]) for k in b if b[k]['count'] == a[k]['count'])" \
			"all(x['interval']['p50'] <= x['interval']['p99'] <= x['max']
			     for b in h[1:] for x in b.values() if x['interval'])"
		# On a terminal: the screen, cleared and redrawn, with the histogram table.
		TERM=${TERM:-dumb} script -qec "$stat --interval 200 --count 2 $file" /dev/null \
			>"$tmp/screen" 2>&1 || { show "$tmp/screen"; fail "multisend-stat on a terminal"; }
		[ "$(grep -c "$(printf '\033\\[H\033\\[2J')" "$tmp/screen")" = 2 ] ||
			{ show "$tmp/screen"; fail "the screen was not redrawn twice"; }
		for w in "pid $pubpid (md-publisher)" 'slot 0 "ctx 1" (' 'fanouts' \
			'call_last_ns' 'p99' 'interval'; do
			grep -q "$w" "$tmp/screen" || { show "$tmp/screen"; fail "no '$w' on the screen"; }
		done
		# A rate for fanouts (the JSON's show that they rise; how fast is the machine's
		# business, and a loaded one may run no tick in one interval).
		grep -Eq ' fanouts +[0-9]+ +[0-9.]+ [kMG]?/s' "$tmp/screen" ||
			{ show "$tmp/screen"; fail "no rate for fanouts on the screen"; }
		kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended while it was watched"
		sed -n '/pid/,$s/^/  screen: /p' "$tmp/screen" | tr -d '\r' | head -n 40
		stop_md
		after_md "$stat"
		echo "PASS: multisend-stat shows md-publisher's histograms, as JSON and on a terminal"
		return
	fi

	# Attached twice, and a third watcher interrupted, while the feed runs.
	start_md "$pub" "$sub"
	"$stat" --json --interval 200 --count 5 "$file" >"$tmp/stat1" 2>"$tmp/stat1.err" ||
		{ show "$tmp/stat1.err"; fail "multisend-stat: exit $?"; }
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended while it was watched"
	show "$tmp/stat1.err"
	check "$tmp/stat1" "len(j) == 5" "all(o['pid'] == $pubpid for o in j)" \
		"all(o['program'] == 'md-publisher' and o['alive'] for o in j)" \
		"all(x == 'live' for x in st)" "never_falls('fanouts')" \
		"never_falls('dests_accepted')" "all(x['fanouts'] >= 0 for x in r)" \
		"all(x['dests_failed'] == 0 for x in c)"
	sed -n '$s/^/  multisend-stat: /p' "$tmp/stat1" | cut -c1-300

	# Detached and attached again: the counters never went back.
	"$stat" --json --interval 200 --count 2 "$file" >"$tmp/stat2" 2>"$tmp/stat2.err" ||
		{ show "$tmp/stat2.err"; fail "multisend-stat, second time: exit $?"; }
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended while it was watched"
	check "$tmp/stat2" "len(j) == 2" "never_falls('fanouts')" \
		"c[0]['fanouts'] >= $(last_fanouts "$tmp/stat1")"
	last=$(last_fanouts "$tmp/stat2")

	# Without --count, it runs until interrupted, and an interrupt is a clean end: watched
	# until the counter has risen past the second watcher's last read, and while watched (not
	# in a given time: a loaded machine may run no tick in an interval).
	watch_until "$tmp/stat3" 60 "c[0]['fanouts'] < c[-1]['fanouts'] > $last" --interval 100
	check "$tmp/stat3" "len(j) >= 2" "never_falls('fanouts')" "c[0]['fanouts'] >= $last" \
		"c[-1]['fanouts'] > c[0]['fanouts']" \
		"all(o['alive'] for o in j)" "all(x == 'live' for x in st)"
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended while it was watched"

	stop_md
	after_md "$stat"
	echo "PASS: multisend-stat attached to md-publisher three times; it ran on undisturbed"
}

# ---------------------------------------------------------------------------------------------

# refused RC MESSAGE STAT-ARGUMENTS...: multisend-stat exits with RC and says MESSAGE.
refused() {
	_rc=$1 _msg=$2
	shift 2
	"$stat" --json --count 1 --interval 10 "$@" >"$tmp/out" 2>"$tmp/err"
	_got=$?
	[ "$_got" = "$_rc" ] || { show "$tmp/out" "$tmp/err"; fail "$*: exit $_got, not $_rc"; }
	grep -q -e "$_msg" "$tmp/err" || { show "$tmp/err"; fail "$*: no '$_msg' on stderr"; }
	[ ! -s "$tmp/out" ] || { show "$tmp/out"; fail "$*: output on a refused file"; }
	sed -n 's/^/  refused: /p' "$tmp/err"
}

# patch FILE OFFSET VALUE: a 32-bit little-endian field of the header, changed.
patch() {
	python3 -c 'import struct, sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(struct.pack("<I", int(sys.argv[3])))' "$@"
}

refuse_test() { # PUBLISHER STAT
	pub=$1 stat=$2
	need python3 cmp
	need_exe "$pub" "$stat"
	# --version: the library's version and the file format this reader takes.
	"$stat" --version >"$tmp/version" || fail "--version exited with $?"
	grep -q '^multisend-stat (libmultisend [0-9][0-9.]*), live-counter file format [0-9][0-9]*$' \
		"$tmp/version" || { show "$tmp/version"; fail "--version printed something else"; }
	# A genuine file, from a publisher that is gone.
	"$pub" --control 0 --count 10 --rate 0 --stats-shm "$tmp/real" >"$tmp/pub" 2>&1 ||
		{ show "$tmp/pub"; fail "md-publisher exited with $?"; }
	[ -s "$tmp/real" ] || fail "md-publisher made no live-counter file"
	"$stat" --json --interval 10 "$tmp/real" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat refused a genuine file"; }
	check "$tmp/out" "len(j) == 1" "st == ['closed']"

	seq 1 1000 >"$tmp/text" # text, longer than a header
	refused 2 'not a libmultisend live-counter file (no magic number)' "$tmp/text"
	head -c 200000 /dev/zero >"$tmp/zeros"
	refused 2 'not a libmultisend live-counter file' "$tmp/zeros"
	printf 'short' >"$tmp/short5"
	refused 2 'not a libmultisend live-counter file (5 bytes, too short' "$tmp/short5"
	: >"$tmp/empty"
	refused 2 'not a libmultisend live-counter file (0 bytes, too short' "$tmp/empty"
	mkdir "$tmp/dir"
	refused 2 'not a libmultisend live-counter file (not a regular file)' "$tmp/dir"
	refused 1 "cannot open $tmp/missing: No such file or directory" "$tmp/missing"
	cp "$tmp/real" "$tmp/v2"
	patch "$tmp/v2" 8 2 # version
	# The version this build writes, from the genuine file (offset 8), so that a new format
	# needs no edit here.
	ver=$(od -An -tu4 -j8 -N4 "$tmp/real" | tr -d ' ')
	refused 2 "live-counter file of format version 2; this multisend-stat reads version $ver" \
		"$tmp/v2"
	cp "$tmp/real" "$tmp/layout"
	patch "$tmp/layout" 16 12345 # slot_size
	refused 2 'unexpected layout' "$tmp/layout"
	head -c 100000 "$tmp/real" >"$tmp/short"
	refused 2 'live-counter file cut short (100000 of' "$tmp/short"
	# One bad file among good ones: nothing is shown.
	refused 2 'not a libmultisend live-counter file' "$tmp/real" "$tmp/text"
	# Arguments.
	refused 2 'usage:' --interval 100
	refused 2 '--interval must be a whole number' --interval 5 "$tmp/real"
	refused 2 '--count must be a whole number' --count 0 "$tmp/real"
	# Only ever read.
	for f in text zeros v2 layout short; do
		[ -s "$tmp/$f" ] || fail "$f emptied"
	done
	patch "$tmp/v2" 8 4 # back to this version
	cmp -s "$tmp/real" "$tmp/v2" || fail "multisend-stat changed a file it refused"
	echo "PASS: multisend-stat refuses what is not a live-counter file of its version"
}

# ---------------------------------------------------------------------------------------------

replace_test() { # PUBLISHER STAT
	pub=$1 stat=$2
	need python3
	need_exe "$pub" "$stat"
	for i in 1 2 3; do
		"$pub" --control 0 --count "$((i * 10))" --rate 0 --stats-shm "$tmp/f$i-%p" \
			>"$tmp/pub$i" 2>&1 || { show "$tmp/pub$i"; fail "md-publisher exited with $?"; }
	done
	set -- "$tmp"/f1-* "$tmp"/f2-* "$tmp"/f3-*
	[ $# = 3 ] || fail "expected three live-counter files: $*"
	f1=$1 f2=$2 f3=$3
	p1=${f1##*-} p2=${f2##*-} p3=${f3##*-}
	# Each change waits until the reader has shown the state before it: no step depends on
	# how fast anything runs. (--count keeps it from stopping at the first whole file of a
	# publisher that is gone; SIGTERM ends it, which must be a clean end.)
	cp "$f1" "$tmp/watched"
	bg "$stat" --json --interval 50 --count 1000000 "$tmp/watched" >"$tmp/out" 2>"$tmp/err"
	statpid=$bgpid
	wait_line "$tmp/out" "\"pid\":$p1," "$statpid" 30 ||
		{ show "$tmp/err"; fail "multisend-stat did not start"; }
	: >"$tmp/watched"          # truncated under it
	wait_line "$tmp/out" '"error"' "$statpid" 30 ||
		{ show "$tmp/err"; fail "multisend-stat did not see the file truncated"; }
	cat "$f2" >"$tmp/watched"  # the same file, a new owner
	wait_line "$tmp/out" "\"pid\":$p2," "$statpid" 30 ||
		{ show "$tmp/err"; fail "multisend-stat did not see the new owner"; }
	cp "$f3" "$tmp/new"
	mv "$tmp/new" "$tmp/watched" # another file under the same name
	wait_line "$tmp/out" "\"pid\":$p3," "$statpid" 30 ||
		{ show "$tmp/err"; fail "multisend-stat did not follow the renamed file"; }
	kill -TERM "$statpid"
	wait "$statpid" || { show "$tmp/err"; fail "multisend-stat: exit $?"; }
	check "$tmp/out" "j[0]['pid'] == $p1" "j[-1]['pid'] == $p3" "st[-1] == 'closed'" \
		"any('error' in o for o in j)" "any(o.get('pid') == $p2 for o in j)"

	# Then as fast as it can be done, read every 10 ms: cut to nothing, to a page, rewritten.
	cp "$f1" "$tmp/watched"
	# (The publishers are gone: --count keeps it from stopping at the first whole file. It is
	# stopped by SIGTERM, which must be a clean end.)
	bg "$stat" --json --interval 10 --count 100000 "$tmp/watched" >"$tmp/out" 2>"$tmp/err"
	statpid=$bgpid
	wait_line "$tmp/out" '"pid"' "$statpid" 10 ||
		{ show "$tmp/err"; fail "multisend-stat did not start"; }
	for i in $(seq 1 150); do
		: >"$tmp/watched"
		cat "$f2" >"$tmp/watched"
		head -c 5000 "$f2" >"$tmp/watched"
		cat "$f2" >"$tmp/watched"
	done
	# Two more lines: the last is a read begun after the last rewrite (and at least 20).
	_n=$(($(wc -l <"$tmp/out") + 2))
	[ "$_n" -ge 20 ] || _n=20
	wait_count "$tmp/out" "$_n" "$statpid" 30 ||
		{ show "$tmp/err"; fail "multisend-stat, hammered, stopped writing lines"; }
	kill -TERM "$statpid"
	wait "$statpid" || { show "$tmp/err"; fail "multisend-stat, hammered: exit $?"; }
	check "$tmp/out" "len(j) >= 20" "j[-1]['pid'] == $p2" "any('error' in o for o in j)"
	echo "PASS: multisend-stat follows a file truncated, rewritten and replaced"
}

# ---------------------------------------------------------------------------------------------

# as_nobody COMMAND...: run as uid/gid 65534 with no groups.
as_nobody() {
	setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}

need_second_user() {
	[ "$(id -u)" = 0 ] || skip "needs root, to act as a second user"
	need setpriv python3
	as_nobody true 2>/dev/null || skip "setpriv cannot switch to uid 65534 here"
	# A python3 the second user can run (not one under root's home).
	py=
	for _p in /usr/bin/python3 /usr/local/bin/python3 "$(command -v python3)"; do
		if [ -x "$_p" ] && as_nobody "$_p" -c pass 2>/dev/null; then
			py=$_p
			break
		fi
	done
	[ -n "$py" ] || skip "no python3 that uid 65534 can run"
	# The scratch directory must be reachable by the second user.
	chmod 0711 "$tmp"
}

# hold NAME COMMAND...: run COMMAND (which prints "held" when it is ready, then reads a line
# from its standard input) in the background, until release NAME writes that line.
hold() {
	_h=$1
	shift
	mkfifo "$tmp/$_h.fifo"
	exec 7<>"$tmp/$_h.fifo" # read-write: opening does not wait for the other end
	# (Not through bg: an asynchronous command's own redirection is what gives it the fifo.)
	"$@" <&7 >"$tmp/$_h.out" 2>&1 &
	bgpid=$!
	pids="$pids $bgpid"
	eval "${_h}_pid=\$bgpid"
	wait_line "$tmp/$_h.out" '^held' "$bgpid" 20 || { show "$tmp/$_h.out"; fail "$_h did not start"; }
}

release() {
	echo release >&7
	eval "wait \$${1}_pid"
	_rc=$?
	exec 7>&-
	return $_rc
}

lockout_test() { # PUBLISHER STAT
	pub=$1 stat=$2
	need_exe "$pub" "$stat"
	need_second_user
	d=$tmp/shared
	mkdir "$d" && chmod 0755 "$d"
	"$pub" --control 0 --count 10 --rate 0 --stats-shm "$d/live" >"$tmp/pub1" 2>&1 ||
		{ show "$tmp/pub1"; fail "md-publisher exited with $?"; }
	[ "$(stat -c %a "$d/live")" = 644 ] || fail "the file is not mode 0644"
	# The second user opens the stale file read-only and takes every lock a reader can.
	hold locker as_nobody "$py" -c '
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_SH)
fcntl.lockf(fd, fcntl.LOCK_SH)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))
print("held", flush=True)
sys.stdin.readline()' "$d/live"
	bg "$pub" --control 0 --count 20 --rate 0 --stats-shm "$d/live" >"$tmp/pub2" 2>&1
	pub2=$bgpid
	wait "$pub2" || { show "$tmp/pub2"; fail "md-publisher exited with $?"; }
	show "$tmp/pub2"
	if grep -q 'live counters not published' "$tmp/pub2"; then
		fail "a reader's lock stopped the owner's publisher"
	fi
	"$stat" --json --count 1 --interval 10 "$d/live" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat: exit $?"; }
	check "$tmp/out" "len(j) == 1" "j[0]['pid'] == $pub2" "st == ['closed']" \
		"j[0]['alive'] is False"
	release locker
	echo "PASS: another user's read locks on a stale file did not stop the owner publishing"
}

planted_test() { # PUBLISHER STAT
	pub=$1 stat=$2
	need_exe "$pub" "$stat"
	need_second_user
	[ -d /dev/shm ] || skip "no /dev/shm"
	"$pub" --control 0 --count 10 --rate 0 --stats-shm "$tmp/genuine" >"$tmp/pub" 2>&1 ||
		{ show "$tmp/pub"; fail "md-publisher exited with $?"; }
	chmod 0644 "$tmp/genuine"
	# A process of root's that publishes nothing (the sleep is the victim, not a wait).
	bg sleep 600
	victim=$bgpid
	planted=/dev/shm/multisend-$victim
	[ ! -e "$planted" ] || skip "$planted exists already"
	trap 'rm -f "$planted"; harness_cleanup' EXIT
	# The second user plants a copy naming the victim, and holds a write lock on it, as a
	# live owner would.
	hold planter as_nobody "$py" -c '
import fcntl, os, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
data[28:32] = struct.pack("<i", int(sys.argv[3]))
data[120:128] = bytes(8) # pid_start: unknown
fd = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, data)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("held", flush=True)
sys.stdin.readline()
os.unlink(sys.argv[2])' "$tmp/genuine" "$planted" "$victim"
	"$stat" --json --count 1 --interval 10 "$victim" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	show "$tmp/err"
	[ "$rc" = 2 ] || { show "$tmp/out"; release planter; fail "multisend-stat $victim: exit $rc, not 2"; }
	grep -q "belongs to uid 65534, not to the user of process $victim (uid 0)" "$tmp/err" ||
		{ release planter; fail "no reason given for refusing the planted file"; }
	[ ! -s "$tmp/out" ] || { release planter; fail "the planted file was shown"; }
	"$stat" --json --count 1 --interval 10 "$planted" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	release planter
	[ "$rc" = 0 ] || { show "$tmp/err"; fail "multisend-stat $planted: exit $rc"; }
	# Read by its name, it is a file with a live owner (the second user's lock), but not the
	# victim's: /proc shows the victim running as another user than the file's.
	check "$tmp/out" "len(j) == 1" "j[0]['pid'] == $victim" "j[0]['alive'] is True" \
		"j[0]['pid_verified'] is False"
	kill "$victim"
	echo "PASS: a file planted by another user is not shown as a process's live counters"
}

names_test() { # PUBLISHER STAT
	pub=$1 stat=$2
	need_exe "$pub" "$stat"
	need python3 script
	"$pub" --control 0 --count 10 --rate 0 --stats-shm "$tmp/genuine" >"$tmp/pub" 2>&1 ||
		{ show "$tmp/pub"; fail "md-publisher exited with $?"; }
	# Hostile names: the program's (header offset 40), slot 0's (its offset 24) and its first
	# counters' (offset 56, 32 bytes each).
	# The slot's layout from lib/obs/shm-format.h (the counters' and histograms' counts), so
	# that a format with more counters needs no edit here.
	fmt=$(dirname "$0")/../../lib/obs/shm-format.h
	python3 - "$tmp/genuine" "$tmp/evil" "$fmt" <<'PY' || fail "could not write the file"
import re, struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
fmt = open(sys.argv[3]).read()
def define(name):
    return int(re.search(r"#define %s (\d+)u" % name, fmt).group(1))
C, H, NAME = define("MS_SHM_COUNTERS"), define("MS_SHM_HISTS"), define("MS_SHM_NAME")
hs, ss = struct.unpack_from("<II", d, 12)
def put(off, b, n):
    d[off:off + n] = b.ljust(n, b"\0")[:n]
put(40, b"evil\x1b[H\x1b[2J", 64)
s0 = hs
put(s0 + 24, b"\x1b]0;pwned\x07\x1b[2J", 32)
put(s0 + 56, b"fan\xffouts\xc3\xa9", 32)          # a stray byte, then U+00E9
put(s0 + 56 + 32, b"\x9b31m\xc2\x9b31m\\", 32)   # C1 CSI raw and as UTF-8, a backslash
put(s0 + 56 + 64, b"\xe2\x82\xac\xf0\x9f\x98\x80\xed\xa0\x80\xc0\xaf", 32)
# and values for them (the screen shows non-zero counters): counter[] follows the
# MS_SHM_COUNTERS counter names, MS_SHM_HISTS histogram names and updated_ns
struct.pack_into("<3Q", d, s0 + 24 + NAME + C * NAME + H * NAME + 8, 1, 2, 3)
open(sys.argv[2], "wb").write(d)
PY
	"$stat" --json --count 1 --interval 10 "$tmp/evil" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat --json: exit $?"; }
	python3 - "$tmp/out" <<'PY' || { show "$tmp/out"; fail "the JSON output"; }
import json, sys
raw = open(sys.argv[1], "rb").read()
assert not any(b < 0x20 and b != 0x0a or b == 0x7f for b in raw), "a raw control byte"
o = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 raises
s = o["slots"][0]
assert o["program"] == "evil\x1b[H\x1b[2J", o["program"]
assert s["name"] == "\x1b]0;pwned\x07\x1b[2J", s["name"]
names = list(s["counters"])
assert names[0] == "fan\ufffdouts\u00e9", names[0]
assert names[1] == "\ufffd31m\u009b31m\\", names[1]
assert names[2] == "\u20ac\U0001f600\ufffd\ufffd\ufffd\ufffd\ufffd", names[2]
assert "\\u009b" in raw.decode() and "\\u001b" in raw.decode()
PY
	TERM=${TERM:-dumb} script -qec "$stat --interval 10 --count 1 $tmp/evil" /dev/null \
		>"$tmp/screen" 2>&1 || { show "$tmp/screen"; fail "multisend-stat on a terminal"; }
	python3 - "$tmp/screen" <<'PY' || { cat -v "$tmp/screen"; fail "the screen"; }
import sys
raw = open(sys.argv[1], "rb").read().replace(b"\r", b"")
assert raw.count(b"\x1b[H\x1b[2J") == 1, "not one redraw"
rest = raw.replace(b"\x1b[H\x1b[2J", b"")
assert not any(b < 0x20 and b != 0x0a or b == 0x7f for b in rest), "a raw control byte"
text = rest.decode("utf-8")
assert not any(0x80 <= ord(c) <= 0x9f for c in text), "a C1 control"
for w in [r'"\x1b]0;pwned\x07\x1b[2J"', r"evil\x1b[H\x1b[2J", r"fan\xffouts" + "\u00e9",
          r"\x9b31m\u009b31m\\", "\u20ac\U0001f600" + r"\xed\xa0\x80\xc0\xaf"]:
    assert w in text, w
PY
	sed -n '/pid/,$s/^/  screen: /p' "$tmp/screen" | tr -d '\r' | head -n 6
	# In the metrics: names made metric names, label values valid UTF-8 without a control.
	if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
		"$stat" --openmetrics "$tmp/evil" >"$tmp/om" 2>"$tmp/err" ||
			{ show "$tmp/err"; fail "multisend-stat --openmetrics: exit $?"; }
		/usr/bin/python3 - "$tmp/om" <<'PY' || { cat -v "$tmp/om"; fail "the metrics"; }
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
raw = open(sys.argv[1], "rb").read()
assert not any(b < 0x20 and b != 0x0a or b == 0x7f for b in raw), "a raw control byte"
fams = {f.name: f for f in om(raw.decode("utf-8"))}
s = fams["multisend_fan_outs__"].samples[0]
assert s.name == "multisend_fan_outs___total" and s.value == 1, s
assert s.labels["context"] == "\ufffd]0;pwned\ufffd\ufffd[2J", s.labels
assert s.labels["program"] == "evil\ufffd[H\ufffd[2J", s.labels
assert fams["multisend__31m__31m_"].samples[0].value == 2
PY
	fi
	echo "PASS: names with escape sequences and stray bytes are escaped, on the screen and in JSON"
}

livefile_test() { # LIVEFILE SHIM STAT
	lf=$1 shim=$2 stat=$3
	need python3
	need_exe "$lf" "$stat"
	"$lf" fds "$tmp" || fail "livefile fds"
	"$lf" damage "$tmp" || fail "livefile damage"
	"$lf" truncate "$tmp" || fail "livefile truncate"
	[ -f "$shim" ] || skip "$shim is not built"
	# An AddressSanitizer build of the shim needs the ASan runtime first in LD_PRELOAD (as in
	# tests/shim/shim-test.sh).
	preload=$shim
	_asan=$(ldd "$shim" 2>/dev/null | sed -n 's/.*libasan[^ ]* => \([^ ]*\).*/\1/p' | head -n1)
	if [ -n "$_asan" ]; then
		preload="$_asan $shim"
		export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	fi
	# The shim and the program's libmultisend in one file.
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=metrics MULTISEND_STATS_SHM=$tmp/shared \
		"$lf" shared "$tmp" >"$tmp/shared.out" 2>"$tmp/shared.err" ||
		{ show "$tmp/shared.out" "$tmp/shared.err"; fail "livefile shared"; }
	show "$tmp/shared.out" "$tmp/shared.err"
	if grep -q 'live counters' "$tmp/shared.err"; then
		fail "a warning about the live counters"
	fi
	calls=$(sed -n 's/^livefile shared: calls \([0-9]*\)$/\1/p' "$tmp/shared.out")
	"$stat" --json --count 1 --interval 10 "$tmp/shared" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat: exit $?"; }
	python3 - "$tmp/out" "$calls" <<'PY' || { show "$tmp/out"; fail "the shared file"; }
import json, sys
o = json.loads(open(sys.argv[1]).read())
names = [s["name"] for s in o["slots"]]
assert len(names) == 3 and names[1] == "shim", names
shim = o["slots"][1]
assert shim["state"] == "closed" and shim["stale"] is False, (shim["state"], shim["stale"])
assert shim["counters"]["calls"] == int(sys.argv[2]), (shim["counters"]["calls"], sys.argv[2])
assert all(s["state"] == "closed" for s in o["slots"])
PY
	# The shared file truncated: the shim and the program each live on and put their slots
	# into one new file, whose final values multisend-stat reads.
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=metrics MULTISEND_STATS_SHM=$tmp/shared-trunc \
		"$lf" shared-trunc "$tmp" >"$tmp/strunc.out" 2>"$tmp/strunc.err" ||
		{ show "$tmp/strunc.out" "$tmp/strunc.err"; fail "livefile shared-trunc"; }
	show "$tmp/strunc.out"
	calls=$(sed -n 's/^livefile shared-trunc: calls \([0-9]*\)$/\1/p' "$tmp/strunc.out")
	"$stat" --json --count 1 --interval 10 "$tmp/shared-trunc" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat: exit $?"; }
	python3 - "$tmp/out" "$calls" <<'PY' || { show "$tmp/out"; fail "the renewed shared file"; }
import json, sys
o = json.loads(open(sys.argv[1]).read())
names = [s["name"] for s in o["slots"]]
assert len(names) == 2 and names[0].startswith("ctx ") and names[1] == "shim", names
shim = o["slots"][1]
assert shim["stale"] is False and shim["counters"]["calls"] == int(sys.argv[2]), \
    (shim["counters"]["calls"], sys.argv[2])
assert all(s["state"] == "closed" for s in o["slots"])
PY
	# The program's SIGBUS handler is its own to set and read under the shim's.
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=metrics MULTISEND_STATS_SHM=$tmp/sigbus \
		"$lf" shim-sigbus "$tmp" >"$tmp/sigbus.out" 2>"$tmp/sigbus.err" ||
		{ show "$tmp/sigbus.out" "$tmp/sigbus.err"; fail "livefile shim-sigbus"; }
	show "$tmp/sigbus.out"
	# The shim's exec path leaves the program's descriptors alone.
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=metrics MULTISEND_STATS_SHM=$tmp/exec-%p \
		"$lf" exec "$tmp" >"$tmp/exec.out" 2>"$tmp/exec.err" ||
		{ show "$tmp/exec.out" "$tmp/exec.err"; fail "livefile exec"; }
	show "$tmp/exec.out"
	echo "PASS: no descriptor kept, a damaged slot harmless, a truncated file survived and made" \
		"again (also shared with the shim), the shim's slot kept in a shared file"
}

# The preload list for the shim (an AddressSanitizer build of it needs the ASan runtime first,
# as in tests/shim/shim-test.sh): sets $preload and $asan.
shim_preload() {
	preload=$1
	asan=$(ldd "$1" 2>/dev/null | sed -n 's/.*libasan[^ ]* => \([^ ]*\).*/\1/p' | head -n1)
	if [ -n "$asan" ]; then
		preload="$asan $1"
		export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	fi
}

rawfork_test() { # LIVEEDGE SHIM STAT
	le=$1 shim=$2 stat=$3
	need python3
	need_exe "$le" "$stat"
	[ -f "$shim" ] || skip "$shim is not built"
	shim_preload "$shim"
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=metrics MULTISEND_STATS_SHM=$tmp/rawfork \
		"$le" rawfork "$tmp" >"$tmp/rawfork.out" 2>"$tmp/rawfork.err" ||
		{ show "$tmp/rawfork.out" "$tmp/rawfork.err"; fail "liveedge rawfork"; }
	show "$tmp/rawfork.out" "$tmp/rawfork.err"
	grep -q 'live counters' "$tmp/rawfork.err" && fail "a warning about the live counters"
	calls=$(sed -n 's/^liveedge rawfork: calls \([0-9]*\)$/\1/p' "$tmp/rawfork.out")
	"$stat" --json --count 1 --interval 10 "$tmp/rawfork" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat: exit $?"; }
	python3 - "$tmp/out" "$calls" <<'PY' || { show "$tmp/out"; fail "the parent's file"; }
import json, sys
o = json.loads(open(sys.argv[1]).read())
names = [s["name"] for s in o["slots"]]
assert len(names) == 2 and names[0].startswith("ctx ") and names[1] == "shim", names
assert all(s["state"] == "closed" and s["stale"] is False for s in o["slots"]), o["slots"]
assert o["slots"][0]["counters"]["fanouts"] == 7, o["slots"][0]["counters"]
shim = o["slots"][1]["counters"]
assert shim["calls"] == int(sys.argv[2]), (shim["calls"], sys.argv[2])
PY
	echo "PASS: children made without atfork handlers leave the parent's file alone and exit 0"
}

noproc_test() { # LIVEEDGE
	le=$1
	need unshare
	need_exe "$le"
	[ "$(id -u)" = 0 ] || skip "not root: no mount namespace"
	unshare -m true 2>/dev/null || skip "unshare -m is not allowed here"
	# Only this process's /proc/PID/fd hidden: the rest of /proc is there (ASan and valgrind
	# need /proc/self/maps).
	unshare -m sh -c 'mount -t tmpfs none /proc/$$/fd || exit 77; exec "$0" noproc "$1"' \
		"$le" "$tmp" || fail "liveedge noproc (/proc/PID/fd hidden): exit $?"
	# No /proc at all, unless the program is an ASan build (its runtime needs /proc).
	if ldd "$le" 2>/dev/null | grep -q libasan; then
		echo "(an ASan build: not run without /proc at all)"
	else
		unshare -m sh -c 'mount -t tmpfs none /proc || exit 77; exec "$0" noproc "$1"' \
			"$le" "$tmp" || fail "liveedge noproc (no /proc): exit $?"
	fi
	echo "PASS: live-counter files made and replaced without /proc/self/fd"
}

pidns_test() { # LIVEEDGE STAT
	le=$1 stat=$2
	need unshare python3
	need_exe "$le" "$stat"
	[ "$(id -u)" = 0 ] || skip "not root: no PID namespace"
	unshare --pid --fork true 2>/dev/null || skip "unshare --pid is not allowed here"
	hold nspub unshare --pid --fork --kill-child "$le" hold "$tmp/ns"
	"$stat" --json --count 1 --interval 10 "$tmp/ns" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	show "$tmp/err"
	[ "$rc" = 0 ] || { release nspub; fail "multisend-stat: exit $rc"; }
	inner=$(sed -n 's/^held \([0-9]*\)$/\1/p' "$tmp/nspub.out")
	( check "$tmp/out" "len(j) == 1" "j[0]['pid'] == $inner" "j[0]['alive'] is True" \
		"j[0]['pid_verified'] is False" "st == ['live']" ) || { release nspub; exit 1; }
	release nspub || { show "$tmp/nspub.out"; fail "the publisher in the PID namespace failed"; }
	"$stat" --json --count 1 --interval 10 "$tmp/ns" >"$tmp/out" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat after: exit $?"; }
	check "$tmp/out" "len(j) == 1" "j[0]['alive'] is False" "st == ['closed']"
	echo "PASS: a publisher in another PID namespace is shown alive (pid $inner there)"
}

# ---------------------------------------------------------------------------------------------

# http_get URL OUT [ACCEPT]: the body of GET URL into OUT (python's urllib).
http_get() {
	/usr/bin/python3 -c 'import sys, urllib.request as u
r = u.Request(sys.argv[1], headers={"Accept": sys.argv[3]} if len(sys.argv) > 3 else {})
open(sys.argv[2], "wb").write(u.urlopen(r, timeout=30).read())' "$@"
}

# serve NAME ARGS...: multisend-stat --listen ARGS in the background; sets $srvpid and $url
# (the address it printed: port 0 lets it choose).
serve() {
	_n=$1
	shift
	bg "$stat" --listen "$@" >"$tmp/$_n.out" 2>"$tmp/$_n.err"
	srvpid=$bgpid
	wait_line "$tmp/$_n.err" '^multisend-stat: serving http://.*/metrics$' "$srvpid" 30 ||
		{ show "$tmp/$_n.err"; fail "multisend-stat --listen $* did not start"; }
	url=$(sed -n 's|^multisend-stat: serving \(http://.*/metrics\)$|\1|p' "$tmp/$_n.err")
}

# stop_server: SIGTERM is a clean end (exit 0), and the server said nothing on stderr but
# its address.
stop_server() {
	kill -TERM "$srvpid"
	wait "$srvpid" || { show "$tmp/$1.err"; fail "multisend-stat --listen: exit $?"; }
	[ "$(grep -cv '^multisend-stat: serving' "$tmp/$1.err")" = 0 ] ||
		{ show "$tmp/$1.err"; fail "multisend-stat --listen wrote more on stderr"; }
}

metrics_test() { # PUBLISHER SUBSCRIBER STAT
	pub=$1 sub=$2 stat=$3
	need timeout
	need_exe "$pub" "$sub" "$stat"
	py=/usr/bin/python3
	[ -x "$py" ] || skip "no /usr/bin/python3"
	"$py" -c 'import prometheus_client' 2>/dev/null ||
		skip "python3-prometheus-client is not installed (scripts/install-deps)"
	[ -d /dev/shm ] && [ -w /dev/shm ] || skip "/dev/shm is not writable"
	checker=$(dirname "$0")/metrics-check.py
	# The publisher's file goes in /dev/shm, where --openmetrics and --listen look without an
	# argument, under a name of this test's own, removed at exit.
	shm=/dev/shm/multisend-stattest-$(basename "$tmp")
	trap 'rm -f "$shm"-*; harness_cleanup' EXIT
	# A feed that runs until the live scrapes are done (then SIGTERM: the publisher sends END
	# after its last tick), however slow the machine: no timing.
	count=1000000000 subs=2 size=100
	bg "$pub" --control 0 --subscribers "$subs" --count "$count" --rate 5000 --size "$size" \
		--ts-sample 4 --stats-shm "$shm-%p" >"$tmp/publisher" 2>"$tmp/publisher.err"
	pubpid=$bgpid
	wait_line "$tmp/publisher" '^control port [0-9]' "$pubpid" 10 ||
		{ show "$tmp/publisher" "$tmp/publisher.err"; fail "md-publisher did not start"; }
	port=$(sed -n 's/^control port \([0-9]*\)$/\1/p' "$tmp/publisher")
	subpids=
	for i in 1 2; do
		bg "$sub" --control "127.0.0.1:$port" --timeout 60 --expect-end \
			>"$tmp/subscriber$i" 2>&1
		subpids="$subpids $bgpid"
	done
	wait_line "$tmp/publisher.err" 'publishing to' "$pubpid" 30 ||
		{ show "$tmp/publisher.err"; fail "md-publisher did not start publishing"; }
	file=$shm-$pubpid
	[ -s "$file" ] || fail "md-publisher made no $file"
	# Until its first tick is in the file ("publishing to" comes before it).
	_t=0
	until "$stat" --json --count 1 --interval 10 "$file" 2>/dev/null |
		"$py" -c 'import json, sys; sys.exit(json.load(sys.stdin)["slots"][0]["counters"]["fanouts"] < 1)'; do
		_t=$((_t + 1))
		[ "$_t" -lt 400 ] || fail "no tick in $file after 20 s"
		sleep 0.05
	done

	# While it runs: found in /dev/shm (no argument), one scrape on stdout and one by HTTP.
	"$stat" --openmetrics >"$tmp/live.om" 2>"$tmp/live.err" ||
		{ show "$tmp/live.err"; fail "multisend-stat --openmetrics: exit $?"; }
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended before it was scraped"
	"$py" "$checker" live "$tmp/live.om" "$file" "$pubpid" "$count" ||
		{ grep "$file" "$tmp/live.om" | head -n 5; fail "the live scrape"; }
	serve discover 127.0.0.1:0
	http_get "$url" "$tmp/live2.om" application/openmetrics-text ||
		fail "GET $url: exit $?"
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended before it was scraped"
	"$py" "$checker" live "$tmp/live2.om" "$file" "$pubpid" "$count" || fail "the live GET"

	# The feed ends well, undisturbed, at the publisher's next tick.
	kill -TERM "$pubpid"
	wait "$pubpid"
	rc=$?
	# (An interrupted feed exits 1, by md-publisher's rule, after END and its summary.)
	[ "$rc" = 1 ] && grep -q '^md-publisher: interrupted after' "$tmp/publisher.err" ||
		{ show "$tmp/publisher" "$tmp/publisher.err"; fail "md-publisher: exit $rc"; }
	count=$(sed -n 's/^md-publisher: .*, ticks \([0-9]*\), destinations .*/\1/p' "$tmp/publisher")
	[ -n "$count" ] && [ "$count" -gt 0 ] || { show "$tmp/publisher"; fail "no ticks sent"; }
	for p in $subpids; do
		wait "$p" || { show "$tmp"/subscriber*; fail "md-subscriber: exit $?"; }
	done
	show "$tmp/publisher"
	grep -q "^md-publisher: .*subscribers $subs .*, ticks $count, destinations accepted [0-9]*, failures 0," \
		"$tmp/publisher" || fail "md-publisher did not send every tick without failure"
	for i in 1 2; do
		grep -q "received $count, gaps 0 (missing 0), duplicates 0," "$tmp/subscriber$i" ||
			{ show "$tmp/subscriber$i"; fail "subscriber $i did not get every tick once"; }
	done
	accepted=$(sed -n 's/.*destinations accepted \([0-9]*\),.*/\1/p' "$tmp/publisher")

	# Gone (its lock went with it): no longer found, by a new scrape or by the running server,
	# which looks again for every request.
	"$stat" --openmetrics >"$tmp/gone.om" || fail "multisend-stat --openmetrics: exit $?"
	"$py" "$checker" absent "$tmp/gone.om" "$file" || fail "a gone publisher discovered"
	http_get "$url" "$tmp/gone2.om" application/openmetrics-text || fail "GET $url: exit $?"
	"$py" "$checker" absent "$tmp/gone2.om" "$file" || fail "a gone publisher served"
	stop_server discover

	# Named, the finished file: every counter exactly what the publisher reported.
	"$stat" --json --count 1 --interval 10 "$file" >"$tmp/final.json" 2>/dev/null ||
		fail "multisend-stat --json: exit $?"
	"$stat" --openmetrics "$file" >"$tmp/final.om" 2>"$tmp/final.err" ||
		{ show "$tmp/final.err"; fail "multisend-stat --openmetrics FILE: exit $?"; }
	"$py" "$checker" final "$tmp/final.om" "$file" "$tmp/final.json" "$count" "$subs" \
		"$size" "$accepted" || fail "the final scrape"
	# The slot's backend is the one the publisher says it ended on.
	b=$(sed -n 's/^md-publisher: backend \([a-z_]*\),.*/\1/p' "$tmp/publisher")
	grep -q "\"name\":\"ctx 1\",\"backend\":\"$b\"," "$tmp/final.json" ||
		{ show "$tmp/final.json"; fail "the slot's backend is not the publisher's ($b)"; }
	for w in _fanouts_total _call_last_seconds_count \
		'_call_last_seconds_bucket.*le="0.000016383"'; do
		grep -m 1 "^multisend$w" "$tmp/final.om" | sed 's/^/  openmetrics: /'
	done

	# The same by HTTP: both formats, the errors, hostile clients.
	serve named 0 "$file"
	case $url in http://127.0.0.1:[1-9]*) ;; *) fail "--listen 0 served at $url" ;; esac
	"$py" "$checker" http "$url" "$file" "$tmp/final.json" "$count" "$subs" "$size" \
		"$accepted" || { show "$tmp/named.err"; fail "the HTTP checks"; }
	kill -0 "$srvpid" 2>/dev/null || fail "multisend-stat --listen died"
	stop_server named
	# IPv6 loopback, when there is one.
	if [ -r /proc/net/if_inet6 ] && grep -q '^0\{31\}1 ' /proc/net/if_inet6; then
		serve v6 '[::1]:0' "$file"
		case $url in http://\[::1\]:[1-9]*) ;; *) fail "--listen [::1]:0 served at $url" ;; esac
		http_get "$url" "$tmp/v6.om" application/openmetrics-text || fail "GET $url: exit $?"
		"$py" "$checker" final "$tmp/v6.om" "$file" "$tmp/final.json" "$count" "$subs" \
			"$size" "$accepted" || fail "the scrape over IPv6"
		stop_server v6
	else
		echo "  (no IPv6 loopback: [::1] not tried)"
	fi
	# Bad arguments: exit 2, a reason, nothing served.
	for a in "nonsense" "127.0.0.1:70000" ":80" "[::1]80" "127.0.0.1:"; do
		"$stat" --listen "$a" "$file" >"$tmp/out" 2>"$tmp/err"
		rc=$?
		[ "$rc" = 2 ] && grep -q -e "--listen" "$tmp/err" ||
			{ show "$tmp/err"; fail "--listen $a: exit $rc"; }
	done
	for a in "--openmetrics --json" "--openmetrics --listen 0" "--listen 0 --count 2" \
		"--openmetrics --interval 100"; do
		# shellcheck disable=SC2086 # the options are words
		"$stat" $a "$file" >"$tmp/out" 2>"$tmp/err"
		rc=$?
		[ "$rc" = 2 ] && [ ! -s "$tmp/out" ] || { show "$tmp/err"; fail "$a: exit $rc"; }
	done
	echo "PASS: --openmetrics and --listen export md-publisher's counters and histograms exactly"
}

metrics_shim_test() { # SHIM LEGACY RECEIVER STAT
	shim=$1 legacy=$2 recv=$3 stat=$4
	need_exe "$shim" "$legacy" "$recv" "$stat"
	py=/usr/bin/python3
	[ -x "$py" ] || skip "no /usr/bin/python3"
	"$py" -c 'import prometheus_client' 2>/dev/null ||
		skip "python3-prometheus-client is not installed (scripts/install-deps)"
	n=8 m=500 size=64
	# A receiver on n ports from a random base (tried again when one is taken), which checks
	# every datagram and exits 0 once each port has all m.
	tries=0
	while :; do
		tries=$((tries + 1))
		r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
		base=$((10000 + r % 20000))
		bg "$recv" --listen "127.0.0.1:$base" --subscribers "$n" --messages "$m" \
			--idle-timeout 10 --size "$size" --identical >"$tmp/receiver" 2>"$tmp/receiver.err"
		recvpid=$bgpid
		wait_line "$tmp/receiver" '^ready$' "$recvpid" 10 && break
		wait "$recvpid"
		[ $? = 3 ] && [ "$tries" -lt 20 ] && continue
		show "$tmp/receiver.err"
		fail "fanout-receiver did not start"
	done
	shim_preload "$shim"
	LD_PRELOAD=$preload MULTISEND_PRELOAD_MODE=batch \
		MULTISEND_STATS="$tmp/report.json" MULTISEND_STATS_SHM="$tmp/shim-%p" \
		"$legacy" --dest "127.0.0.1:$base" --subscribers "$n" --messages "$m" --rate 0 \
		--size "$size" --identical >"$tmp/legacy" 2>&1 ||
		{ show "$tmp/legacy"; fail "legacy-fanout: exit $?"; }
	wait "$recvpid" || { show "$tmp/receiver" "$tmp/receiver.err"; fail "receiver: exit $?"; }
	set -- "$tmp"/shim-*
	[ $# = 1 ] && [ -s "$1" ] || fail "the shim made no live-counter file: $*"
	file=$1
	"$stat" --openmetrics "$file" >"$tmp/shim.om" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat --openmetrics: exit $?"; }
	"$py" - "$tmp/shim.om" "$file" "$tmp/report.json" "$n" "$m" "$size" <<'PY' ||
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
text, path, report = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
n, m, size = (int(x) for x in sys.argv[4:7])
fams = {f.name: f for f in om(text)}
got = {s.name: s.value for f in fams.values() for s in f.samples
       if s.labels.get("file") == path and s.labels.get("context") == "shim"}
t = json.loads(open(report).read().splitlines()[0])["total"]
# What the receiver got, byte for byte: n x m datagrams of size bytes.
for k, want in (("calls", n * m), ("datagrams", n * m), ("bytes", n * m * size)):
    assert got["multisend_%s_total" % k] == want == t[k], (k, got.get(k), want, t[k])
# And every total of the shim's own exit report that the slot has.
for k in ("batched", "passed_through", "errors", "errors_at_flush", "syscalls", "fanout_runs",
          "fanout_destinations", "sendmmsg", "single_sends_at_flush"):
    assert got["multisend_%s_total" % k] == t[k], (k, got["multisend_%s_total" % k], t[k])
assert got["multisend_batched_total"] > 0, "nothing was batched"
assert got["multisend_slot_live"] == 0, "the shim's slot is still live"
print("  shim: " + ", ".join("%s %d" % (k[10:-6], got[k]) for k in sorted(got)
                              if k.endswith("_total") and got[k]))
PY
		{ show "$tmp/report.json"; fail "the shim's metrics"; }
	echo "PASS: the shim's slot in --openmetrics equals its exit report and what was received"
}

screen_test() { # PUBLISHER SUBSCRIBER STAT
	pub=$1 sub=$2 stat=$3
	need python3 script stty
	need_exe "$pub" "$sub" "$stat"
	# A feed stopped once the screens are taken (the publisher must be sending while they
	# are: rates are asserted; how fast the screens come is not).
	start_md "$pub" "$sub" --ts-sample 16
	# The terminal's size set on script's own terminal, as a user's would be.
	# (no quotes to keep: the paths are the build's and mktemp's)
	for v in "24 80 3" "12 60 2" "24 80 2 dests_failed,fanouts,bytes"; do
		set -- $v
		script -qec "stty rows $1 cols $2; $stat --interval 200 --count $3 \
			${4:+--counters $4} $file" /dev/null >"$tmp/screen-$1x$2${4:-}" 2>&1 ||
			{ show "$tmp/screen-$1x$2${4:-}"; fail "multisend-stat on a $1 x $2 terminal"; }
	done
	script -qec "stty rows 24 cols 80; $stat --counters fanouts,nosuch --count 1 $file; echo exit=\$?" \
		/dev/null >"$tmp/screen-bad" 2>&1
	kill -0 "$pubpid" 2>/dev/null || fail "md-publisher ended while it was watched"
	python3 - "$tmp" <<'PY' || fail "the screen"
import re, sys
d = sys.argv[1]
def frames(name, rows, cols, n):
    raw = open(d + "/" + name, "rb").read().decode("utf-8").replace("\r", "")
    parts = raw.split("\x1b[H\x1b[2J")[1:]
    assert len(parts) == n, "%s: %d redraws, not %d" % (name, len(parts), n)
    out = []
    for p in parts:
        lines = p.split("\n")
        assert lines[-1] == "", "%s: the cursor is not at a line's start" % name
        lines = lines[:-1]
        assert len(lines) <= rows - 1, "%s: %d lines on a %d-line terminal" % (name, len(lines), rows)
        for l in lines:
            assert len(l) <= cols - 1, "%s: %d columns: %r" % (name, len(l), l)
            assert "\x1b" not in l, l
        out.append(lines)
    for l in out[-1]:
        print("  %s | %s" % (name, l))
    return out
f80 = frames("screen-24x80", 24, 80, 3)
text = "\n".join(f80[-1])
for w in ["fanouts", "dests_accepted", "B/s", "call_last_ns", "interval",
          "counters at zero not shown"]:
    assert w in text, w
# fanouts at a rate above zero, with an SI prefix or none (how fast is the machine's business).
assert re.search(r"\bfanouts +\d[\d.]* *[kMG]? +[\d.]*[1-9][\d.]* [kMG]?/s", text), "no rate for fanouts"
assert "dests_failed" not in text, "a zero counter shown"
# A gauge has no rate, and AUTO's backend is shown by name, not by its number.
m = re.search(r"\bauto_backend +(\S+)( +[\d.]+ [kMG]?/s)?", text)
assert m and m.group(1) in ("loop", "sendmmsg", "io_uring", "xdp", "kfanout") and not m.group(2), \
    "auto_backend: %r" % (m and m.group(0))
# Per-interval percentiles: the interval's count of call_last_ns, beside the cumulative one.
# (a count of 1000 or more has an SI prefix: "1.34 k", two words)
h = [l for l in f80[-1] if l.split()[:1] == ["call_last_ns"]][0]
iv = h.split("|")[1].split()
assert h.count("|") == 1 and iv[0] not in ("0", "-") and iv[-2] != "-", h
# Two counters a line on 80 columns.
assert any(len(re.findall(r"[a-z_]+ +\d[\d.]* *[kMG]?B? +[\d.]+ [kMG]?B?/s", l)) == 2
           for l in f80[-1]), "not two counters a line"
# 12 x 60: fewer rows than non-zero counters: the last cell says how many more.
f60 = frames("screen-12x60", 12, 60, 2)
assert any(re.search(r"\.\.\. \d+ more: --counters", l) for l in f60[-1]), "no 'more' line"
# Chosen counters: those, in that order, zero or not, and no other.
fp = frames("screen-24x80dests_failed,fanouts,bytes", 24, 80, 2)
# (cells run down the first column, then the next: sorted by column, then line)
cells = sorted((m.start() > 2, i, m.group(1)) for i, l in enumerate(fp[-1])
               for m in re.finditer(r"\b(dests_\w+|fanouts|bytes|syscalls)\b +\d", l))
assert [c[2] for c in cells] == ["dests_failed", "fanouts", "bytes"], cells
bad = open(d + "/screen-bad").read()
assert "exit=2" in bad and "no slot has a counter 'nosuch'; there are: fanouts dests_attempted" in bad, bad
PY
	# Stopped: it frees its context (the slot closed) and exits 1, saying so.
	kill -INT "$pubpid"
	wait "$pubpid"
	rc=$?
	grep -q '^md-publisher: interrupted after [0-9]* ticks' "$tmp/publisher.err" && [ "$rc" = 1 ] ||
		{ show "$tmp/publisher.err"; fail "md-publisher interrupted: exit $rc"; }
	kill "$subpid" 2>/dev/null
	wait "$subpid"
	# Once the publisher is gone: it stops by itself, and says so after the screen, not in it;
	# and more files than fit (the same one 12 times): "N more files".
	script -qec "stty rows 24 cols 80; $stat --interval 100 $file" /dev/null \
		>"$tmp/screen-end" 2>&1 || { show "$tmp/screen-end"; fail "multisend-stat at the end"; }
	script -qec "stty rows 24 cols 80; $stat --interval 100 --count 1 $(for i in 1 2 3 4 5 6 \
		7 8 9 10 11 12; do printf '%s ' "$file"; done)" /dev/null >"$tmp/screen-many" 2>&1 ||
		{ show "$tmp/screen-many"; fail "multisend-stat with 12 files"; }
	python3 - "$tmp" "$pubpid" <<'PY' || fail "the screen at the end"
import sys
d, pid = sys.argv[1:]
for name, n in (("screen-end", 1), ("screen-many", 12)):
    raw = open(d + "/" + name, "rb").read().decode("utf-8").replace("\r", "")
    frames = raw.split("\x1b[H\x1b[2J")[1:]
    assert len(frames) == 1, (name, len(frames))
    msg = "publisher %s (md-publisher) has exited and closed all its slots" % pid
    lines = frames[0].split("\n")
    assert lines[-1] == "", (name, lines[-1])
    lines = lines[:-1]
    assert all(l.endswith(msg) for l in lines[-n:]), (name, lines[-n:])
    assert not any(l.endswith(msg) for l in lines[:-n]), (name, lines)
    lines = lines[:-n]
    assert len(lines) <= 23 and all(len(l) <= 79 for l in lines), (name, lines)
    assert "EXITED" in lines[1], lines[1]
    print("\n".join("  %s | %s" % (name, l) for l in lines[-3:]))
assert lines[-1] == "... 5 more files: a taller terminal", lines
PY
	echo "PASS: the screen fits 80 x 24 (and 60 x 12), with rates, chosen counters, per-interval percentiles"
}

# ---------------------------------------------------------------------------------------------
# Hostile files in /dev/shm (tests/stat/hostile.c writes them as an attacker would).

# plant NAME FILE ARGS...: hostile FILE ARGS (as the user before it: "as_nobody" or nothing),
# holding the file's write lock until the test ends (it blocks on the fifo on fd 6, which
# nobody writes; harness_cleanup kills it). Waits for its "held".
plant() {
	_pn=$1
	shift
	[ -p "$tmp/plant.fifo" ] || { mkfifo "$tmp/plant.fifo" && exec 6<>"$tmp/plant.fifo"; }
	"$@" <&6 >"$tmp/$_pn.out" 2>&1 &
	bgpid=$!
	pids="$pids $bgpid"
	wait_line "$tmp/$_pn.out" '^held' "$bgpid" 20 ||
		{ show "$tmp/$_pn.out"; fail "hostile $_pn did not start"; }
}

# skipped OMFILE REASON: the value of multisend_stat_files_skipped_total{reason=REASON}.
skipped() {
	sed -n "s/^multisend_stat_files_skipped_total{reason=\"$2\"} \([0-9]*\)$/\1/p" "$1"
}

# expect_skipped OMFILE REASON N: exactly N in a /dev/shm of this test's own
# (STAT_TEST_PRIVATE_SHM=1); at least N where the host's is shared (other files may be there).
expect_skipped() {
	_v=$(skipped "$1" "$2")
	[ -n "$_v" ] || { show "$1"; fail "no multisend_stat_files_skipped_total{reason=\"$2\"}"; }
	if [ "${STAT_TEST_PRIVATE_SHM:-}" = 1 ]; then
		[ "$_v" = "$3" ] || fail "files skipped for '$2': $_v, expected $3"
	else
		[ "$_v" -ge "$3" ] || fail "files skipped for '$2': $_v, expected $3 or more"
	fi
}

# series OMFILE REGEX FILE: how many samples match REGEX and have label file="FILE".
series() {
	grep -v '^#' "$1" | grep -e "$2" | grep -cF "file=\"$3\"" || true
}

# parse OMFILE: the Prometheus client's OpenMetrics parser takes it (when installed).
parse_om() {
	/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || return 0
	/usr/bin/python3 -c 'import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
list(om(open(sys.argv[1]).read()))' "$1" || fail "$1 is not valid OpenMetrics"
}

hostile_test() { # HOSTILE STAT
	hostile=$1 stat=$2
	need timeout python3
	need_exe "$hostile" "$stat"
	py=/usr/bin/python3
	[ -x "$py" ] || skip "no /usr/bin/python3"
	[ -d /dev/shm ] && [ -w /dev/shm ] || skip "/dev/shm is not writable"
	base=/dev/shm/multisend-hostile-$(basename "$tmp")
	trap 'rm -f "$base"-*; harness_cleanup' EXIT
	# 64 slots x 68 names of their own (4,352 metric names: the scrape that took minutes),
	# a file whose every slot stays mid-update, and a big honest one (64 slots, 64 names
	# each, the same in every slot), all with a live owner (their write locks).
	plant distinct "$hostile" "$base-distinct" distinct names=64
	plant busy "$hostile" "$base-busy" same busy
	plant big "$hostile" "$base-big" same names=64
	t0=$(date +%s%N)
	timeout 300 "$stat" --openmetrics >"$tmp/scan.om" 2>"$tmp/scan.err"
	rc=$?
	t1=$(date +%s%N)
	echo "  one scrape of /dev/shm with the three files: $(((t1 - t0) / 1000000)) ms, exit $rc"
	[ "$rc" = 0 ] || { show "$tmp/scan.err"; fail "multisend-stat --openmetrics: exit $rc"; }
	parse_om "$tmp/scan.om"
	[ "$(series "$tmp/scan.om" . "$base-distinct")" = 0 ] ||
		fail "the file of 4,352 distinct names was exported"
	[ "$(series "$tmp/scan.om" . "$base-busy")" = 0 ] || fail "the busy file was exported"
	expect_skipped "$tmp/scan.om" names 1
	expect_skipped "$tmp/scan.om" busy 1
	expect_skipped "$tmp/scan.om" budget 0
	# The honest file whole: every counter of every slot, and every histogram.
	n=$(series "$tmp/scan.om" '^multisend_c0_[0-9]*_total{' "$base-big")
	[ "$n" = 4096 ] || fail "the big file's counters: $n series, expected 64 x 64"
	n=$(series "$tmp/scan.om" '^multisend_h0_[0-3]_seconds_count{' "$base-big")
	[ "$n" = 256 ] || fail "the big file's histograms: $n series, expected 64 x 4"
	grep -F "file=\"$base-big\"" "$tmp/scan.om" | grep '^multisend_c0_63_total{' |
		grep -q 'slot="63".*} 63064$' || fail "slot 63's last counter is not 63064"

	# The server: clients that never send and never read cost it nothing; every GET is
	# answered; SIGTERM in the middle of a scrape ends it at once.
	serve hostile 127.0.0.1:0
	"$py" -c 'import socket, sys, urllib.parse as p
u = p.urlsplit(sys.argv[1])
idle = [socket.create_connection((u.hostname, u.port)) for _ in range(8)]
deaf = []
for _ in range(8):
    s = socket.create_connection((u.hostname, u.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    deaf.append(s)
print("held", flush=True)
sys.stdin.readline()' "$url" <&6 >"$tmp/clients.out" 2>&1 &
	clients=$!
	pids="$pids $clients"
	wait_line "$tmp/clients.out" '^held' "$clients" 30 || { show "$tmp/clients.out"; fail "the clients"; }
	for i in 1 2 3; do
		timeout 120 "$py" -c 'import sys, urllib.request as u
open(sys.argv[2], "wb").write(u.urlopen(sys.argv[1], timeout=60).read())' "$url" "$tmp/get$i.om" ||
			{ show "$tmp/hostile.err"; fail "GET $i was not answered"; }
		n=$(series "$tmp/get$i.om" '^multisend_c0_[0-9]*_total{' "$base-big")
		[ "$n" = 4096 ] || fail "GET $i: the big file's counters: $n series"
		[ "$(series "$tmp/get$i.om" . "$base-distinct")" = 0 ] || fail "GET $i: the distinct file"
	done
	# Counted again by every scrape: once each between two GETs.
	for r in names busy; do
		[ $(($(skipped "$tmp/get3.om" $r) - $(skipped "$tmp/get2.om" $r))) = 1 ] ||
			fail "files skipped for '$r' between two GETs: not 1"
	done
	kill -0 "$clients" 2>/dev/null || fail "the server dropped the idle clients' process"
	# A scrape under way, then SIGTERM.
	"$py" -c 'import socket, sys, urllib.parse as p
u = p.urlsplit(sys.argv[1])
s = socket.create_connection((u.hostname, u.port))
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
print("sent", flush=True)
s.recv(1)' "$url" >"$tmp/last.out" 2>&1 &
	last=$!
	pids="$pids $last"
	wait_line "$tmp/last.out" '^sent' "$last" 60 || fail "the last GET was not sent"
	t0=$(date +%s%N)
	kill -TERM "$srvpid"
	wait "$srvpid"
	rc=$?
	t1=$(date +%s%N)
	ms=$(((t1 - t0) / 1000000))
	echo "  --listen ended $ms ms after SIGTERM (exit $rc)"
	[ "$rc" = 0 ] || { show "$tmp/hostile.err"; fail "multisend-stat --listen: exit $rc"; }
	# A hang, not a pace: the bound is generous for a loaded machine and an ASan build.
	[ "$ms" -lt 5000 ] || fail "SIGTERM took $ms ms to end --listen"
	echo "PASS: hostile files in /dev/shm are skipped and counted, the honest ones exported, every client served"
}

owners_test() { # HOSTILE STAT
	hostile=$1 stat=$2
	need_exe "$hostile" "$stat"
	need_second_user
	# A copy where uid 65534 can run it: the build tree may be where it cannot look (a
	# clone under /root, mode 0700, as scripts/fresh-check makes).
	mkdir "$tmp/nobody" && chmod 0755 "$tmp/nobody" && cp "$hostile" "$tmp/nobody/hostile" &&
		chmod 0755 "$tmp/nobody/hostile" || fail "cannot copy $hostile"
	hostile_copy=$tmp/nobody/hostile
	as_nobody "$hostile_copy" 2>/dev/null; [ $? = 1 ] || skip "uid 65534 cannot run $hostile_copy"
	[ -d /dev/shm ] && [ -w /dev/shm ] || skip "/dev/shm is not writable"
	base=/dev/shm/multisend-owners-$(basename "$tmp")
	trap 'rm -f "$base"-*; harness_cleanup' EXIT
	# A private file of the second user's (mode 0600) that names this test's own process,
	# and one of root's.
	plant nobody setpriv --reuid=65534 --regid=65534 --clear-groups "$hostile_copy" "$base-nobody" same slots=2 names=4 mode=600 pid=$$
	plant root "$hostile" "$base-root" same slots=1 names=4
	[ "$(stat -c %U:%a "$base-nobody")" = nobody:600 ] || fail "the second user's file"
	# By default, root's own only; the other is counted, unread.
	"$stat" --openmetrics >"$tmp/default.om" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat --openmetrics: exit $?"; }
	parse_om "$tmp/default.om"
	[ "$(series "$tmp/default.om" . "$base-nobody")" = 0 ] ||
		fail "root's scan exported another user's 0600 file"
	n=$(series "$tmp/default.om" 'owner="root"' "$base-root")
	[ "$n" -gt 0 ] && [ "$n" = "$(series "$tmp/default.om" . "$base-root")" ] ||
		fail "root's file: not every series has owner=\"root\""
	expect_skipped "$tmp/default.om" owner 1
	# Named owners (a name, a uid) and all: the second user's file too, its owner labelled.
	for o in "--owner nobody" "--owner 65534" "--all-owners"; do
		# shellcheck disable=SC2086 # the options are words
		"$stat" --openmetrics $o >"$tmp/o.om" 2>"$tmp/err" ||
			{ show "$tmp/err"; fail "multisend-stat --openmetrics $o: exit $?"; }
		parse_om "$tmp/o.om"
		n=$(series "$tmp/o.om" . "$base-nobody")
		[ "$n" -gt 0 ] || fail "$o: the second user's file was not exported"
		[ "$(series "$tmp/o.om" "owner=\"nobody\",slot=" "$base-nobody")" = \
			"$(series "$tmp/o.om" ',slot=' "$base-nobody")" ] ||
			fail "$o: not every series of the second user's file has owner=\"nobody\""
		grep -F "file=\"$base-nobody\"" "$tmp/o.om" | grep -q "pid=\"$$\"" ||
			fail "$o: the pid label"
		[ "$(series "$tmp/o.om" . "$base-root")" -gt 0 ] || fail "$o: root's own file"
		expect_skipped "$tmp/o.om" owner 0
	done
	# Named on the command line: read whoever owns it (the caller's choice), labelled.
	"$stat" --openmetrics "$base-nobody" >"$tmp/named.om" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat --openmetrics FILE: exit $?"; }
	[ "$(series "$tmp/named.om" 'owner="nobody"' "$base-nobody")" -gt 0 ] ||
		fail "the named file was not exported with its owner"
	# Wrong uses: exit 2 and a reason.
	for a in "--owner nobody $base-root" "--all-owners $base-root" \
		"--owner no-such-user-$$"; do
		# shellcheck disable=SC2086 # the options are words
		"$stat" --openmetrics $a >"$tmp/out" 2>"$tmp/err"
		rc=$?
		[ "$rc" = 2 ] && grep -q -e '--owner' "$tmp/err" ||
			{ show "$tmp/err"; fail "--openmetrics $a: exit $rc"; }
	done
	echo "PASS: a scan reads only the owners asked for, and labels every series with its owner"
}

# isolation HOSTILE STAT (not in a namespace of its own: it plants a file in the host's
# /dev/shm, then runs 'scan' as every other test runs, which must not see it).
isolation_test() { # HOSTILE STAT
	hostile=$1 stat=$2
	need_exe "$hostile" "$stat"
	[ "$(id -u)" = 0 ] || skip "not root: no mount namespace (a scan reads this user's files only)"
	private_shm_works || skip "no mount namespace with a tmpfs on /dev/shm here"
	planted=/dev/shm/multisend-isolation-$(basename "$tmp")
	trap 'rm -f "$planted"; harness_cleanup' EXIT
	plant host "$hostile" "$planted" same slots=1 names=2
	# The check can fail: run where the host's /dev/shm is seen, it sees the file.
	STAT_TEST_PRIVATE_SHM=0 sh "$0" scan "$stat" "$planted" >"$tmp/shared.out" 2>&1
	rc=$?
	show "$tmp/shared.out"
	[ "$rc" = 1 ] && grep -q "saw $planted" "$tmp/shared.out" ||
		fail "without a namespace, the scan did not see the host's file (exit $rc)"
	sh "$0" scan "$stat" "$planted" >"$tmp/private.out" 2>&1
	rc=$?
	show "$tmp/private.out"
	[ "$rc" = 0 ] || fail "the tests' scan saw a file in the host's /dev/shm (exit $rc)"
	echo "PASS: the tests run with a /dev/shm of their own: a file in the host's is not seen"
}

scan_test() { # STAT PLANTED
	stat=$1 planted=$2
	"$stat" --openmetrics --all-owners >"$tmp/scan.om" 2>"$tmp/err" ||
		{ show "$tmp/err"; fail "multisend-stat --openmetrics: exit $?"; }
	if [ -e "$planted" ] || grep -qF "file=\"$planted\"" "$tmp/scan.om"; then
		echo "saw $planted"
		exit 1
	fi
	echo "PASS: $planted is not seen"
}

case ${1:-} in
md) [ $# -eq 4 ] || fail "usage: $0 md PUBLISHER SUBSCRIBER STAT"
	md_test plain "$2" "$3" "$4" ;;
md-ts) [ $# -eq 4 ] || fail "usage: $0 md-ts PUBLISHER SUBSCRIBER STAT"
	md_test ts "$2" "$3" "$4" ;;
refuse) [ $# -eq 3 ] || fail "usage: $0 refuse PUBLISHER STAT"
	refuse_test "$2" "$3" ;;
replace) [ $# -eq 3 ] || fail "usage: $0 replace PUBLISHER STAT"
	replace_test "$2" "$3" ;;
lockout) [ $# -eq 3 ] || fail "usage: $0 lockout PUBLISHER STAT"
	lockout_test "$2" "$3" ;;
planted) [ $# -eq 3 ] || fail "usage: $0 planted PUBLISHER STAT"
	planted_test "$2" "$3" ;;
names) [ $# -eq 3 ] || fail "usage: $0 names PUBLISHER STAT"
	names_test "$2" "$3" ;;
livefile) [ $# -eq 4 ] || fail "usage: $0 livefile LIVEFILE SHIM STAT"
	livefile_test "$2" "$3" "$4" ;;
rawfork) [ $# -eq 4 ] || fail "usage: $0 rawfork LIVEEDGE SHIM STAT"
	rawfork_test "$2" "$3" "$4" ;;
noproc) [ $# -eq 2 ] || fail "usage: $0 noproc LIVEEDGE"
	noproc_test "$2" ;;
pidns) [ $# -eq 3 ] || fail "usage: $0 pidns LIVEEDGE STAT"
	pidns_test "$2" "$3" ;;
metrics) [ $# -eq 4 ] || fail "usage: $0 metrics PUBLISHER SUBSCRIBER STAT"
	metrics_test "$2" "$3" "$4" ;;
metrics-shim) [ $# -eq 5 ] || fail "usage: $0 metrics-shim SHIM LEGACY RECEIVER STAT"
	metrics_shim_test "$2" "$3" "$4" "$5" ;;
screen) [ $# -eq 4 ] || fail "usage: $0 screen PUBLISHER SUBSCRIBER STAT"
	screen_test "$2" "$3" "$4" ;;
hostile) [ $# -eq 3 ] || fail "usage: $0 hostile HOSTILE STAT"
	hostile_test "$2" "$3" ;;
owners) [ $# -eq 3 ] || fail "usage: $0 owners HOSTILE STAT"
	owners_test "$2" "$3" ;;
isolation) [ $# -eq 3 ] || fail "usage: $0 isolation HOSTILE STAT"
	isolation_test "$2" "$3" ;;
scan) [ $# -eq 3 ] || fail "usage: $0 scan STAT PLANTED"
	scan_test "$2" "$3" ;;
*) fail "usage: $0 md|md-ts|refuse|replace|lockout|planted|names|livefile|rawfork|noproc|pidns|metrics|metrics-shim|screen|hostile|owners|isolation|scan ..." ;;
esac
