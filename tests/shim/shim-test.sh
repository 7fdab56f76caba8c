#!/bin/sh
# SPDX-License-Identifier: MIT
# The 'shim' suite's driver (registered by tests/shim/meson.build). Every run goes through
# multisend-run, as a user would, and every datagram is checked by a real receiver:
# examples/fanout-receiver (exactly once, byte for byte, in order per subscriber), or the
# foreign program's own output compared with its input.
#
#   shim-test.sh fanout  MODE N M RATE plain|identical [multisend-run options]
#   shim-test.sh xdp v4|v6|local             batch mode with --xdp-iface, over a veth pair
#   shim-test.sh prog    MODE NAME N M [program arguments] [-- multisend-run options]
#   shim-test.sh errno MODE | deferred MODE | fortify | python MODE | socat MODE | nc MODE
#   shim-test.sh efault MODE [multisend-run options]   bad pointers and lengths (efault.c)
#   shim-test.sh efault-signal MODE          the same from a signal handler inside the shim
#   shim-test.sh segv CASE...                the shim's SIGSEGV/SIGBUS handler unseen (segv.c)
#   shim-test.sh setuid | run | exports
#   shim-test.sh patterns NAME              tests/shim/patterns.py NAME under batch mode
#   shim-test.sh stderr MODE | statsfile | warnings   where the report and warnings go, and
#                                           how values are shown (the shim in LD_PRELOAD)
#   shim-test.sh live MODE legacy|threads   live counters (MULTISEND_STATS_SHM), read by
#                                           multisend-stat while and after the program runs
#
# The environment gives the programs: SHIM_DIR (where libmultisend-preload.so and
# multisend-run are), EXAMPLES_DIR, TESTS_DIR, SHIM_MAP, SHIM_SRC, STAT_BIN (multisend-stat).
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh (dash).
set -u

# As root, the whole test in a network namespace of its own with only its loopback, up (the
# namespace ends with the test): the receivers here wait on 127.0.0.1 ports, and on the host's
# loopback a port one test's receiver has just closed can be another test's next receiver, or
# another test's sender's destination (a stray datagram fails "byte for byte"); under load the
# ports are reused sooner. Nothing here needs the host's network: the tests that make veth
# pairs make their own namespaces (ip netns add gives a fresh one wherever it runs).
if [ -z "${SHIM_TEST_NETNS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1 &&
	command -v ip >/dev/null 2>&1 && env -u LD_PRELOAD unshare -n true 2>/dev/null; then
	SHIM_TEST_NETNS=1 exec unshare -n sh -c \
		'env -u LD_PRELOAD ip link set lo up || exit 1; exec sh "$0" "$@"' "$0" "$@"
fi

. "$(dirname "$0")/../harness.sh"
harness_init shim-test
chmod 755 "$tmp"

. "$(dirname "$0")/shim-env.sh"

# start_receiver N M [fanout-receiver options]: binds N consecutive free ports; sets $base.
# Its --idle-timeout is also its wait for the first datagram: 60 s, since under load a sender
# under the shim can take longer than 10 s to start; a pass ends once all are in.
start_receiver() {
	[ -x "$recv_bin" ] || skip "examples are not built (-Dexamples=false)"
	_n=$1 _m=$2
	shift 2
	_tries=0
	while :; do
		_tries=$((_tries + 1))
		_r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
		base=$((10000 + (_r + $$) % (22000 - _n)))
		bg "$recv_bin" --listen "127.0.0.1:$base" --subscribers "$_n" --messages "$_m" \
			--idle-timeout 60 "$@" >"$tmp/receiver" 2>"$tmp/receiver.err"
		recvpid=$bgpid
		wait_line "$tmp/receiver" '^ready$' "$recvpid" 10 && return 0
		wait "$recvpid"
		_rc=$?
		show "$tmp/receiver.err"
		case $_rc in
		3) [ "$_tries" -lt 20 ] && continue ;;
		4) skip "not enough file descriptors for $_n sockets" ;;
		esac
		fail "fanout-receiver did not start (exit $_rc)"
	done
}

# finish_receiver: waits for the receiver; fails unless it got everything exactly once.
finish_receiver() {
	wait "$recvpid" || { show "$tmp/receiver" "$tmp/receiver.err"; fail "receiver: exit $?"; }
	show "$tmp/receiver"
}

# check_stats FILE PYTHON-CONDITIONS...: every report in FILE (one JSON object per line, one
# per process that sent) is loaded; r is the list, t the first report's totals, f its flush
# reasons, s its sockets. Each condition is a Python expression that must be true.
check_stats() {
	_f=$1
	shift
	python3 - "$_f" "$@" <<'PY' || { show "$_f"; fail "report check"; }
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
r = [json.loads(l) for l in lines]
if not r:
    sys.exit("no report was written")
t, f, s = r[0]["total"], r[0]["flushes"], r[0]["sockets"]
for cond in sys.argv[2:]:
    if not eval(cond):
        sys.exit("report check failed: " + cond)
PY
}

# ---------------------------------------------------------------------------------------------

fanout() { # MODE N M RATE VARIANT [multisend-run options]
	mode=$1 n=$2 m=$3 rate=$4 variant=$5
	shift 5
	[ -x "$legacy_bin" ] || skip "examples are not built (-Dexamples=false)"
	size=64 vopt=''
	[ "$n" -eq 1 ] && size=1400
	[ "$variant" = identical ] && vopt=--identical
	start_receiver "$n" "$m" --size "$size" $vopt
	"$run" --mode "$mode" --stats "$tmp/stats.json" "$@" -- \
		"$legacy_bin" --dest "127.0.0.1:$base" --subscribers "$n" --messages "$m" \
		--rate "$rate" --size "$size" $vopt >"$tmp/legacy" 2>&1 ||
		{ show "$tmp/legacy"; fail "legacy-fanout exited with $?"; }
	finish_receiver
	show "$tmp/legacy"
	grep -q ', errors 0,' "$tmp/legacy" || fail "legacy-fanout saw errors"
	total=$((n * m))
	check_stats "$tmp/stats.json" "len(r) == 1" "t['calls'] == $total" \
		"t['datagrams'] == $total" "t['bytes'] == $total * $size" \
		"t['errors'] == 0 and t['errors_at_flush'] == 0" "r[0]['mode'] == '$mode'"
	if [ "$mode" = batch ]; then
		# Counted, not timed: a fan-out costs at most ceil(N / batch max) sendmmsg, plus
		# the first fan-out, which goes out send by send while the shim learns the pattern
		# (nothing is held back on a guess), plus one for each time the age bound cut a
		# fan-out (a loaded machine). One destination is never batched.
		if [ "$n" -eq 1 ]; then
			check_stats "$tmp/stats.json" "t['batched'] == 0" \
				"t['syscalls'] == $total" "f['age'] == 0"
		else
			check_stats "$tmp/stats.json" "t['batched'] == $total - $n" \
				"t['syscalls'] <= $n + $m * -(-$n // r[0]['batch_max']) + f['age']"
		fi
	else
		check_stats "$tmp/stats.json" "t['passed_through'] == $total" \
			"t['syscalls'] == $total" "t['syscalls_if_batched'] < $total or $n == 1"
	fi
	if [ "$variant" = identical ] && [ "$n" -gt 1 ]; then
		check_stats "$tmp/stats.json" "t['fanout_runs'] == $m" "t['fanout_longest'] == $n"
	fi
	sed -n 's/^/  report: /p' "$tmp/stats.json" | cut -c1-400
	echo "PASS: legacy-fanout under the shim, mode $mode, $n subscribers x $m ($variant)"
}

prog() { # MODE NAME N M [ARGS] [-- multisend-run options]
	mode=$1 name=$2 n=$3 m=$4
	shift 4
	args=''
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		args="$args $1"
		shift
	done
	[ $# -gt 0 ] && shift
	bin=${TESTS_DIR:?}/shim-$name
	[ -x "$bin" ] || fail "$bin is not built"
	start_receiver "$n" "$m" --size 64 --identical
	# shellcheck disable=SC2086 # $args is a word list
	"$run" --mode "$mode" --stats "$tmp/stats.json" "$@" -- "$bin" "$base" "$n" "$m" $args \
		>"$tmp/out" 2>&1
	rc=$?
	[ $rc = 0 ] || { show "$tmp/out"; fail "$name exited with $rc"; }
	finish_receiver
	show "$tmp/out"
	total=$((n * m))
	check_stats "$tmp/stats.json" "sum(x['total']['errors_at_flush'] for x in r) == 0"
	if [ "$mode" = batch ]; then
		case $name in
		forkbatch)
			case $args in
			*raw*) check_stats "$tmp/stats.json" "len(r) == 1" ;; # the raw child sent nothing
			*) check_stats "$tmp/stats.json" "len(r) == 2" \
				"sum(x['flushes']['fork'] for x in r) >= 1" \
				"sum(x['total']['batched'] for x in r) == $total" ;;
			esac ;;
		execbatch)
			check_stats "$tmp/stats.json" "len(r) == 2" "f['exec'] >= 1" \
				"sum(x['total']['batched'] for x in r) == $total" ;;
		closepending)
			case $args in
			# The threads hand over through a mutex, itself a flush point.
			*other*) check_stats "$tmp/stats.json" "f['other_thread'] + f['sync'] >= 1" \
				"f['age'] == 0" ;;
			*) check_stats "$tmp/stats.json" "f['close_dup'] >= 1" "f['age'] == 0" ;;
			esac ;;
		nonblock)
			# The socket opened non-blocking (the first one) never batched anything.
			check_stats "$tmp/stats.json" \
				"all(x['batched'] == 0 for x in s if x['fd'] == 3)" \
				"t['batched'] > 0" ;;
		tcp)
			check_stats "$tmp/stats.json" \
				"all(x['batched'] == 0 for x in s if x['kind'] == 'tcp4')" \
				"sum(x['calls'] for x in s if x['kind'] == 'tcp4') == 2000" \
				"t['batched'] >= $total - $n" ;;
		sigsend)
			# The handler did interrupt the shim (3000 times it sent, with the main
			# thread inside the shim most of the time), and its sends are in the
			# totals, exactly what the receiver counted, though in no socket's row.
			check_stats "$tmp/stats.json" "t['reentered_calls'] > 0" \
				"sum(x['calls'] for x in s) + t['reentered_calls'] == $total" ;;
		sigflood)
			# The floods went past the ring, and every one of their sends queued.
			check_stats "$tmp/stats.json" "t['reentered_overflow'] > 0" \
				"t['reentered_unordered'] == 0" \
				"t['reentered_queued'] == t['reentered_calls']" ;;
		threads)
			check_stats "$tmp/stats.json" "t['calls'] == $total" \
				"t['batched'] >= $total - $n" ;;
		esac
	else
		check_stats "$tmp/stats.json" "all(x['total']['batched'] == 0 for x in r)"
	fi
	case $name in
	sigsend|sigflood)
		# Every datagram the receiver counted is in the report's totals, those the
		# signal handler sent included (queued behind the batch or straight out).
		check_stats "$tmp/stats.json" "len(r) == 1" "t['calls'] == $total" \
			"t['datagrams'] == $total" "t['bytes'] == $total * 64" \
			"sum(t['calls_by'].values()) == $total" "t['errors'] == 0" \
			"t['batched'] + t['passed_through'] == $total" ;;
	esac
	echo "PASS: $name under the shim, mode $mode, $n subscribers x $m$args"
}

errno_test() { # MODE
	"$run" --mode "$1" --stats "$tmp/stats.json" -- "${TESTS_DIR:?}/shim-errno" \
		>"$tmp/out" 2>&1 || { show "$tmp/out"; fail "errno test, mode $1"; }
	show "$tmp/out"
	if [ "$1" != off ]; then
		check_stats "$tmp/stats.json" "t['calls'] >= 109"
	fi
	[ "$1" != batch ] || check_stats "$tmp/stats.json" "t['batched'] >= 98"
	echo "PASS: errno kept and synchronous errors given at call time, mode $1"
}

# in_private_net PROGRAM...: PROGRAM in a network namespace of the test's own (only its
# loopback; deleted at exit) when root can make one, so that nothing another user does on the
# host's loopback (its ephemeral ports all taken, say) reaches the test; else as it is.
private_ns=''
in_private_net() {
	if [ -z "$private_ns" ] && [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
		_r=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
		if ipq netns add "msefault-$_r" 2>/dev/null; then
			private_ns=msefault-$_r
			trap 'ipq netns del "$private_ns" 2>/dev/null; harness_cleanup' EXIT
			ipq -n "$private_ns" link set lo up || fail "lo up in $private_ns"
		else
			private_ns=-
		fi
	fi
	case $private_ns in
	''|-) "$@" ;;
	*) inns "$private_ns" "$@" ;;
	esac
}

# efault MODE [multisend-run options]: tests/shim/efault.c without the shim, then under
# multisend-run in MODE: every bad pointer and length gets the kernel's own errno (or count),
# the program is not killed (its exit status and every line the same), and every good
# datagram arrives. Issue 26, item 9.
efault_test() { # MODE [options]
	_m=$1
	shift
	in_private_net "${TESTS_DIR:?}/shim-efault" local >"$tmp/plain.out" 2>"$tmp/plain.err"
	_prc=$?
	echo "exit status $_prc" >>"$tmp/plain.out"
	[ "$_prc" = 0 ] || { show "$tmp/plain.out" "$tmp/plain.err"; fail "efault without the shim: exit $_prc"; }
	in_private_net "$run" --mode "$_m" "$@" --stats "$tmp/stats.json" -- \
		"${TESTS_DIR:?}/shim-efault" local >"$tmp/shim.out" 2>"$tmp/shim.err"
	echo "exit status $?" >>"$tmp/shim.out"
	show "$tmp/shim.err"
	if ! cmp -s "$tmp/plain.out" "$tmp/shim.out"; then
		echo "--- without the shim / +++ under multisend-run --mode $_m $*:" >&2
		diff -u "$tmp/plain.out" "$tmp/shim.out" >&2
		fail "efault: the results differ under mode $_m"
	fi
	sed 's/^/  /' "$tmp/shim.out" | grep -c EFAULT | sed 's/^/  EFAULT results: /'
	grep 'local receivers' "$tmp/shim.out"
	if [ "$_m" != off ]; then
		# Every call counted (none lost to a crash), and batch mode batched the fan-outs
		# between the bad calls.
		check_stats "$tmp/stats.json" "t['calls'] >= 400" "t['errors'] >= 100"
		[ "$_m" != batch ] || check_stats "$tmp/stats.json" "t['batched'] > 0"
	fi
	echo "PASS: bad buffers, addresses, headers, iovecs and lengths: the kernel's answers under mode $_m $*"
}

# segv CASE...: tests/shim/segv.c without the shim, then under multisend-run --mode batch:
# the program's own SIGSEGV handler, a death by SIGSEGV (the same signal, the same core), a
# raw rt_sigaction, an alternate stack: every line and the exit status the same, every good
# datagram arrived, so the shim's SIGSEGV/SIGBUS handler (shim/fault.c) is not seen. Under
# strace (when installed; not under valgrind), batch mode read the program's buffers without
# process_vm_readv (the touch), except after a raw rt_sigaction (the probe then).
segv_test() { # CASE...
	mkdir -p "$tmp/core-plain" "$tmp/core-shim" || fail "mkdir"
	SEGV_CORE_DIR=$tmp/core-plain in_private_net "${TESTS_DIR:?}/shim-segv" "$@" \
		>"$tmp/plain.out" 2>"$tmp/plain.err"
	echo "exit status $?" >>"$tmp/plain.out"
	SEGV_CORE_DIR=$tmp/core-shim in_private_net "$run" --mode batch \
		--stats "$tmp/stats.json" -- "${TESTS_DIR:?}/shim-segv" "$@" \
		>"$tmp/shim.out" 2>"$tmp/shim.err"
	echo "exit status $?" >>"$tmp/shim.out"
	show "$tmp/shim.out" "$tmp/shim.err"
	grep -q '^exit status 0$' "$tmp/plain.out" ||
		{ show "$tmp/plain.out" "$tmp/plain.err"; fail "segv $* without the shim"; }
	if ! cmp -s "$tmp/plain.out" "$tmp/shim.out"; then
		echo "--- without the shim / +++ under multisend-run --mode batch:" >&2
		diff -u "$tmp/plain.out" "$tmp/shim.out" >&2
		fail "segv $*: the program saw a difference"
	fi
	check_stats "$tmp/stats.json" "t['batched'] > 0" "t['errors'] >= 3"
	case ${MESON_TEST_SETUP:-}${VALGRIND:-} in
	*valgrind*) ;;
	*)
		if command -v strace >/dev/null 2>&1; then
			SEGV_CORE_DIR=$tmp/core-shim in_private_net strace -f -qq -o "$tmp/strace" \
				-e trace=process_vm_readv "$run" --mode batch -- \
				"${TESTS_DIR:?}/shim-segv" "$@" >"$tmp/strace.out" 2>&1 ||
				{ show "$tmp/strace.out"; fail "segv $* under strace"; }
			_pv=$(grep -c 'process_vm_readv(' "$tmp/strace") || true
			case $1 in
			raw|rawasm)
				[ "$_pv" -gt 0 ] ||
					fail "segv $1: no probe after the raw rt_sigaction" ;;
			early) # the send from inside the handler only
				[ "$_pv" = 1 ] ||
					fail "segv $*: $_pv process_vm_readv calls, not 1 (the handler's send)" ;;
			*)
				[ "$_pv" = 0 ] ||
					fail "segv $*: $_pv process_vm_readv calls (the touch was not used)" ;;
			esac
			echo "  process_vm_readv calls under batch mode: $_pv"
		fi ;;
	esac
	echo "PASS: segv $*: the program's signals, handlers and exit as without the shim"
}

# efault-signal MODE: the bad calls from a signal handler running inside the shim's flush
# (efault.c signal, with libshim-sigflood-next.so after the shim): the same results as
# without the shim, and the handler did run inside the shim (batch mode).
efault_signal_test() { # MODE
	_next=${TESTS_DIR:?}/libshim-sigflood-next.so
	in_private_net "${TESTS_DIR:?}/shim-efault" signal "$_next" >"$tmp/plain.out" \
		2>"$tmp/plain.err" ||
		{ show "$tmp/plain.out" "$tmp/plain.err"; fail "efault signal without the shim"; }
	in_private_net "$run" --mode "$1" --stats "$tmp/stats.json" -- \
		"${TESTS_DIR:?}/shim-efault" signal "$_next" >"$tmp/shim.out" 2>"$tmp/shim.err"
	_rc=$?
	show "$tmp/shim.out" "$tmp/shim.err"
	[ "$_rc" = 0 ] || fail "efault signal under mode $1: exit status $_rc"
	if ! cmp -s "$tmp/plain.out" "$tmp/shim.out"; then
		diff -u "$tmp/plain.out" "$tmp/shim.out" >&2
		fail "efault signal: the handler's results differ under mode $1"
	fi
	if [ "$1" = batch ]; then
		grep -q 'the handler ran [1-9][0-9]* times inside' "$tmp/shim.err" ||
			fail "the handler never ran inside the shim"
		check_stats "$tmp/stats.json" "t['reentered_calls'] > 0"
	fi
	echo "PASS: bad pointers from a signal handler inside the shim: the kernel's answers, mode $1"
}

deferred_test() { # off|metrics|batch|batch-defer
	# A route decides this error, and batch mode asks the route before it batches a
	# destination: the program gets EACCES at call time in every mode.
	case $1 in
	batch-defer) mode=batch want=immediate opt=--defer-errors ;;
	batch) mode=batch want=immediate opt='' ;;
	*) mode=$1 want=immediate opt='' ;;
	esac
	# shellcheck disable=SC2086 # $opt is one option or nothing
	"$run" --mode "$mode" $opt --stats "$tmp/stats.json" -- "${TESTS_DIR:?}/shim-deferred" \
		"$want" >"$tmp/out" 2>&1 || { show "$tmp/out"; fail "deferred, $1"; }
	show "$tmp/out"
	if [ "$mode" = batch ]; then
		check_stats "$tmp/stats.json" "r[0]['errors'] == {'EACCES': 1}" \
			"t['errors_at_flush'] == 0"
	fi
	[ "$want" != deferred ] || check_stats "$tmp/stats.json" "r[0]['errors'] == {'EACCES': 1}"
	echo "PASS: an error found at flush, mode $1: $want"
}

fortify() {
	bin=${TESTS_DIR:?}/shim-fortify
	if command -v nm >/dev/null 2>&1; then
		for s in __recv_chk __recvfrom_chk __read_chk __poll_chk __ppoll_chk; do
			nm -D "$bin" | grep -q " U $s" || fail "$bin does not call $s (not fortified?)"
		done
	fi
	# A 1 s age bound: a call that failed to flush would make the run crawl and show up
	# as 'age' flushes below.
	"$run" --mode batch --batch-delay-us 1000000 --no-fanout-end --stats "$tmp/stats.json" \
		-- "$bin" 50 >"$tmp/out" 2>&1 || { show "$tmp/out"; fail "fortify"; }
	show "$tmp/out"
	check_stats "$tmp/stats.json" "t['batched'] == 200" "f['age'] == 0" "f['poll'] == 20" \
		"f['recv'] + f['read'] == 30"
	echo "PASS: the fortified calls flush the batch"
}

# ---- programs nobody here wrote --------------------------------------------------------------

python_test() { # MODE
	need python3
	py=$(command -v python3)
	[ -x /usr/bin/python3 ] && py=/usr/bin/python3
	n=16 m=200
	start_receiver "$n" "$m" --size 64 --identical
	cat >"$tmp/fanout.py" <<'PY'
import socket, struct, sys
port, n, m = (int(x) for x in sys.argv[1:4])
def pattern(seq, count):
    # lf_fill from examples/md-proto.h: xorshift64 seeded by seq
    x = (seq * 0x9e3779b97f4a7c15 + 1) & (2**64 - 1)
    out = bytearray()
    for _ in range(count):
        x ^= (x << 13) & (2**64 - 1)
        x ^= x >> 7
        x ^= (x << 17) & (2**64 - 1)
        out.append((x >> 32) & 0xff)
    return bytes(out)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for seq in range(1, m + 1):
    msg = struct.pack("<IIQII", 0x3146474c, 0xffffffff, seq, 64, 0) + pattern(seq, 40)
    for i in range(n):
        s.sendto(msg, ("127.0.0.1", port + i))
print(f"python: sent {m} x {n}")
PY
	"$run" --mode "$1" --stats "$tmp/stats.json" -- "$py" "$tmp/fanout.py" "$base" "$n" "$m" \
		>"$tmp/out" 2>&1 || { show "$tmp/out"; fail "python3 exited with $?"; }
	finish_receiver
	show "$tmp/out"
	check_stats "$tmp/stats.json" "t['calls_by']['sendto'] == $((n * m))" \
		"t['errors'] == 0 and t['errors_at_flush'] == 0"
	[ "$1" != batch ] || check_stats "$tmp/stats.json" "t['batched'] == $((n * (m - 1)))"
	[ "$1" != metrics ] || check_stats "$tmp/stats.json" "t['fanout_runs'] == $m"
	sed -n 's/^/  report: /p' "$tmp/stats.json" | cut -c1-300
	echo "PASS: $py sock.sendto loop under the shim, mode $1"
}

# A free UDP port on 127.0.0.1, as the kernel picks it (not held afterwards).
free_port() {
	python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_udp_bound PORT PID SECONDS: until a UDP socket is bound to 127.0.0.1:PORT (in
# /proc/net/udp: 0100007F:PORT in hex), PID is gone or SECONDS pass.
wait_udp_bound() {
	_hex=$(printf '0100007F:%04X' "$1")
	_wu_left=$(($3 * 20))
	while [ "$_wu_left" -gt 0 ]; do
		grep -q " $_hex " /proc/net/udp && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.05
		_wu_left=$((_wu_left - 1))
	done
	grep -q " $_hex " /proc/net/udp
}

# udp_pair MODE NAME SENDER-COMMAND...: a socat receiver (also under the shim) writes what it
# gets to a file; the sender reads $tmp/input on stdin; the output must equal the input.
# The receiver ends once the input's 40,000 bytes are in its file (or 60 s after the sender
# has exited), not after a pause: under load a sender under the shim took over socat's old
# 2 s inactivity bound to start, or between two datagrams, and the receiver ended with part
# of the input. In the test's own namespace (root) it gets a receive buffer for every
# datagram at once (a stalled receiver drops nothing), and the namespace's UDP counters,
# this test's alone, must show no drop.
udp_pair() {
	mode=$1 name=$2
	shift 2
	# 400 lines of 100 bytes; sent in 100-byte reads, so 400 datagrams.
	awk 'BEGIN { for (i = 1; i <= 400; i++) printf "%-99s\n", "line " i " of the input" }' \
		>"$tmp/input"
	# SO_RCVBUFFORCE (SOL_SOCKET 1, 33) of 4 MiB, the int's bytes little-endian as socat's
	# x notation wants them (before bind); rcvbuf= is capped by net.core.rmem_max.
	rcvopt=rcvbuf=1048576
	[ -n "${SHIM_TEST_NETNS:-}" ] && rcvopt=sockopt-listen=1:33:x00004000
	rm -f "$tmp/recv.pid"
	# -T 120: the receiver's own last bound, should the test be killed before it ends it.
	bg sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$tmp/recv.pid" \
		"$run" --mode "$mode" --stats "$tmp/recv.json" -- socat -u -T 120 \
		"UDP-RECV:$port,bind=127.0.0.1,$rcvopt" "OPEN:$tmp/output,creat,trunc"
	rpid=$bgpid
	# Not a fixed pause: until the receiver's socket is bound (or it is gone, or 10 s).
	wait_udp_bound "$port" "$rpid" 10 || fail "the socat receiver did not bind 127.0.0.1:$port"
	if [ -n "${SHIM_TEST_NETNS:-}" ]; then
		# Room for all 400 datagrams at once at 2 KiB each (a 100-byte datagram costs 832
		# bytes of receive buffer on loopback, measured): the worst case, a receiver that
		# reads nothing until the sender is done.
		rb=$(env -u LD_PRELOAD ss -Huamn "sport = :$port" | sed -n 's/.*skmem:([^)]*,rb\([0-9]*\),.*/\1/p' | head -1)
		[ -n "$rb" ] && [ "$rb" -ge $((400 * 2048)) ] ||
			fail "the receiver's buffer (rb '$rb') cannot hold 400 datagrams of 2 KiB"
		echo "  receiver's buffer: $rb bytes, room for 400 datagrams of 2 KiB"
	fi
	"$run" --mode "$mode" --stats "$tmp/stats.json" -- "$@" <"$tmp/input" \
		>"$tmp/out" 2>&1 || { show "$tmp/out"; fail "$name exited with $?"; }
	_n=0
	while [ "$(wc -c <"$tmp/output" 2>/dev/null || echo 0)" -lt 40000 ] && [ "$_n" -lt 1200 ] &&
		kill -0 "$rpid" 2>/dev/null; do
		sleep 0.05
		_n=$((_n + 1))
	done
	kill -TERM "$(cat "$tmp/recv.pid")" 2>/dev/null
	wait "$rpid"
	_rrc=$?
	# socat ends on SIGTERM with status 143 (128 + 15); 0 had its -T bound passed.
	[ "$_rrc" = 143 ] || [ "$_rrc" = 0 ] || fail "the socat receiver exited with $_rrc"
	show "$tmp/out"
	if [ -n "${SHIM_TEST_NETNS:-}" ]; then
		# The namespace's UDP counters: a datagram dropped for a full buffer is counted
		# here, and nothing else in this namespace receives UDP.
		drops=$(awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 }
			else print $c["RcvbufErrors"] + $c["InErrors"] }' /proc/net/snmp)
		echo "  UDP datagrams dropped in the test's namespace (RcvbufErrors + InErrors): $drops"
		[ "$drops" = 0 ] || fail "$drops datagrams dropped by a receive buffer"
	fi
	cmp "$tmp/input" "$tmp/output" || fail "$name: output differs from input"
	# How many datagrams depends on how the sender's reads split the input.
	check_stats "$tmp/stats.json" "t['calls'] >= 100" "t['bytes'] == 40000" \
		"t['errors'] == 0 and t['errors_at_flush'] == 0"
	sed -n 's/^/  sender report: /p' "$tmp/stats.json" | cut -c1-300
}

socat_test() { # MODE
	need socat python3 awk cmp
	port=$(free_port)
	udp_pair "$1" socat socat -u -b 100 - "UDP-SENDTO:127.0.0.1:$port"
	echo "PASS: socat sender and receiver under the shim, mode $1, 400 datagrams intact"
}

nc_test() { # MODE
	need nc socat python3 awk cmp
	port=$(free_port)
	# netcat-openbsd: connected UDP socket, write(2) per block read from stdin. -q: quit
	# after EOF. 100-byte reads through a pipe of 100-byte lines.
	udp_pair "$1" nc sh -c "while IFS= read -r l; do printf '%s\n' \"\$l\"; sleep 0.001; done | nc -u -q 1 127.0.0.1 $port"
	echo "PASS: nc -u under the shim, mode $1, 400 datagrams intact"
}

# ---- what a program can observe: order, errno, threads, system calls ------------------------

# patterns_test NAME: tests/shim/patterns.py NAME under batch mode. Order patterns check their
# own receivers; errno patterns must print exactly what they print without the shim.
patterns_test() {
	need python3
	py=$(command -v python3)
	[ -x /usr/bin/python3 ] && py=/usr/bin/python3
	pat=$(dirname "$0")/patterns.py
	case $1 in
	twosockets|dup|threads|processes)
		"$run" --mode batch --stats "$tmp/stats.json" -- "$py" "$pat" "$1" >"$tmp/out" 2>&1 ||
			{ show "$tmp/out"; fail "$1: exit $?"; }
		show "$tmp/out"
		grep -q '^order ok' "$tmp/out" || fail "$1: order"
		# It can fail: batches were made (and, across threads or processes, cut by the
		# hand-over, which is a flush point).
		check_stats "$tmp/stats.json" "sum(x['total']['batched'] for x in r) > 0"
		case $1 in threads|processes)
			check_stats "$tmp/stats.json" "sum(x['flushes']['sync'] for x in r) > 0" ;;
		esac ;;
	refused|recverr|broadcast|noroute)
		pre=''
		if [ "$1" = noroute ]; then
			need unshare
			unshare -n true 2>/dev/null || skip "cannot make a network namespace"
			pre='unshare -n'
		fi
		$pre "$py" "$pat" "$1" >"$tmp/plain" 2>&1 || { show "$tmp/plain"; fail "$1 without the shim"; }
		$pre "$run" --mode batch --stats "$tmp/stats.json" -- "$py" "$pat" "$1" >"$tmp/out" 2>&1 ||
			{ show "$tmp/out"; fail "$1: exit $?"; }
		show "$tmp/plain" "$tmp/out"
		grep -q '^ok \|^E\| E' "$tmp/plain" || fail "$1: no errno list"
		cmp "$tmp/plain" "$tmp/out" || fail "$1: the program saw other results under the shim" ;;
	unshare)
		"$py" "$pat" unshare >"$tmp/plain" 2>&1 || skip "unshare(CLONE_NEWUSER) fails without the shim"
		"$run" --mode batch --stats "$tmp/stats.json" -- "$py" "$pat" unshare >"$tmp/out" 2>&1 ||
			{ show "$tmp/out"; fail "unshare under the shim: exit $?"; }
		show "$tmp/out"
		grep -q '^unshare ok' "$tmp/out" || fail "unshare"
		check_stats "$tmp/stats.json" "t['batched'] > 0" ;;
	dupnonblock)
		# 50 fan-outs of 2 before the dup is made non-blocking (the first one learns the
		# pattern), 50 after: exactly 98 batched.
		"$run" --mode batch --stats "$tmp/stats.json" -- "$py" "$pat" dupnonblock >"$tmp/out" 2>&1 ||
			{ show "$tmp/out"; fail "dupnonblock: exit $?"; }
		check_stats "$tmp/stats.json" "t['batched'] == 98" "t['calls'] == 200" ;;
	single)
		# One destination: every send costs at most the one system call it costs without
		# the shim. Counted by strace over everything the process does (threads included),
		# as the difference between 1 and 20001 sends, so start-up cancels out (the previous
		# shim: 46512 more).
		need strace
		for k in 1 20001; do
			strace -f -c -o "$tmp/strace.$k" "$run" --mode batch -- "$py" "$pat" single "$k" \
				>"$tmp/out" 2>&1 || { show "$tmp/out"; fail "single $k: exit $?"; }
		done
		c1=$(awk '$NF == "total" { print $4 }' "$tmp/strace.1")
		c2=$(awk '$NF == "total" { print $4 }' "$tmp/strace.20001")
		echo "system calls: $c1 for 1 send, $c2 for 20001 sends"
		[ -n "$c1" ] && [ -n "$c2" ] || { show "$tmp/strace.1"; fail "no strace total"; }
		# Start-up varies by a few calls from run to run (the interpreter's memory layout);
		# one more call per send would add 20000.
		[ $((c2 - c1)) -le 20016 ] || { show "$tmp/strace.20001"; fail "more than one system call per send"; } ;;
	*) fail "patterns: $1?" ;;
	esac
	echo "PASS: patterns $1: nothing the program can observe changed under batch mode"
}

waitflush_test() {
	"$run" --mode batch --batch-delay-us 1000000 --stats "$tmp/stats.json" -- \
		"${TESTS_DIR:?}/shim-waitflush" >"$tmp/out" 2>&1 || { show "$tmp/out"; fail "exit $?"; }
	show "$tmp/out"
	check_stats "$tmp/stats.json" "t['batched'] > 0" "f['sync'] >= 30" "f['age'] == 0"
	# The same hand-over through C11 mtx_t/cnd_t, which glibc implements past the pthread
	# wrappers, and a thread made with thrd_create.
	"$run" --mode batch --batch-delay-us 1000000 --stats "$tmp/stats.json" -- \
		"${TESTS_DIR:?}/shim-waitflush" c11 >"$tmp/out" 2>&1 || { show "$tmp/out"; fail "c11: exit $?"; }
	show "$tmp/out"
	check_stats "$tmp/stats.json" "t['batched'] > 0" "f['sync'] >= 30" "f['age'] == 0"
	echo "PASS: a batch pending while its thread waits in a futex goes out at the wait"
}

# ---- setuid, multisend-run, exports ----------------------------------------------------------

# as_pid P COMMAND...: runs COMMAND as process P, in a new PID namespace whose last-allocated
# PID is set to P - 1 (made as pidns_probe found it can be), so that the PID is the same on
# every run.
as_pid() {
	_asp=$1
	shift
	# shellcheck disable=SC2086 # $pidns_opt is one option or nothing
	unshare $pidns_opt --pid --fork sh -c \
		'echo $(($1 - 1)) >/proc/sys/kernel/ns_last_pid || exit 125; shift; "$@"; exit $?' \
		as_pid "$_asp" "$@"
}

# pidns_probe: whether as_pid works here (unshare as root, or in a user namespace of its own),
# checked by the PID a process actually gets. Sets pidns_opt.
pidns_probe() {
	for pidns_opt in '' --map-root-user; do
		# shellcheck disable=SC2086
		_got=$(unshare $pidns_opt --pid --fork sh -c \
			'echo 9999 >/proc/sys/kernel/ns_last_pid || exit 1; sh -c "echo \$\$"; exit $?' \
			2>"$tmp/pidns.err")
		[ "$_got" = 10000 ] && return 0
	done
	return 1
}

setuid_test() {
	need setpriv
	[ "$(id -u)" = 0 ] || skip "needs root to make a set-user-ID copy"
	id nobody >/dev/null 2>&1 || skip "no user 'nobody'"
	cp "${TESTS_DIR:?}/shim-setuid-probe" "$shim" "$tmp/" || fail "copy"
	chmod 4755 "$tmp/shim-setuid-probe"
	chmod 755 "$tmp/libmultisend-preload.so"
	# multisend-run warns; the loader ignores LD_PRELOAD for it, so it runs without the shim.
	"$run" --mode batch -- "$tmp/shim-setuid-probe" "$tmp/libmultisend-preload.so" \
		>/dev/null 2>"$tmp/warn"
	grep -q 'set-user-ID' "$tmp/warn" || { show "$tmp/warn"; fail "multisend-run did not warn"; }
	# The shim loaded into a set-user-ID process run by another user (AT_SECURE) ignores
	# every variable: no batch mode, no stats file.
	MULTISEND_PRELOAD_MODE=batch MULTISEND_STATS="$tmp/must-not-exist.json" \
		MULTISEND_BATCH_MAX=bogus setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$tmp/shim-setuid-probe" "$tmp/libmultisend-preload.so" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	show "$tmp/out" "$tmp/err"
	[ $rc = 77 ] && skip "AT_SECURE not set for a set-user-ID program here (nosuid mount?)"
	[ $rc = 0 ] || fail "setuid-probe exited with $rc"
	[ ! -e "$tmp/must-not-exist.json" ] || fail "the shim used MULTISEND_STATS under AT_SECURE"
	grep -q 'mode metrics, environment ignored (AT_SECURE)' "$tmp/err" ||
		fail "the report does not say the environment was ignored"
	grep -q 'batched 0' "$tmp/err" || fail "the shim batched under AT_SECURE"
	grep -q 'MULTISEND_BATCH_MAX' "$tmp/err" && fail "the shim read MULTISEND_BATCH_MAX"
	# File capabilities (ping's kind) put a program run by another user in secure-execution
	# mode too, as multisend-run's warning says: the same probe with cap_net_raw, run as
	# nobody, sees AT_SECURE, and the shim ignores the variables.
	need setcap
	cp "${TESTS_DIR:?}/shim-setuid-probe" "$tmp/cap-probe" || fail "copy"
	setcap cap_net_raw+ep "$tmp/cap-probe" || fail "setcap"
	"$run" --mode batch -- "$tmp/cap-probe" "$tmp/libmultisend-preload.so" >/dev/null \
		2>"$tmp/warn"
	grep -q "warning: $tmp/cap-probe has file capabilities (cap_net_raw=ep)" "$tmp/warn" ||
		{ show "$tmp/warn"; fail "multisend-run did not warn about file capabilities"; }
	MULTISEND_PRELOAD_MODE=batch MULTISEND_STATS="$tmp/must-not-exist.json" \
		setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$tmp/cap-probe" "$tmp/libmultisend-preload.so" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	show "$tmp/out" "$tmp/err"
	[ $rc = 0 ] || fail "the capability probe exited with $rc (77: no AT_SECURE)"
	[ ! -e "$tmp/must-not-exist.json" ] || fail "the shim used MULTISEND_STATS with capabilities"
	grep -q 'mode metrics, environment ignored (AT_SECURE)' "$tmp/err" ||
		fail "the report does not say the environment was ignored (capabilities)"
	echo "PASS: set-user-ID and file capabilities: multisend-run warns, the shim ignores the environment"
}

# expect_refusal STATUS MESSAGE COMMAND...: COMMAND exits with STATUS, says MESSAGE (a grep
# pattern) on stderr, and prints nothing on stdout (the program did not run).
expect_refusal() {
	_st=$1 _msg=$2
	shift 2
	"$@" >"$tmp/r.out" 2>"$tmp/r.err"
	_rc=$?
	[ "$_rc" = "$_st" ] || { show "$tmp/r.out" "$tmp/r.err"; fail "$*: exit $_rc, not $_st"; }
	grep -q -- "$_msg" "$tmp/r.err" || { show "$tmp/r.err"; fail "$*: no '$_msg'"; }
	[ ! -s "$tmp/r.out" ] || { show "$tmp/r.out"; fail "$*: the program ran"; }
}

# Options with an empty value, and programs that cannot be run: clear messages, no shell
# errors.
run_refusals() {
	for o in --mode --stats --stats-shm --batch-max --batch-delay-us --programs; do
		expect_refusal 2 "^multisend-run: $o needs a value, not an empty string" \
			"$run" "$o" '' -- echo ran
		expect_refusal 2 "^multisend-run: $o needs a value, not an empty string" \
			"$run" "$o=" -- echo ran
	done
	printf 'echo ran\n' >"$tmp/noexec"
	chmod 644 "$tmp/noexec"
	expect_refusal 126 "^multisend-run: $tmp/noexec: permission denied: not executable" \
		"$run" -- "$tmp/noexec"
	expect_refusal 126 "^multisend-run: $tmp: is a directory, not a program" "$run" -- "$tmp"
}

# --stats FILE: never through a symbolic link, never opening a FIFO or another non-regular
# file, and a missing directory said so; all before the program runs.
run_stats_path() {
	expect_refusal 2 "^multisend-run: --stats $tmp/missing/r.json: the directory $tmp/missing does not exist" \
		"$run" --stats "$tmp/missing/r.json" -- echo ran
	expect_refusal 2 "^multisend-run: --stats $tmp/noexec/r.json: $tmp/noexec is not a directory" \
		"$run" --stats "$tmp/noexec/r.json" -- echo ran
	# A symbolic link planted at the path, to a private file: refused; the file is neither
	# emptied nor written, nor is a dangling link's target made.
	printf 'precious\n' >"$tmp/precious"
	chmod 600 "$tmp/precious"
	ln -s "$tmp/precious" "$tmp/link.json"
	ln -s "$tmp/made-through-link" "$tmp/dangling.json"
	for l in link dangling; do
		expect_refusal 2 "^multisend-run: --stats $tmp/$l.json: refusing a symbolic link" \
			"$run" --mode batch --stats "$tmp/$l.json" -- "${TESTS_DIR:?}/shim-errno"
	done
	[ "$(cat "$tmp/precious")" = precious ] || fail "the symbolic link's target was changed"
	[ ! -e "$tmp/made-through-link" ] || fail "a file was made through a dangling link"
	# A FIFO nobody reads: refused at once (timeout only bounds a hang, which fails: 124).
	mkfifo "$tmp/fifo.json" || fail "mkfifo"
	expect_refusal 2 "^multisend-run: --stats $tmp/fifo.json: refusing a file that is not a regular file" \
		timeout 20 "$run" --stats "$tmp/fifo.json" -- echo ran
	mkdir "$tmp/dir.json"
	expect_refusal 2 "^multisend-run: --stats $tmp/dir.json: refusing a file that is not a regular file" \
		"$run" --stats "$tmp/dir.json" -- echo ran
	# A regular file: emptied (its mode kept), then the report.
	printf 'old contents\n' >"$tmp/reg.json"
	chmod 600 "$tmp/reg.json"
	"$run" --mode batch --stats "$tmp/reg.json" -- "${TESTS_DIR:?}/shim-errno" >/dev/null ||
		fail "--stats on a regular file"
	check_stats "$tmp/reg.json" "len(r) == 1" "r[0]['mode'] == 'batch'"
	[ "$(stat -c %a "$tmp/reg.json")" = 600 ] || fail "the report file's mode changed"
}

# A program with file capabilities (ping's kind) is warned about like a set-user-ID one, both
# with getcap and without it (a getcap that fails: the wrapper reads the attribute with tar).
run_file_caps() {
	if ! command -v setcap >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
		echo "note: file capabilities not checked (needs root and setcap, libcap2-bin)"
		return
	fi
	cp /bin/true "$tmp/captrue" || fail "copy"
	"$run" -- "$tmp/captrue" 2>"$tmp/warn" || fail "captrue before setcap"
	[ ! -s "$tmp/warn" ] || { show "$tmp/warn"; fail "a warning without file capabilities"; }
	setcap cap_net_raw+ep "$tmp/captrue" || fail "setcap"
	"$run" -- "$tmp/captrue" 2>"$tmp/warn" || fail "captrue"
	grep -q "warning: $tmp/captrue has file capabilities (cap_net_raw=ep).*runs without the shim" \
		"$tmp/warn" || { show "$tmp/warn"; fail "no warning for file capabilities (getcap)"; }
	mkdir "$tmp/badcap"
	printf '#!/bin/sh\nexit 1\n' >"$tmp/badcap/getcap"
	chmod 755 "$tmp/badcap/getcap"
	PATH="$tmp/badcap:$PATH" "$run" -- "$tmp/captrue" 2>"$tmp/warn" || fail "captrue (tar)"
	grep -q "warning: $tmp/captrue has file capabilities (security.capability)" "$tmp/warn" ||
		{ show "$tmp/warn"; fail "no warning for file capabilities (tar)"; }
}

run_test() {
	"$run" --help | grep -q '^usage: multisend-run' || fail "--help"
	"$run" --mode fast -- true 2>/dev/null && fail "a bad --mode was accepted"
	"$run" --batch-max 0 -- true 2>/dev/null && fail "--batch-max 0 was accepted"
	"$run" --batch-delay-us 5x -- true 2>/dev/null && fail "a bad delay was accepted"
	"$run" -- /nonexistent/program 2>/dev/null; [ $? = 127 ] || fail "missing program: not 127"
	run_refusals
	run_stats_path
	run_file_caps
	# The variables and LD_PRELOAD as the program sees them; an existing entry is kept.
	first=$(readlink -f /lib/x86_64-linux-gnu/libc.so.6 2>/dev/null || echo /lib/libc.so.6)
	first="${SHIM_TEST_PRELOAD:+$SHIM_TEST_PRELOAD }$first"
	LD_PRELOAD=$first "$run" --mode batch --batch-max 64 --batch-delay-us 200 --programs a,b \
		--defer-errors --stats rel.json -- sh -c 'env' >"$tmp/env" || fail "env"
	grep -qx "LD_PRELOAD=$first $shim" "$tmp/env" || { show "$tmp/env"; fail "LD_PRELOAD"; }
	for v in MULTISEND_PRELOAD_MODE=batch MULTISEND_BATCH_MAX=64 \
		MULTISEND_BATCH_DELAY_US=200 MULTISEND_PRELOAD_PROGRAMS=a,b \
		MULTISEND_DEFER_ERRORS=1 "MULTISEND_STATS=$(pwd)/rel.json"; do
		grep -qx "$v" "$tmp/env" || fail "multisend-run did not set $v"
	done
	rm -f rel.json
	# Nested: the shim is not added twice.
	"$run" -- "$run" -- sh -c 'echo "$LD_PRELOAD"' >"$tmp/nested"
	[ "$(cat "$tmp/nested")" = "${SHIM_TEST_PRELOAD:+$SHIM_TEST_PRELOAD }$shim" ] ||
		fail "nested LD_PRELOAD: $(cat "$tmp/nested")"
	# A statically linked program (Debian's ldconfig is static-pie): warned about.
	for s in /sbin/ldconfig /usr/sbin/ldconfig; do
		if [ -x "$s" ] && ! readelf -l "$s" 2>/dev/null | grep -q INTERP; then
			"$run" -- "$s" --version >/dev/null 2>"$tmp/warn"
			grep -q 'statically linked' "$tmp/warn" || fail "no warning for static $s"
			break
		fi
	done
	"$run" -- true 2>"$tmp/warn"
	[ -s "$tmp/warn" ] && { show "$tmp/warn"; fail "a warning for a dynamic program"; }
	# A bad variable set by hand: one line of warning, and the default.
	MULTISEND_PRELOAD_MODE=batch MULTISEND_BATCH_MAX=2000 \
		LD_PRELOAD="${SHIM_TEST_PRELOAD:+$SHIM_TEST_PRELOAD }$shim" \
		"${TESTS_DIR:?}/shim-errno" >/dev/null 2>"$tmp/warn" || fail "errno with a bad variable"
	grep -q "ignoring MULTISEND_BATCH_MAX='2000'.*using 1024" "$tmp/warn" ||
		{ show "$tmp/warn"; fail "no warning for MULTISEND_BATCH_MAX=2000"; }
	# The program filter: a program not named passes everything through (no report).
	MULTISEND_STATS="$tmp/filtered.json" MULTISEND_PRELOAD_PROGRAMS=legacy-fanout \
		"$run" --mode batch -- "${TESTS_DIR:?}/shim-errno" >/dev/null || fail "filtered"
	[ ! -s "$tmp/filtered.json" ] || fail "a filtered program reported"
	# %p in the report path becomes the process id; a path that would not fit once expanded
	# is refused with a warning and the report goes to stderr (a cut path names another file).
	# Whether it fits depends on the PID's length (the value is at most 1023 bytes, so a path
	# of %p only can outgrow the shim's buffer only with PIDs of 3 digits or more), so the
	# program runs as a PID chosen here: 10000, in a PID namespace of its own.
	pid_p=10000
	if pidns_probe; then
		MULTISEND_STATS="$tmp/pid-%p.json" as_pid "$pid_p" "$run" --mode batch -- \
			"${TESTS_DIR:?}/shim-errno" >/dev/null || fail "%p"
		[ -s "$tmp/pid-$pid_p.json" ] || { ls "$tmp"; fail "%p was not expanded to $pid_p"; }
		check_stats "$tmp/pid-$pid_p.json" "r[0]['pid'] == $pid_p"
		# As many %p as the 1023 bytes hold: 5 digits each makes ~2.5 times the value's
		# length, past any buffer of the value's size plus a margin.
		long="$tmp/"
		while [ $((${#long} + 2)) -le 1023 ]; do long="$long%p"; done
		MULTISEND_STATS="$long" as_pid "$pid_p" "$run" --mode batch -- \
			"${TESTS_DIR:?}/shim-errno" >/dev/null 2>"$tmp/warn" || fail "an over-long %p path"
		grep -q "once %p is expanded; writing the report here" "$tmp/warn" ||
			{ show "$tmp/warn"; fail "no warning for an over-long report path"; }
		grep -q "pid $pid_p" "$tmp/warn" || { show "$tmp/warn"; fail "no report on stderr"; }
	else
		# Without a PID namespace (not root, no user namespaces): %p is expanded to
		# whatever this run's PID is; the over-long case cannot be made to happen.
		show "$tmp/pidns.err"
		echo "note: no PID namespace: the over-long %p path is not checked"
		MULTISEND_STATS="$tmp/pid-%p.json" "$run" --mode batch -- \
			"${TESTS_DIR:?}/shim-errno" >/dev/null || fail "%p"
		check_stats "$(ls "$tmp"/pid-[0-9]*.json)" "'$tmp/pid-%d.json' % r[0]['pid'] == sys.argv[1]"
	fi
	# Installed: the script finds the shim under the installed tree (DESTDIR staging too).
	if [ -n "${MESON_BUILD_ROOT:-}" ] && command -v meson >/dev/null 2>&1; then
		meson install -C "$MESON_BUILD_ROOT" --no-rebuild --destdir "$tmp/inst" \
			>"$tmp/install.log" 2>&1 || { show "$tmp/install.log"; fail "meson install"; }
		irun=$(find "$tmp/inst" -name multisend-run -type f | head -n1)
		ishim=$(find "$tmp/inst" -name libmultisend-preload.so | head -n1)
		[ -x "$irun" ] && [ -f "$ishim" ] || fail "install: multisend-run or the shim missing"
		case $ishim in */libmultisend/libmultisend-preload.so) ;; *) fail "shim at $ishim" ;; esac
		"$irun" -- sh -c 'echo "$LD_PRELOAD"' >"$tmp/ild" || fail "installed multisend-run"
		[ "$(cat "$tmp/ild")" = "${SHIM_TEST_PRELOAD:+$SHIM_TEST_PRELOAD }$(readlink -f "$ishim")" ] ||
			fail "installed multisend-run preloads '$(cat "$tmp/ild")', not $ishim"
	fi
	echo "PASS: multisend-run: options, variables, LD_PRELOAD kept, static warning, installed"
}

exports_test() {
	need nm
	nm -D --defined-only "$shim" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/binary"
	sed -n '/global:/,/local:/p' "${SHIM_MAP:?}" | tr ';' '\n' | tr -d ' \t' |
		grep -v -e '^$' -e ':$' | sort -u >"$tmp/map"
	# Names defined by SHIM_EXPORT functions, by the wrapper macros, or by an asm label.
	{ grep -o 'SHIM_EXPORT [a-z_ ]*[ *]\([_a-zA-Z0-9]*\)(' "${SHIM_SRC:?}" |
		sed 's/.*[ *]\([_a-zA-Z0-9]*\)($/\1/' | grep -v -e '^shim_' -e '^name$'
	  grep -o '^[A-Z_]*_WRAP(\([_a-z0-9]*\)' "$SHIM_SRC" | sed 's/.*(//'
	  grep -o '__asm__("[_a-z0-9]*")' "$SHIM_SRC" | sed 's/.*("\(.*\)")/\1/'
	} | sort -u >"$tmp/source"
	diff "$tmp/map" "$tmp/binary" >"$tmp/d1" || { show "$tmp/d1"; fail "binary != map"; }
	diff "$tmp/map" "$tmp/source" >"$tmp/d2" || { show "$tmp/d2"; fail "source != map"; }
	echo "PASS: the shim exports exactly the $(wc -l <"$tmp/map") intercepted names"
}

# ---- where the report and the warnings go ---------------------------------------------------

# The shim in LD_PRELOAD directly (multisend-run is not what these tests are about).
preload="${SHIM_TEST_PRELOAD:+$SHIM_TEST_PRELOAD }$shim"
sdata=${TESTS_DIR:?}/shim-stderrdata

# the three lines shim-stderrdata writes as its data
want_data() {
	printf 'data line %d\n' 1 2 3 >"$tmp/want"
}

# Descriptor 2 gets the report and the warnings only while it is the process's stderr: a
# program that closed it, or was started without it, and opened a data file there gets
# exactly its data in that file. MULTISEND_BATCH_MAX is bad on purpose: a warning too.
stderr_test() { # MODE
	mode=$1
	[ -x "$sdata" ] || fail "$sdata is not built"
	want_data
	sd() { # HOW DATA: shim-stderrdata under the shim, stdout in $tmp/out
		env LD_PRELOAD="$preload" MULTISEND_PRELOAD_MODE="$mode" MULTISEND_BATCH_MAX=bogus \
			"$sdata" "$1" "$2" >"$tmp/out"
	}
	# Closes 2, opens its data file (number 2), sends, writes, exits.
	sd close "$tmp/close.data" 2>"$tmp/close.err" || { show "$tmp/out"; fail "close: exit $?"; }
	cmp "$tmp/want" "$tmp/close.data" || { show "$tmp/close.data"; fail "close: not its data alone"; }
	[ ! -s "$tmp/close.err" ] || { show "$tmp/close.err"; fail "close: wrote to the closed stderr"; }
	# Started with 2>&- (iperf3 --logfile): the data file is number 2 from the start.
	sd closed "$tmp/closed.data" 2>&- || { show "$tmp/out"; fail "closed: exit $?"; }
	cmp "$tmp/want" "$tmp/closed.data" || { show "$tmp/closed.data"; fail "2>&-: not its data alone"; }
	# Closes its stderr and opens the same file again as data: the file is the same, but it
	# is the program's data now.
	: >"$tmp/reopen.data"
	sd reopen "$tmp/reopen.data" 2>>"$tmp/reopen.data" || { show "$tmp/out"; fail "reopen: exit $?"; }
	cmp "$tmp/want" "$tmp/reopen.data" || { show "$tmp/reopen.data"; fail "reopen: not its data alone"; }
	# The controls: a program that dup2s a file onto 2 has made it its stderr (the report
	# goes there); one that leaves 2 alone has the report and the warning on it.
	sd redirect "$tmp/redirect.log" 2>"$tmp/redirect.err" || fail "redirect: exit $?"
	cmp "$tmp/want" "$tmp/out" || { show "$tmp/out"; fail "redirect: stdout is not its data"; }
	grep -q "total: 5 calls, 5 datagrams, 50 bytes" "$tmp/redirect.log" ||
		{ show "$tmp/redirect.log"; fail "redirect: no report in the program's new stderr"; }
	grep -q "ignoring MULTISEND_BATCH_MAX='bogus'" "$tmp/redirect.err" ||
		{ show "$tmp/redirect.err"; fail "redirect: no warning on the first stderr"; }
	sd keep "$tmp/keep.data" 2>"$tmp/keep.err" || { show "$tmp/out"; fail "keep: exit $?"; }
	cmp "$tmp/want" "$tmp/keep.data" || fail "keep: not its data alone"
	grep -q "total: 5 calls, 5 datagrams, 50 bytes" "$tmp/keep.err" &&
		grep -q "ignoring MULTISEND_BATCH_MAX='bogus'" "$tmp/keep.err" ||
		{ show "$tmp/keep.err"; fail "keep: no report or no warning on stderr"; }
	echo "PASS: mode $mode: the report and warnings never reach a data file at descriptor 2"
}

# MULTISEND_STATS: a symbolic link there is not followed, a FIFO there is never opened for
# writing (and does not hang the program), a file of another user is not written; the report
# goes to stderr instead, with a warning. A new file is made mode 0600.
statsfile_test() {
	[ -x "$sdata" ] || fail "$sdata is not built"
	want_data
	sf() { # PATH: shim-stderrdata keep under the shim with MULTISEND_STATS=PATH
		env LD_PRELOAD="$preload" MULTISEND_PRELOAD_MODE=batch MULTISEND_STATS="$1" \
			timeout 60 "$sdata" keep "$tmp/data" >"$tmp/out" 2>"$tmp/err"
	}
	refused() { # NAME REASON: the warning, then the report on stderr
		grep -q "cannot write the report to '.*$1': $2; writing it here" "$tmp/err" &&
			grep -q '"calls":5,"datagrams":5,"bytes":50,' "$tmp/err" ||
			{ show "$tmp/err"; fail "$1: no warning ($2) or no report on stderr"; }
	}
	printf 'precious\n' >"$tmp/target"
	chmod 600 "$tmp/target"
	cp "$tmp/target" "$tmp/target.orig"
	ln -s "$tmp/target" "$tmp/link.json"
	sf "$tmp/link.json" || { show "$tmp/out" "$tmp/err"; fail "symlink: exit $?"; }
	cmp "$tmp/target.orig" "$tmp/target" || fail "the symlink's target was written"
	[ -L "$tmp/link.json" ] || fail "the symlink was replaced"
	refused link.json 'a symbolic link, not followed'
	cmp "$tmp/want" "$tmp/data" || fail "symlink: the program's data changed"

	mkfifo "$tmp/fifo.json" || fail "mkfifo"
	# Nobody reads it: the program still finishes (timeout is a safety net: a blocking open
	# would hang here until it fires, and the exit status would say so).
	sf "$tmp/fifo.json" || { show "$tmp/out" "$tmp/err"; fail "FIFO, no reader: exit $?"; }
	refused fifo.json 'not a regular file'
	# A reader waits on it: it must see no writer but ours, which comes after the program.
	bg cat "$tmp/fifo.json" >"$tmp/fifo.got"
	catpid=$bgpid
	sf "$tmp/fifo.json" || { show "$tmp/out" "$tmp/err"; fail "FIFO, a reader: exit $?"; }
	refused fifo.json 'not a regular file'
	: >"$tmp/fifo.json" # lets the reader's open return, and its read see the end
	wait "$catpid"
	[ ! -s "$tmp/fifo.got" ] || { show "$tmp/fifo.got"; fail "the shim wrote into the FIFO"; }

	if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
		printf 'theirs\n' >"$tmp/theirs.json"
		chown nobody "$tmp/theirs.json"
		sf "$tmp/theirs.json" || { show "$tmp/out" "$tmp/err"; fail "another user's file: exit $?"; }
		[ "$(cat "$tmp/theirs.json")" = theirs ] || fail "another user's file was written"
		refused theirs.json 'owned by another user'
	fi

	# A hard link to a file of ours: the other name's file is not written.
	printf 'linked\n' >"$tmp/other"
	ln "$tmp/other" "$tmp/hard.json" || fail "ln"
	sf "$tmp/hard.json" || { show "$tmp/out" "$tmp/err"; fail "hard link: exit $?"; }
	[ "$(cat "$tmp/other")" = linked ] || fail "a hard-linked file was written"
	refused hard.json 'a file with other names (hard links)'
	"$run" --stats "$tmp/hard.json" -- true 2>"$tmp/err" && fail "multisend-run took a hard link"
	grep -q 'hard links' "$tmp/err" || { show "$tmp/err"; fail "multisend-run: no hard-link message"; }
	[ "$(cat "$tmp/other")" = linked ] || fail "multisend-run emptied a hard-linked file"

	# /dev/null, the one device allowed: no report anywhere, no warning.
	sf /dev/null || { show "$tmp/err"; fail "/dev/null: exit $?"; }
	[ ! -s "$tmp/err" ] || { show "$tmp/err"; fail "/dev/null: stderr written"; }
	[ -c /dev/null ] || fail "/dev/null is no longer a device"
	(umask 022 && sf "$tmp/new.json") || { show "$tmp/err"; fail "a new file: exit $?"; }
	[ "$(stat -c %a "$tmp/new.json")" = 600 ] || fail "a new report file is not mode 0600"
	grep -q '"datagrams":5,' "$tmp/new.json" || { show "$tmp/new.json"; fail "no report in a new file"; }
	[ ! -s "$tmp/err" ] || { show "$tmp/err"; fail "stderr written with a usable report file"; }
	echo "PASS: MULTISEND_STATS: symlink not followed, FIFO never opened, another user's file refused, /dev/null discards, new file 0600"
}

# Bad values are shown escaped and cut: one line per bad variable, no raw control byte or byte
# >= 0x7f, bounded length.
warn_test() {
	[ -x "$sdata" ] || fail "$sdata is not built"
	nl='
'
	esc=$(printf '\033]0;title\007\033[2J')
	big=$(head -c 100000 /dev/zero | tr '\0' 7)
	hi=$(printf 'x\377\200y')
	env LD_PRELOAD="$preload" MULTISEND_STATS="$tmp/w.json" \
		MULTISEND_PRELOAD_MODE="bat${nl}ch$esc" MULTISEND_BATCH_MAX="$big" \
		MULTISEND_BATCH_DELAY_US="$hi" MULTISEND_DEFER_ERRORS='\' \
		"$sdata" keep "$tmp/data" >"$tmp/out" 2>"$tmp/err" || { show "$tmp/out"; fail "exit $?"; }
	show "$tmp/err"
	[ "$(wc -l <"$tmp/err")" = 4 ] || fail "not one line per bad variable"
	[ "$(grep -c '^libmultisend-preload: ignoring MULTISEND_[A-Z_]*=' "$tmp/err")" = 4 ] ||
		fail "not four warnings"
	LC_ALL=C tr -d '\n' <"$tmp/err" | LC_ALL=C grep -q '[^ -~]' && fail "a raw control or high byte"
	LC_ALL=C awk 'length($0) > 300 { exit 1 }' "$tmp/err" || fail "a warning longer than 300 bytes"
	grep -qF "MULTISEND_PRELOAD_MODE='bat\x0ach\x1b]0;title\x07\x1b[2J': not metrics" "$tmp/err" ||
		fail "MULTISEND_PRELOAD_MODE not shown escaped"
	grep -qF "MULTISEND_BATCH_MAX='$(printf '%0128d' 0 | tr 0 7)...': not a whole" "$tmp/err" ||
		fail "the 100 kB value not cut to 128 characters and ..."
	grep -qF "MULTISEND_BATCH_DELAY_US='x\xff\x80y'" "$tmp/err" || fail "bytes >= 0x7f not escaped"
	grep -qF "MULTISEND_DEFER_ERRORS='\\\\'" "$tmp/err" || fail "a backslash not doubled"
	echo "PASS: warnings: values escaped and cut, one line each"
}

# ---- live counters ---------------------------------------------------------------------------

# live_check FILE REPORT PYTHON-CONDITIONS...: FILE holds multisend-stat's JSON lines; l is
# the list of the "shim" slot's counters line by line, z the last line's, p the pids, st the
# slot states; t is the report's totals and f its flushes (REPORT, as check_stats reads it),
# `same` the totals that have the same name in both.
live_check() {
	_f=$1 _r=$2
	shift 2
	python3 - "$_f" "$_r" "$@" <<'PY' || { show "$_f"; fail "live counters check"; }
import json, sys
lines = [json.loads(x) for x in open(sys.argv[1]).read().splitlines() if x.strip()]
slots = [[s for s in x.get("slots", []) if s["name"] == "shim"] for x in lines]
if not lines or not all(len(s) == 1 for s in slots):
    sys.exit("multisend-stat showed no single 'shim' slot in every line")
l = [s[0]["counters"] for s in slots]
st = [s[0]["state"] for s in slots]
p = [x["pid"] for x in lines]
z = l[-1]
try:
    r = [json.loads(x) for x in open(sys.argv[2]).read().splitlines() if x.strip()]
except FileNotFoundError:
    r = []
t, f = (r[0]["total"], r[0]["flushes"]) if r else ({}, {})
same = ("calls", "datagrams", "bytes", "batched", "passed_through", "errors", "errors_at_flush",
        "syscalls", "fanout_runs", "fanout_destinations", "sendmmsg", "single_sends_at_flush",
        "reentered_calls", "reentered_queued", "reentered_overflow", "reentered_unordered")
for cond in sys.argv[3:]:
    if not eval(cond):
        if t:
            print("report:", json.dumps(r[0]), file=sys.stderr)
        sys.exit("live counters check failed: " + cond)
PY
}

live_test() { # MODE legacy|threads
	mode=$1 kind=$2
	need python3
	stat=${STAT_BIN:?}
	[ -x "$stat" ] || fail "$stat is not built"
	n=16 size=64
	if [ "$kind" = legacy ]; then
		[ -x "$legacy_bin" ] || skip "examples are not built (-Dexamples=false)"
		m=3000 # at 1500 per second: 2 s, long enough to watch it run
		start_receiver "$n" "$m" --size "$size" --identical
		bg "$run" --mode "$mode" --stats "$tmp/stats.json" --stats-shm "$tmp/live-%p" -- \
			"$legacy_bin" --dest "127.0.0.1:$base" --subscribers "$n" --messages "$m" \
			--rate 1500 --size "$size" --identical >"$tmp/legacy" 2>&1
		lpid=$bgpid
		_n=0
		while [ ! -s "$tmp/live-$lpid" ] && [ "$_n" -lt 100 ]; do
			sleep 0.05
			_n=$((_n + 1))
		done
		[ -s "$tmp/live-$lpid" ] || { show "$tmp/legacy"; fail "no live-counter file"; }
		# Watched while it sends: the calls rise in every interval, from the right pid.
		"$stat" --json --interval 200 --count 3 "$tmp/live-$lpid" >"$tmp/during" \
			2>"$tmp/during.err" || { show "$tmp/during.err"; fail "multisend-stat: exit $?"; }
		kill -0 "$lpid" 2>/dev/null || fail "legacy-fanout was done before it was watched"
		live_check "$tmp/during" /nonexistent "len(l) == 3" "all(x == $lpid for x in p)" \
			"all(a['calls'] < b['calls'] for a, b in zip(l, l[1:]))" \
			"all(x == 'live' for x in st)" "0 < z['calls'] < $n * $m"
		wait "$lpid" || { show "$tmp/legacy"; fail "legacy-fanout exited with $?"; }
		finish_receiver
		show "$tmp/legacy"
		grep -q ', errors 0,' "$tmp/legacy" || fail "legacy-fanout saw errors"
	else
		bin=${TESTS_DIR:?}/shim-threads
		[ -x "$bin" ] || fail "$bin is not built"
		m=200
		start_receiver "$n" "$m" --size "$size" --identical
		"$run" --mode "$mode" --stats "$tmp/stats.json" --stats-shm "$tmp/live-%p" -- \
			"$bin" "$base" "$n" "$m" >"$tmp/out" 2>&1 ||
			{ show "$tmp/out"; fail "shim-threads exited with $?"; }
		finish_receiver
		show "$tmp/out"
		set -- "$tmp"/live-*
		[ $# = 1 ] && [ -s "$1" ] || fail "expected one live-counter file, found: $*"
		lpid=${1##*-}
	fi
	# The program is gone and its slot closed: multisend-stat says so and stops by itself,
	# and the final counters are the report's.
	timeout 20 "$stat" --json --interval 100 "$tmp/live-$lpid" >"$tmp/after" \
		2>"$tmp/after.err" || { show "$tmp/after.err"; fail "multisend-stat after the end: exit $?"; }
	show "$tmp/after.err"
	grep -q "publisher $lpid (.*) has exited and closed all its slots" "$tmp/after.err" ||
		fail "multisend-stat did not say the publisher had exited"
	live_check "$tmp/after" "$tmp/stats.json" "len(r) == 1" "st[-1] == 'closed'" \
		"z['calls'] == $n * $m" "z['datagrams'] == $n * $m" "z['bytes'] == $n * $m * $size" \
		"all(z[k] == t[k] for k in same)" \
		"all(z['calls_' + k] == v for k, v in t['calls_by'].items())" \
		"all(z['flush_' + k] == v for k, v in f.items())"
	[ "$mode" != metrics ] || live_check "$tmp/after" "$tmp/stats.json" \
		"z['syscalls_if_batched'] == t['syscalls_if_batched']"
	[ "$mode" != batch ] || live_check "$tmp/after" "$tmp/stats.json" "z['batched'] >= $n * ($m - 1)"
	sed -n '$s/^/  multisend-stat: /p' "$tmp/after" | cut -c1-400
	echo "PASS: live counters of $kind under the shim, mode $mode, watched and final"
}

# xdp_test v4|v6|local: batch mode with --xdp-iface (kernel bypass), legacy-fanout in a private
# namespace S sending over a veth pair to fanout-receiver in namespace R (both made here, with
# random names, deleted at exit); the neighbour entry is set permanent so that every batched
# datagram can go as a frame from the first batch on. local: the receiver on S's loopback,
# which the bypass never carries (every batched datagram by the kernel's path, counted local).
xdp_test() {
	kind=$1
	need python3
	[ -x "$legacy_bin" ] && [ -x "$recv_bin" ] || skip "examples are not built (-Dexamples=false)"
	ns_pair_up
	n=64 m=300 size=64
	case $kind in
	v4) listen=10.77.0.2 dest=10.77.0.2 v6= recvns=$nsR ;;
	v6) listen='[fd77::2]' dest='[fd77::2]' v6=--ipv6 recvns=$nsR ;;
	local) listen=127.0.0.1 dest=127.0.0.1 v6= recvns=$nsS ;;
	*) fail "xdp_test: v4, v6 or local" ;;
	esac
	base=20000
	bg inns "$recvns" "$recv_bin" --listen "$listen:$base" --subscribers $n \
		--messages $m --size $size --idle-timeout 60 >"$tmp/receiver" 2>"$tmp/receiver.err"
	recvpid=$bgpid
	wait_line "$tmp/receiver" '^ready$' "$recvpid" 10 ||
		{ show "$tmp/receiver.err"; fail "fanout-receiver did not start"; }
	inns "$nsS" "$run" --mode batch --xdp-iface xs0 --stats "$tmp/stats.json" -- \
		"$legacy_bin" --dest "$dest:$base" --subscribers $n --messages $m --rate 2000 \
		--size $size $v6 >"$tmp/legacy" 2>"$tmp/legacy.err" ||
		{ show "$tmp/legacy" "$tmp/legacy.err"; fail "legacy-fanout exited with $?"; }
	grep -q 'kernel bypass.*unavailable' "$tmp/legacy.err" &&
		{ show "$tmp/legacy.err"; skip "AF_XDP unavailable here"; }
	finish_receiver
	grep -q ', errors 0,' "$tmp/legacy" || fail "legacy-fanout saw errors"
	total=$((n * m))
	check_stats "$tmp/stats.json" "t['calls'] == $total" "t['datagrams'] == $total" \
		"t['errors'] == 0 and t['errors_at_flush'] == 0" "t['batched'] > 0"
	if [ "$kind" = local ]; then
		check_stats "$tmp/stats.json" "t['xdp_frames'] == 0" \
			"t['xdp_fallback']['local'] == t['batched']" \
			"sum(t['xdp_fallback'].values()) == t['batched']"
	else
		check_stats "$tmp/stats.json" "t['xdp_frames'] == t['batched']" \
			"sum(t['xdp_fallback'].values()) == 0" "t['xdp_kicks'] > 0"
	fi
	sed -n 's/^/  report: /p' "$tmp/stats.json" | cut -c1-400
	echo "PASS: legacy-fanout under batch mode with kernel bypass ($kind), $n subscribers x $m"
}

case ${1:-} in
fanout) shift; fanout "$@" ;;
xdp) xdp_test "$2" ;;
prog) shift; prog "$@" ;;
errno) errno_test "$2" ;;
efault) shift; efault_test "$@" ;;
efault-signal) efault_signal_test "$2" ;;
segv) shift; segv_test "$@" ;;
deferred) deferred_test "$2" ;;
patterns) patterns_test "$2" ;;
waitflush) waitflush_test ;;
fortify) fortify ;;
python) python_test "$2" ;;
socat) socat_test "$2" ;;
nc) nc_test "$2" ;;
setuid) setuid_test ;;
run) run_test ;;
exports) exports_test ;;
live) live_test "$2" "$3" ;;
stderr) stderr_test "$2" ;;
statsfile) statsfile_test ;;
warnings) warn_test ;;
*) fail "usage: $0 fanout|xdp|prog|errno|deferred|fortify|python|socat|nc|setuid|run|exports|live|stderr|statsfile|warnings ..." ;;
esac
