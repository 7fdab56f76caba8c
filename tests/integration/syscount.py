#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Count the send-family system calls a fan-out really makes, with strace, on the real
library, and check them against each backend's promise and the library's own counter:
  loop      one sendto per destination
  sendmmsg  one sendmmsg per socket per 1024 destinations
  io_uring  one io_uring_enter per fan-out, and no send-family call at all
  auto      (MS_BACKEND_AUTO, switching backends as it measures them) the send-family calls
            the library counts, and beyond them, per fan-out it timed (its own count), exactly
            two clock_gettime(CLOCK_THREAD_CPUTIME_ID) and two getrusage calls, and one or two
            opens of /proc/thread-self/schedstat (the second only for a thread that was
            preempted): none on any other fan-out
Usage: syscount.py SYSCOUNT_BINARY"""
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

CALLS = ["sendto", "sendmsg", "sendmmsg", "io_uring_enter"]
AUTO_CALLS = ["clock_gettime", "getrusage", "openat"]
ROUNDS = 5


def run(binary, backend, kind, n, rounds=ROUNDS):
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        p = subprocess.run(["strace", "-f", "-qq", "-c", "-o", out.name,
                            "-e", "trace=" + ",".join(CALLS),
                            binary, backend, kind, str(n), str(rounds)],
                           capture_output=True, text=True,
                           # LeakSanitizer cannot run under ptrace; leaks are checked elsewhere.
                           env=dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "")
                                    + ":detect_leaks=0"))
        if p.returncode == 77:
            return None
        if p.returncode != 0:
            sys.exit(f"FAIL {backend} {kind} N={n}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        counts = {c: 0 for c in CALLS}
        for line in out.read().splitlines():
            f = line.split()
            if len(f) >= 5 and f[-1] in counts:
                counts[f[-1]] = int(f[3])
        lib = int(re.search(r"syscalls=(\d+)", p.stdout).group(1))
        return counts, lib


def run_auto(binary, kind, n, rounds):
    """Every traced call listed (not summed), so that clock_gettime counts only when its
    clock is CLOCK_THREAD_CPUTIME_ID, and openat only for the scheduler's statistics."""
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        p = subprocess.run(["strace", "-f", "-qq", "-o", out.name,
                            "-e", "trace=" + ",".join(CALLS + AUTO_CALLS),
                            binary, "auto", kind, str(n), str(rounds)],
                           capture_output=True, text=True,
                           env=dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "")
                                    + ":detect_leaks=0"))
        if p.returncode != 0:
            sys.exit(f"FAIL auto {kind} N={n}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        counts = {c: 0 for c in CALLS + AUTO_CALLS}
        for line in out.read().splitlines():
            m = re.match(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*)", line)
            if not m or m.group(1) not in counts:
                continue
            if m.group(1) == "clock_gettime" and not m.group(2).startswith("CLOCK_THREAD_CPUTIME_ID"):
                continue
            if m.group(1) == "openat" and "/proc/thread-self/schedstat" not in m.group(2):
                continue
            counts[m.group(1)] += 1
        lib = int(re.search(r"syscalls=(\d+)", p.stdout).group(1))
        return counts, lib, int(re.search(r"sampled=(\d+)", p.stdout).group(1))


def expected(backend, kind, n):
    sockets = 1 if kind == "shared" else n
    if backend == "loop":
        return {"sendto": n}
    if backend == "sendmmsg":
        return {"sendmmsg": sockets * math.ceil(n / sockets / 1024)}
    return {"io_uring_enter": 1}


def main():
    if not shutil.which("strace"):
        print("strace is not installed: skipped (scripts/install-deps installs it)")
        sys.exit(77)
    binary = sys.argv[1]
    failed = 0
    print(f"{'backend':9} {'sockets':9} {'N':>5}  per fan-out (strace)           library counter")
    for backend in ["loop", "sendmmsg", "io_uring"]:
        for kind in ["shared", "connected"]:
            for n in [64, 3000]:
                r = run(binary, backend, kind, n)
                if r is None:
                    print(f"{backend:9} unavailable here: skipped")
                    break
                counts, lib = r
                per = {c: counts[c] / ROUNDS for c in CALLS if counts[c]}
                want = expected(backend, kind, n)
                total = sum(counts.values())
                ok = per == {k: float(v) for k, v in want.items()} and lib == total
                failed += not ok
                shown = ", ".join(f"{c} {v:g}" for c, v in per.items())
                print(f"{backend:9} {kind:9} {n:5}  {shown:30} {lib / ROUNDS:g}"
                      f"{'' if ok else '   FAIL: expected ' + str(want)}")
    # AUTO: a re-check every 16 fan-outs, so that 200 fan-outs explore, settle and re-check.
    # Only reads of the thread's CPU clock are the library's (a sanitizer's runtime reads
    # other clocks by system call too).
    os.environ["MULTISEND_AUTO_RECHECK"] = "16"
    for kind in ["shared", "connected"]:
        counts, lib, sampled = run_auto(binary, kind, 64, 200)
        sends = sum(counts[c] for c in CALLS)
        ok = (sends == lib and counts["clock_gettime"] == 2 * sampled
              and counts["getrusage"] == 2 * sampled
              and sampled <= counts["openat"] <= 2 * sampled and 0 < sampled < 200)
        failed += not ok
        print(f"auto      {kind:9} {64:5}  {sends} send-family calls, {counts['clock_gettime']} "
              f"clock_gettime, {counts['getrusage']} getrusage, {counts['openat']} schedstat "
              f"opens over 200 fan-outs; library: {lib} sends, {sampled} timed"
              f"{'' if ok else '   FAIL: expected the same sends, 2 CPU clock reads, 2 getrusage and 1-2 schedstat opens per timed one'}")
    sys.exit(1 if failed else 0)


main()
