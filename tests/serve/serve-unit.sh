#!/bin/sh
# SPDX-License-Identifier: MIT
# md-relay@.service against md-relay (registered by examples/meson.build):
#
#   serve-unit.sh UNIT MD-SERVE.H RELAY
#
# - the relay is restarted whatever ended it: Restart=always (md-relay exits 0 after its
#   upstream's END, which on-failure would leave dead), no start limit, and the one status a
#   restart cannot mend (a bad option) excluded: the status md-relay really gives for one;
# - LimitNOFILE leaves room for the default connection cap, the descriptors kept for the rest
#   and every --dest (md-serve.h's MD_MAX_CONNS_DEFAULT, MD_FD_HEADROOM, MD_MAX_FIXED);
# - MemoryMax holds the default backlog cap (MD_BACKLOG_MAX_DEFAULT) and 32 MiB for the rest.
#
# Exit status: 0 pass, 1 fail, 77 skip. POSIX sh (dash).
set -u
unit=$1 serve=$2 relay=$3
status=0

no() {
	echo "$unit: $*" >&2
	status=1
}

[ -r "$unit" ] && [ -r "$serve" ] || { echo "SKIP: $unit or $serve missing" >&2; exit 77; }
[ -x "$relay" ] || { echo "SKIP: $relay is not built" >&2; exit 77; }

# value SECTION KEY: the last value of KEY in [SECTION] (systemd: the last assignment wins).
value() {
	awk -v sec="[$1]" -v key="$2" '
		/^\[/ { in_sec = ($0 == sec); next }
		in_sec && index($0, key "=") == 1 { v = substr($0, length(key) + 2) }
		END { print v }' "$unit"
}

# define NAME: the number md-serve.h defines NAME as (shifts of ull/u constants evaluated).
define() {
	sed -n "s/^#define $1 \\([^/]*\\).*/\\1/p" "$serve" |
		sed 's/[()]//g; s/\([0-9]\)ull/\1/g; s/\([0-9]\)u\b/\1/g' |
		awk '{ n = split($0, w, "<<"); v = w[1] + 0; if (n == 2) v = v * 2 ^ (w[2] + 0);
		       printf "%d\n", v }'
}

[ "$(value Service Restart)" = always ] ||
	no "Restart=$(value Service Restart), not always: an END (exit 0) would leave the relay dead"
[ "$(value Unit StartLimitIntervalSec)" = 0 ] ||
	no "a start limit: exiting a few times in a row would switch the relay off"
rs=$(value Service RestartSec)
[ -n "$rs" ] && [ "${rs%s}" -ge 1 ] 2>/dev/null || no "RestartSec=$rs: want 1 s or more"

# The status a bad option gives, which the unit must not restart on (and nothing else).
"$relay" --no-such-option >/dev/null 2>&1
bad=$?
[ "$(value Service RestartPreventExitStatus)" = "$bad" ] ||
	no "RestartPreventExitStatus=$(value Service RestartPreventExitStatus), md-relay exits $bad on a bad option"

conns=$(define MD_MAX_CONNS_DEFAULT)
headroom=$(define MD_FD_HEADROOM)
fixed=$(define MD_MAX_FIXED)
backlog=$(define MD_BACKLOG_MAX_DEFAULT)
[ -n "$conns" ] && [ -n "$headroom" ] && [ -n "$fixed" ] && [ -n "$backlog" ] ||
	{ echo "FAIL: md-serve.h's limits not found" >&2; exit 1; }
nofile=$(value Service LimitNOFILE)
[ -n "$nofile" ] && [ "$nofile" -ge $((conns + headroom + fixed)) ] 2>/dev/null ||
	no "LimitNOFILE=$nofile < $conns connections + $headroom + $fixed --dest"
mem=$(value Service MemoryMax)
case $mem in
*K) mem=$((${mem%K} * 1024)) ;;
*M) mem=$((${mem%M} * 1048576)) ;;
*G) mem=$((${mem%G} * 1073741824)) ;;
'' | *[!0-9]*) no "MemoryMax='$mem': want a size"; mem=0 ;;
esac
[ "$mem" = 0 ] || [ "$mem" -ge $((backlog + 33554432)) ] ||
	no "MemoryMax=$(value Service MemoryMax) < the $backlog B backlog cap + 32 MiB"

[ "$status" = 0 ] || { echo "FAIL: md-relay@.service" >&2; exit 1; }
echo "PASS: md-relay@.service: Restart=always, no start limit, not on status $bad;" \
	"LimitNOFILE $nofile >= $((conns + headroom + fixed)); MemoryMax $mem >= $((backlog + 33554432))"
