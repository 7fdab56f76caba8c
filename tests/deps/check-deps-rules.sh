#!/usr/bin/env bash
# check-deps.py's data-file rules against a tree made here: sources that look names up in
# /etc/protocols, /etc/services and /etc/hosts, and an install-deps without netbase, must fail
# naming each file, the package and the line; the same tree with netbase listed must pass. A
# name the file lacks, and a use that is only a comment, are told apart. Skips (77) without dpkg
# or without netbase installed here (the files must exist to be resolved).
set -u
here=$(cd "$(dirname "$0")" && pwd)
command -v dpkg >/dev/null && dpkg-query -W -f='${Status}' netbase 2>/dev/null |
	grep -q 'install ok installed' || { echo "SKIP: no dpkg or no netbase here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- check-deps.py printed:"; cat "$tmp/out"; exit 1; }

mkdir -p "$tmp/src/scripts" "$tmp/src/tests"
write_deps() {
	printf '#!/usr/bin/env bash\npackages=(python3 iproute2 %s)\n' "$1" >"$tmp/src/scripts/install-deps"
}
cat >"$tmp/src/tests/rules.sh" <<'SH'
#!/bin/sh
# ip rule add ipproto tcp  (a comment: not a use)
ip rule add ipproto udp dport domain prohibit
ip rule add ipproto nosuchproto prohibit
SH
cat >"$tmp/src/tests/lookup.py" <<'PY'
import socket
socket.getaddrinfo("localhost", 0)
PY

write_deps ""
python3 "$here/check-deps.py" "$tmp/src" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "exit status $rc without netbase in the list, expected 1"
grep -q '^FAIL: /etc/protocols ([a-z ]*udp[a-z ]*): from package netbase .*tests/rules.sh:3' "$tmp/out" ||
	fail "/etc/protocols (ipproto udp) not charged to netbase at tests/rules.sh:3"
grep -q '^FAIL: /etc/services (domain): from package netbase .*tests/rules.sh:3' "$tmp/out" ||
	fail "/etc/services (dport domain) not charged to netbase"
grep -q '^FAIL: /etc/hosts (localhost): from package netbase (written by its maintainer script).*tests/lookup.py:2' "$tmp/out" ||
	fail "/etc/hosts (localhost) not charged to netbase's postinst"
grep -q '^FAIL: /etc/protocols has no entry "nosuchproto".*tests/rules.sh:4' "$tmp/out" ||
	fail "an unknown protocol name not reported"
grep -q '"tcp"\|(tcp\|tests/rules.sh:2' "$tmp/out" && fail "a comment counted as a use"

# With netbase listed, only the name /etc/protocols lacks is left.
write_deps netbase
python3 "$here/check-deps.py" "$tmp/src" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "exit status $rc with netbase listed and one unknown name, expected 1"
[ "$(grep -c '^FAIL' "$tmp/out")" -eq 1 ] || fail "with netbase listed, expected one failure"
sed -i '/nosuchproto/d' "$tmp/src/tests/rules.sh"
python3 "$here/check-deps.py" "$tmp/src" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "exit status $rc with netbase listed, expected 0"
grep -q '3 data files covered' "$tmp/out" || fail "expected 3 data files covered"
echo "ok: /etc/protocols, /etc/services and /etc/hosts are charged to netbase, and pass once it is listed"
