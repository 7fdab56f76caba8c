#!/usr/bin/env bash
# Runs every shell block of README.md that is marked runnable, so the README cannot drift.
#
# The marker: a line `<!-- runnable -->` directly before a fenced block that opens with ```sh.
# Such blocks are concatenated in README order and run as ONE bash script (set -euo pipefail),
# so a variable or an `export` in one block holds in the blocks after it, as when a reader types
# them into one shell. They run from a fresh copy of the source tree (git ls-files, or every file
# but build directories when this is not a git checkout) with HOME set to a temporary directory:
# the README's `$HOME/opt/libmultisend` prefix and its `build/release` tree are created there and
# removed afterwards. The README's example (the first ```c block under "## Using it") is saved
# as demo.c in that copy first, as the README asks the reader to do.
#
# Blocks NOT marked on purpose:
#   - the quick start (./scripts/main, ./scripts/test): they install Debian packages with apt,
#     then run a one-minute benchmark and the whole ~20-minute test suite five ways; CI runs
#     scripts/test itself (.ci/run), and a test cannot run the suite it is part of;
#   - the system-wide install (sudo meson install, sudo ldconfig): it needs root and writes to
#     /usr/local and the linker's cache, which a test must not touch.
# A README without runnable blocks fails: the marker must not vanish unnoticed.
#
# Usage: readme-runnable.sh SOURCE_ROOT   (exit 0 pass, 1 fail, 77 skipped: no C compiler)
set -euo pipefail
src=$(cd "$1" && pwd)
command -v cc >/dev/null || { echo "SKIP: no cc"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/readme-runnable.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mkdir "$tmp/src" "$tmp/home"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	# the working tree's files (committed or not), as a reader's clone would have them
	(cd "$src" && git ls-files -z --cached --others --exclude-standard) |
		(cd "$src" && xargs -0 cp --parents -t "$tmp/src" 2>/dev/null) || true
else
	(cd "$src" && find . -path './build*' -prune -o -type f -print0) |
		(cd "$src" && xargs -0 cp --parents -t "$tmp/src")
fi
[ -f "$tmp/src/meson.build" ] || { echo "FAIL: could not copy the source tree"; exit 1; }

python3 - "$src/README.md" "$tmp/script.sh" "$tmp/src/demo.c" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"<!-- runnable -->\n```sh\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("FAIL: README.md has no block marked <!-- runnable -->")
marked = text.count("<!-- runnable -->")
if marked != len(blocks):
    sys.exit(f"FAIL: {marked} runnable markers, but only {len(blocks)} are directly before a ```sh block")
with open(sys.argv[2], "w") as f:
    f.write("set -euo pipefail\nset -x\n")
    for i, b in enumerate(blocks, 1):
        f.write(f"# --- runnable block {i}\n{b}")
section = text.split("## Using it", 1)
m = re.search(r"```c\n(.*?)```", section[1] if len(section) == 2 else "", re.S)
if not m:
    sys.exit("FAIL: README.md: no ```c block under '## Using it'")
open(sys.argv[3], "w").write(m.group(1))
print(f"{len(blocks)} runnable blocks")
PY

# Nothing of the calling environment that would point at the build tree or another install.
cd "$tmp/src"
if env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u LD_PRELOAD -u MESON_BUILD_ROOT \
	HOME="$tmp/home" bash "$tmp/script.sh" >"$tmp/log" 2>&1; then
	tail -n 40 "$tmp/log"
	echo "PASS: every runnable block of README.md ran"
else
	rc=$?
	cat "$tmp/log"
	echo "FAIL: the runnable blocks of README.md stopped with exit status $rc (log above)"
	exit 1
fi
