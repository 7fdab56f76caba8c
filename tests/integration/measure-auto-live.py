#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""measure-auto-live.py: MS_BACKEND_AUTO in a live publisher (a measurement, not a test).

  measure-auto-live.py BUILD [ROUNDS] [N,N...]

examples/md-publisher publishes --rate 0 (as fast as it can) 64-byte ticks to N subscribers
on loopback (one md-subscriber process holding N subscriptions), with each fixed backend
(--backend loop, sendmmsg, io_uring) and with AUTO, one run each per round, the order
rotated every round. The same number of destinations per run at every N (about 2.5 million).

What it prints, per N:
  - each run's ticks per second (md-publisher's own summary: ticks over the time from the
    first tick to the last, a measure no CPU clock can fool) and, for AUTO, the backend it
    ended on;
  - per backend: the median ticks/s [min-max], and its ratio to the fastest fixed backend
    (the one with the highest median), as the median of the per-round ratios [min-max];
  - AUTO's choices over the rounds and how many times the choice changed from one run to the
    next (a flip);
  - AUTO's own figures at its last decision, read from the publisher's live-counter file
    with multisend-stat --json: ns per destination by time on the CPU (auto_ns_*, what it
    decides by) and by the thread CPU clock alone (auto_cpu_ns_*), medians over the rounds,
    and how many measured fan-outs had a CPU clock that charged too little (auto_clock_low).
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

FIXED = ["loop", "sendmmsg", "io_uring"]
DESTS_PER_RUN = 2_500_000
SIZE = 64


def die(msg):
    print("measure-auto-live: " + msg, file=sys.stderr)
    sys.exit(1)


def one_run(build, tmp, n, backend, tag):
    pub = os.path.join(build, "examples", "md-publisher")
    sub = os.path.join(build, "examples", "md-subscriber")
    stat = os.path.join(build, "bench", "multisend-stat")
    live = os.path.join(tmp, "live-" + tag)
    count = max(1000, DESTS_PER_RUN // n)
    p = subprocess.Popen([pub, "--control", "0", "--count", str(count), "--rate", "0",
                          "--size", str(SIZE), "--subscribers", str(n), "--join-timeout", "60",
                          "--backend", backend, "--stats-shm", live],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.match(r"control port (\d+)", line)
    if not m:
        p.kill()
        die("md-publisher printed %r, not its control port: %s" % (line, p.stderr.read()))
    s = subprocess.Popen([sub, "--control", "127.0.0.1:" + m.group(1), "--sockets", str(n),
                          "--timeout", "300"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, err = p.communicate(timeout=600)
    # The subscriber ends on END; at full speed its buffers may be full when the ENDs come
    # (what it received is not this measurement's business): ended after 10 s if still there.
    try:
        s.wait(timeout=10)
    except subprocess.TimeoutExpired:
        s.terminate()
        s.wait(timeout=60)
    if p.returncode != 0:
        die("md-publisher --backend %s, N = %d: exit %d: %s" % (backend, n, p.returncode, err))
    m = re.search(r"backend (\S+), .*ticks (\d+), .*failures (\d+), .*rate (\d+) ticks/s", out)
    if not m or int(m.group(2)) != count:
        die("md-publisher's summary: %r" % out)
    counters = {}
    st = subprocess.run([stat, "--json", "--count", "1", live], capture_output=True, text=True)
    if st.stdout:
        o = json.loads(st.stdout.splitlines()[0])
        slots = o.get("slots") or (o.get("files") or [{}])[0].get("slots", [])
        if slots:
            counters = slots[0].get("counters", {})
    os.unlink(live)
    return {"rate": int(m.group(4)), "backend": m.group(1), "failures": int(m.group(3)),
            "counters": counters}


def fmt_range(xs, f="%.0f"):
    return (f + " [" + f + "-" + f + "]") % (statistics.median(xs), min(xs), max(xs))


def main():
    if len(sys.argv) < 2:
        die("usage: measure-auto-live.py BUILD [ROUNDS] [N,N...]")
    build = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    ns = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "64,256").split(",")]
    for prog in ("examples/md-publisher", "examples/md-subscriber", "bench/multisend-stat"):
        if not os.access(os.path.join(build, prog), os.X_OK):
            die("no %s in %s (configure it with -Dexamples=true)" % (prog, build))
    backends = FIXED + ["auto"]
    print("md-publisher --rate 0 --size %d to N subscribers on loopback (one md-subscriber "
          "with N sockets); backends by --backend, AUTO by --backend auto; %d rounds, the "
          "order rotated each round; about %d destinations per run" %
          (SIZE, rounds, DESTS_PER_RUN))
    print("load average at the start: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            res = {b: [] for b in backends}
            print("\nN = %d, %d ticks per run; ticks/s per run (AUTO's backend):" %
                  (n, max(1000, DESTS_PER_RUN // n)))
            print("round  " + "  ".join("%10s" % b for b in backends))
            for r in range(rounds):
                order = backends[r % len(backends):] + backends[:r % len(backends)]
                for b in order:
                    res[b].append(one_run(build, tmp, n, b, "%d-%s-%d" % (n, b, r)))
                print("%5d  " % (r + 1) + "  ".join(
                    "%10s" % ("%d" % res[b][r]["rate"] +
                              ("" if b != "auto" else " (%s)" % res[b][r]["backend"]))
                    for b in backends), flush=True)
            med = {b: statistics.median(x["rate"] for x in res[b]) for b in backends}
            best = max(FIXED, key=lambda b: med[b])
            print("backend     ticks/s median [min-max]    vs %s (the fastest fixed), median of "
                  "per-round ratios [min-max]" % best)
            for b in backends:
                ratios = [res[b][r]["rate"] / res[best][r]["rate"] for r in range(rounds)]
                print("%-10s  %-26s  %s" % (b, fmt_range([x["rate"] for x in res[b]]),
                                            fmt_range(ratios, "%.3f")))
            chosen = [x["backend"] for x in res["auto"]]
            flips = sum(1 for a, b in zip(chosen, chosen[1:]) if a != b)
            print("AUTO's choice: %s; %d flip%s in %d runs" % (
                ", ".join("%s %d" % (c, chosen.count(c)) for c in sorted(set(chosen))),
                flips, "" if flips == 1 else "s", rounds))
            cs = [x["counters"] for x in res["auto"] if x["counters"]]
            if cs:
                for key, what in (("auto_ns_", "by time on the CPU (auto_ns_*, what it decides by)"),
                                  ("auto_cpu_ns_", "by the thread CPU clock (auto_cpu_ns_*)")):
                    print("AUTO's ns per destination %s, medians: %s" % (what, ", ".join(
                        "%s %d" % (b, statistics.median(c.get(key + b, 0) for c in cs))
                        for b in FIXED)))
                print("auto_clock_low (fan-outs whose CPU clock charged under 80%% of their time "
                      "on the CPU), median per run: %d" %
                      statistics.median(c.get("auto_clock_low", 0) for c in cs))
            else:
                print("AUTO's own figures: no live-counter file could be read")
    print("load average at the end: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
