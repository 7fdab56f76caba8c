#!/usr/bin/env bash
# multisend-stat --json: every object starts with "schema_version":1 (docs/json.md), on a real
# live-counter file left by md-publisher (the file keeps its final values after the publisher
# exits, so no publisher has to run while the reader does).
# Usage: stat-json.sh MD_PUBLISHER MULTISEND_STAT   (exit 0 pass, 1 fail)
set -euo pipefail
pub=$1 stat=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stat-json.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
timeout 30 "$pub" --control 0 --count 1 --stats-shm "$tmp/live" >/dev/null 2>&1 ||
	{ echo "FAIL: md-publisher exited with $?"; exit 1; }
timeout 30 "$stat" --json --count 1 --interval 10 "$tmp/live" >"$tmp/out" 2>"$tmp/err" ||
	{ cat "$tmp/err"; echo "FAIL: multisend-stat --json exited with $?"; exit 1; }
python3 - "$tmp/out" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.strip()]
assert lines, "no JSON line"
for l in lines:
    o = json.loads(l)
    first = next(iter(o))
    assert first == "schema_version" and o[first] == 1, f"first member {first}={o[first]!r}"
    assert "slots" in o, "no slots"
print(f"PASS: {len(lines)} line(s), schema_version 1 first")
PY
