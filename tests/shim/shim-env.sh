# SPDX-License-Identifier: MIT
# shim-env.sh: what shim-test.sh and bypass-test.sh share, sourced after harness_init. Sets
# run, shim, recv_bin and legacy_bin, defines need(), and puts an AddressSanitizer build's
# runtime first in LD_PRELOAD. POSIX sh (dash).

# need PROGRAM...: skip the test (77) unless every one is installed.
need() {
	for _c in "$@"; do
		command -v "$_c" >/dev/null 2>&1 || skip "$_c is not installed (scripts/install-deps)"
	done
}

run=${SHIM_DIR:?}/multisend-run
shim=$SHIM_DIR/libmultisend-preload.so
recv_bin=${EXAMPLES_DIR:-}/fanout-receiver
legacy_bin=${EXAMPLES_DIR:-}/legacy-fanout
[ -x "$run" ] && [ -f "$shim" ] || fail "the shim is not built in $SHIM_DIR"
# An AddressSanitizer build of the shim (scripts/test's ASan run) needs the ASan runtime first
# in LD_PRELOAD, before the shim, in every program it is loaded into, including python3,
# socat and nc, which are not built with ASan (their own leaks are not ours to report).
if [ -z "${SHIM_TEST_PRELOAD:-}" ] && command -v ldd >/dev/null 2>&1; then
	SHIM_TEST_PRELOAD=$(ldd "$shim" 2>/dev/null | sed -n 's/.*libasan[^ ]* => \([^ ]*\).*/\1/p' |
		head -n1)
fi
if [ -n "${SHIM_TEST_PRELOAD:-}" ]; then
	export LD_PRELOAD="$SHIM_TEST_PRELOAD"
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
