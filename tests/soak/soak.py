#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Soak test: send a fixed number of destination-sends through every backend and account for
every one of them.

usage: soak.py --bench PATH [--dest-sends N] [options]

It runs multisend-bench again and again with the deliver sink (receiver threads that read every
datagram and check its length, magic, per-destination sequence number and, with
--verify-payload, every payload byte), cycling through a grid of socket shapes (one unconnected
socket, or one connected socket per destination), fan-outs and message sizes in a fixed shuffled
order. Each bench run is one configuration with every backend interleaved round by round
(loop sendmmsg io_uring loop sendmmsg io_uring ...). It stops by itself when the destination-sends
reach --dest-sends, or at the --timeout safety limit.

From the bench's JSON lines it checks, for every backend of every run, timed rounds and warm-up
alike:
  - sent (destinations the kernel accepted) = received + drops counted by the kernel at the
    receiving sockets (SO_MEMINFO SK_MEMINFO_DROPS, i.e. sk_drops), and unaccounted = 0;
  - no malformed datagram (length, magic, size), no corrupt payload, none late (reordered or
    duplicated), and gaps in sequence numbers never exceed the kernel's drop count;
  - the library's own counters (ms_ctx_stats) agree: fan-outs, destinations attempted, accepted,
    failed, bytes;
  - the UDP MIB's OutDatagrams grew by at least what was sent (it is namespace-wide, so other
    traffic can only add to it).
Datagrams that other programs on the machine send to the receivers' ports (they are ordinary
loopback ports) are told apart by their source port, counted as foreign and ignored.
Then it prints a one-line summary and a table per backend and socket shape.

Exit status: 0 target reached and every check passed; 1 a check failed or the bench failed;
2 bad usage; 3 every check passed but the safety timeout stopped the soak short of the target;
130/143 interrupted (the running bench is stopped first).

The short version runs as the meson test 'soak' (suite 'soak'); the long one is documented in
tests/soak/meson.build:
  nice -n 19 python3 tests/soak/soak.py --bench BUILD/bench/multisend-bench \\
      --dest-sends 100000000 --timeout 3600 --require-all-backends
"""
import argparse
import itertools
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BACKENDS = ("loop", "sendmmsg", "io_uring")
SHAPES = ("unconnected", "connected")
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SHORT = 0, 1, 2, 3
GRACE = 20  # seconds a bench gets to stop after SIGTERM before SIGKILL


def num_list(text, lo, hi):
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}")
    if not vals or any(v < lo or v > hi for v in vals):
        raise argparse.ArgumentTypeError(f"values must be in {lo}..{hi}: {text!r}")
    return vals


def count(text):
    t = text.lower().replace("_", "")
    mult = 1
    for suf, m in (("k", 10**3), ("m", 10**6), ("g", 10**9)):
        if t.endswith(suf):
            t, mult = t[:-1], m
    try:
        v = int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count (suffixes k, m, g), got {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError("must be positive")
    return v


def name_list(allowed):
    def parse(text):
        vals = text.split(",")
        bad = [v for v in vals if v not in allowed]
        if bad or len(set(vals)) != len(vals):
            raise argparse.ArgumentTypeError(f"expected a list of {', '.join(allowed)}: {text!r}")
        return vals
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="soak.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 passed, 1 a check or the bench failed, 2 bad usage, "
               "3 stopped by --timeout before the target, 130/143 interrupted.")
    p.add_argument("--bench", required=True, help="the multisend-bench binary")
    p.add_argument("--dest-sends", type=count, default=count("2m"),
                   help="stop once this many destination-sends (fan-outs x destinations, "
                        "over all backends) are done and checked; suffixes k, m, g "
                        "(default 2m)")
    p.add_argument("--timeout", type=float, default=3600,
                   help="safety limit in seconds for the whole soak (default 3600); the "
                        "running bench is stopped cleanly when it passes")
    p.add_argument("--backends", type=name_list(BACKENDS), default=list(BACKENDS),
                   help="comma-separated, default loop,sendmmsg,io_uring")
    p.add_argument("--shapes", type=name_list(SHAPES), default=list(SHAPES),
                   help="comma-separated, default unconnected,connected")
    p.add_argument("--fanouts", type=lambda t: num_list(t, 1, 100000),
                   default=[16, 64, 256, 1024], help="default 16,64,256,1024")
    p.add_argument("--sizes", type=lambda t: num_list(t, 16, 65507),
                   default=[16, 64, 512, 1472], help="bytes, 16..65507, default 16,64,512,1472")
    p.add_argument("--passes", type=int, default=2,
                   help="size each bench run so the grid is covered about this many times "
                        "before the target (default 2)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds per bench run (default 3)")
    p.add_argument("--max-run-seconds", type=float, default=30,
                   help="cap on one bench run's expected length (default 30)")
    p.add_argument("--require-all-backends", action="store_true",
                   help="fail if a backend is unavailable here (default: report it and go on "
                        "with the others)")
    p.add_argument("--no-verify-payload", dest="verify_payload", action="store_false",
                   help="receivers check the head only (length, magic, sequence), not every "
                        "payload byte")
    p.add_argument("--seed", type=int, default=1, help="order of the grid (default 1)")
    p.add_argument("--log", help="also append every JSON line the bench printed to this file")
    p.add_argument("--quiet", action="store_true", help="no line per bench run")
    a = p.parse_args(argv)
    if a.passes < 1 or a.rounds < 1 or a.max_run_seconds <= 0 or a.timeout <= 0:
        p.error("--passes, --rounds, --max-run-seconds and --timeout must be positive")
    return a


# ---- checks --------------------------------------------------------------------------------

def check_deliver(where, dv, sent, payload_wanted, errs):
    """One deliver object against the destinations the kernel accepted."""
    if not isinstance(dv, dict):
        errs.append(f"{where}: no deliver counts")
        return
    rec, drops, una = dv.get("received"), dv.get("kernel_drops"), dv.get("unaccounted")
    if rec is None or drops is None or una is None:
        errs.append(f"{where}: deliver counts incomplete: {dv}")
        return
    if rec + drops != sent:
        errs.append(f"{where}: sent {sent} != received {rec} + kernel drops {drops}")
    if una != 0:
        errs.append(f"{where}: {una} datagrams unaccounted")
    for k, what in (("malformed", "malformed (length, magic or size)"),
                    ("corrupt", "with a corrupt payload"),
                    ("late", "late (reordered or duplicated)")):
        if dv.get(k, 0) != 0:
            errs.append(f"{where}: {dv[k]} datagrams {what}")
    if payload_wanted and dv.get("payload_checked") is not True:
        errs.append(f"{where}: the receivers did not check the payload")


def check_library(where, lib, fanouts, dests, failed, size, errs):
    if not isinstance(lib, dict):
        errs.append(f"{where}: no library counters")
        return
    want = {"fanouts": fanouts, "dests_attempted": dests, "dests_accepted": dests - failed,
            "dests_failed": failed, "bytes": (dests - failed) * size}
    for k, v in want.items():
        if lib.get(k) != v:
            errs.append(f"{where}: library {k} {lib.get(k)} != {v} (the bench's own count)")


def check_result(r, payload_wanted):
    """All checks on one result line. Returns (errors, totals)."""
    errs = []
    where = (f"{r.get('backend')} {r.get('sockets')} N={r.get('fanout')} "
             f"{r.get('size')} B")
    n, size = r["fanout"], r["size"]
    runs = r.get("runs", [])
    fanouts = sum(x["fanouts"] for x in runs)
    if len(runs) != r["rounds"] or any(x["fanouts"] != r["fanouts_per_run"] for x in runs):
        errs.append(f"{where}: runs do not match rounds x fan-outs per run")
    if r["dests_sent"] != fanouts * n:
        errs.append(f"{where}: dests_sent {r['dests_sent']} != {fanouts} fan-outs x {n}")
    sent = r["dests_sent"] - r["dests_failed"]
    check_deliver(where, r.get("deliver"), sent, payload_wanted, errs)
    check_library(where, r.get("library"), fanouts, r["dests_sent"], r["dests_failed"], size,
                  errs)
    out = r.get("kernel", {}).get("udp_out_datagrams")
    if not isinstance(out, int) or out < sent:
        errs.append(f"{where}: the kernel's UDP OutDatagrams grew by {out}, less than the "
                    f"{sent} datagrams sent")
    w = r.get("warmup")
    if not isinstance(w, dict):
        errs.append(f"{where}: no warm-up counts")
        w = {"fanouts": 0, "dests_sent": 0, "dests_failed": 0, "deliver": {}, "library": {}}
    else:
        if w["dests_sent"] != w["fanouts"] * n:
            errs.append(f"{where} warm-up: dests_sent != fan-outs x N")
        check_deliver(where + " warm-up", w.get("deliver"), w["dests_sent"] - w["dests_failed"],
                      payload_wanted, errs)
        check_library(where + " warm-up", w.get("library"), w["fanouts"], w["dests_sent"],
                      w["dests_failed"], size, errs)
    dv, wdv = r.get("deliver") or {}, w.get("deliver") or {}
    tot = {
        "dest_sends": r["dests_sent"] + w["dests_sent"],
        "refused": r["dests_failed"] + w["dests_failed"],
        "received": dv.get("received", 0) + wdv.get("received", 0),
        "drops": dv.get("kernel_drops", 0) + wdv.get("kernel_drops", 0),
        "unaccounted": dv.get("unaccounted", 0) + wdv.get("unaccounted", 0),
        "verify_errors": sum(dv.get(k, 0) + wdv.get(k, 0)
                             for k in ("malformed", "corrupt", "late")),
        "lost_by_sequence": dv.get("lost_by_sequence", 0) + wdv.get("lost_by_sequence", 0),
        "softnet_dropped": r.get("kernel", {}).get("softnet_dropped", 0),
        "foreign": dv.get("foreign", 0) + wdv.get("foreign", 0),
        "timed_dests": r["dests_sent"],
        "timed_wall_ns": sum(x["wall_ns"] for x in runs),
        "lib_ok": not any("library" in e for e in errs),
        "syscalls": ((r.get("library") or {}).get("syscalls", 0)
                     + (w.get("library") or {}).get("syscalls", 0)),
        "fanouts": fanouts + w["fanouts"],
    }
    return errs, tot


def check_run(objs, cfg, backends, payload_wanted):
    """The JSON lines of one bench run of configuration cfg = (shape, n, size). Returns
    (errors, {backend: totals}, {backend: unavailable reason})."""
    shape, n, size = cfg
    errs, per, missing = [], {}, {}
    env = [o for o in objs if o.get("type") == "env"]
    if len(env) != 1:
        return [f"{cfg}: expected one env line, got {len(env)}"], per, missing
    env = env[0]
    if env.get("sink") != "deliver" or env.get("sockets") != shape:
        errs.append(f"{cfg}: the bench ran sink {env.get('sink')}, sockets {env.get('sockets')}")
    avail = set()
    for b in env.get("backends", []):
        if b["available"]:
            avail.add(b["name"])
        else:
            missing[b["name"]] = b.get("reason", "unavailable")
    for o in objs:
        if o.get("type") == "skip":
            errs.append(f"{cfg}: the bench skipped {o.get('what')}: {o.get('reason')}")
    results = [o for o in objs if o.get("type") == "result"]
    for r in results:
        if (r.get("sockets"), r.get("fanout"), r.get("size")) != (shape, n, size):
            errs.append(f"{cfg}: a result for another configuration: {r.get('sockets')} "
                        f"N={r.get('fanout')} {r.get('size')} B")
            continue
        if r.get("backend") in per:
            errs.append(f"{cfg}: two results for {r.get('backend')}")
            continue
        e, tot = check_result(r, payload_wanted)
        errs += e
        per[r["backend"]] = tot
    for b in backends:
        if b in avail and b not in per:
            errs.append(f"{cfg}: no result for {b}")
    extra = set(per) - set(backends)
    if extra:
        errs.append(f"{cfg}: results for backends not asked for: {sorted(extra)}")
    # Sequence gaps show a drop only when a later datagram reaches the same destination, and
    # the runs of one bench run share one set of receivers: compare over the whole run.
    lost = sum(t["lost_by_sequence"] for t in per.values())
    drops = sum(t["drops"] for t in per.values())
    if lost > drops:
        errs.append(f"{cfg}: {lost} sequence numbers missing but the kernel counted only "
                    f"{drops} drops")
    return errs, per, missing


def self_test():
    """The checker must reject what it is there to catch. Cheap; runs before every soak."""
    def good():
        n, size, fan = 4, 64, 10
        dv = {"received": 40, "kernel_drops": 0, "unaccounted": 0, "lost_by_sequence": 0,
              "late": 0, "malformed": 0, "corrupt": 0, "payload_checked": True}
        lib = {"fanouts": fan, "dests_attempted": 40, "dests_accepted": 40, "dests_failed": 0,
               "bytes": 40 * size, "syscalls": 10}
        return {"type": "result", "backend": "loop", "sockets": "unconnected", "fanout": n,
                "size": size, "rounds": 2, "fanouts_per_run": 5,
                "runs": [{"fanouts": 5, "wall_ns": 1000}, {"fanouts": 5, "wall_ns": 1000}],
                "dests_sent": 40, "dests_failed": 0, "deliver": dict(dv),
                "library": dict(lib), "kernel": {"udp_out_datagrams": 40, "softnet_dropped": 0},
                "warmup": {"fanouts": 1, "dests_sent": 4, "dests_failed": 0,
                           "deliver": dict(dv, received=4),
                           "library": dict(lib, fanouts=1, dests_attempted=4,
                                           dests_accepted=4, bytes=4 * size)}}

    env = {"type": "env", "sink": "deliver", "sockets": "unconnected",
           "backends": [{"name": "loop", "available": True}]}
    cfg = ("unconnected", 4, 64)
    e, _, _ = check_run([env, good()], cfg, ["loop"], True)
    assert not e, f"self-test: a good run was rejected: {e}"

    def bad(mutate, what):
        r = good()
        mutate(r)
        e, _, _ = check_run([env, r], cfg, ["loop"], True)
        assert e, f"self-test: the checker missed {what}"

    bad(lambda r: r["deliver"].update(received=39), "a lost datagram")
    bad(lambda r: r["deliver"].update(received=39, kernel_drops=1, unaccounted=0,
                                      lost_by_sequence=2), "more gaps than drops")
    bad(lambda r: r["deliver"].update(unaccounted=1), "unaccounted")
    bad(lambda r: r["deliver"].update(corrupt=1), "a corrupt payload")
    bad(lambda r: r["deliver"].update(malformed=1), "a malformed datagram")
    bad(lambda r: r["deliver"].update(late=1), "a late datagram")
    bad(lambda r: r["deliver"].update(payload_checked=False), "unchecked payloads")
    bad(lambda r: r["warmup"]["deliver"].update(received=3), "a warm-up loss")
    bad(lambda r: r["library"].update(dests_accepted=39), "library counters disagreeing")
    bad(lambda r: r["warmup"]["library"].update(fanouts=2), "warm-up library counters")
    bad(lambda r: r["kernel"].update(udp_out_datagrams=39), "OutDatagrams short")
    bad(lambda r: r.update(library=None), "missing library counters")
    bad(lambda r: r.update(backend="sendmmsg"), "an unexpected backend")
    e, _, _ = check_run([env], cfg, ["loop"], True)
    assert e, "self-test: the checker missed a missing result"


# ---- running the bench ---------------------------------------------------------------------

class Interrupted(Exception):
    pass


class Soak:
    def __init__(self, a):
        self.a = a
        self.child = None
        self.child_pids = []
        self.signal = 0
        self.totals = {}      # (backend, shape) -> summed totals
        self.missing = {}     # backend -> reason
        self.failures = []
        self.done = 0         # destination-sends checked
        self.runs = 0
        self.rate = {}        # fan-out -> destination-sends per wall second of a bench run
        self.log = open(a.log, "a") if a.log else None

    def on_signal(self, sig, frame):
        self.signal = self.signal or sig
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def stop_child(self, p):
        """Stop a bench that overran: SIGTERM (it stops and cleans up), then SIGKILL."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(GRACE)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def bench_run(self, cfg, iterations, limit):
        shape, n, size = cfg
        cmd = [self.a.bench, "--mode", "compare", "--sink", "deliver",
               "--backends", ",".join(self.a.backends), "--fanout", str(n), "--size", str(size),
               "--iterations", str(iterations), "--rounds", str(self.a.rounds),
               "--duration", "0.1", "--no-progress", "--json", "-"]
        if shape == "connected":
            cmd.append("--connected")
        if self.a.verify_payload:
            cmd.append("--verify-payload")
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            self.child = p
            self.child_pids.append(p.pid)
            timed_out = False
            try:
                p.wait(limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                self.stop_child(p)
            self.child = None
            out.seek(0)
            err.seek(0)
            return p.returncode, timed_out, out.read(), err.read(), cmd

    def grid(self):
        g = list(itertools.product(self.a.shapes, self.a.fanouts, self.a.sizes))
        random.Random(self.a.seed).shuffle(g)
        return g

    def add(self, backend, shape, tot):
        t = self.totals.setdefault((backend, shape), {})
        for k, v in tot.items():
            if k == "lib_ok":
                t[k] = t.get(k, True) and v
            else:
                t[k] = t.get(k, 0) + v

    def run(self):
        a = self.a
        grid = self.grid()
        per_run = max(1, a.dest_sends // (a.passes * len(grid)))
        start = time.monotonic()
        deadline = start + a.timeout
        reason = None
        for k in itertools.count():
            if self.done >= a.dest_sends:
                break
            if self.signal:
                raise Interrupted()
            cfg = grid[k % len(grid)]
            shape, n, size = cfg
            left = deadline - time.monotonic()
            rate = self.rate.get(n) or (min(self.rate.values()) if self.rate else 20000)
            want = min(per_run, a.dest_sends - self.done, int(rate * a.max_run_seconds))
            # Never start a run that cannot end before the safety limit. (A remainder smaller
            # than one round is still run: one round, a little past the target.)
            time_cap = int(rate * (left - 5) * 0.8)
            if time_cap < n * len(a.backends) * a.rounds and self.done:
                reason = f"the safety timeout ({a.timeout:.0f} s) is near"
                break
            want = min(want, time_cap)
            iters = max(1, math.ceil(want / (n * len(a.backends) * a.rounds)))
            # A run that takes ten times its estimate (plus start-up) is stuck.
            limit = min(max(60, 10 * want / rate), max(left, 1))
            t0 = time.monotonic()
            rc, timed_out, out, err, cmd = self.bench_run(cfg, iters, limit)
            wall = time.monotonic() - t0
            self.runs += 1
            if self.log:
                self.log.write(out)
                self.log.flush()
            if self.signal:
                raise Interrupted()
            if timed_out:
                if time.monotonic() >= deadline - 1:
                    reason = f"the safety timeout ({a.timeout:.0f} s) passed during a run"
                    break
                self.failures.append(f"{cfg}: the bench did not finish within {limit:.0f} s; "
                                     f"stopped it")
                break
            objs, bad_lines = [], 0
            for line in out.splitlines():
                try:
                    objs.append(json.loads(line))
                except ValueError:
                    bad_lines += 1
            errs, per, missing = check_run(objs, cfg, a.backends, a.verify_payload)
            if rc != 0:
                errs.insert(0, f"{cfg}: the bench exited with status {rc}: "
                               f"{' '.join(cmd)}\n{err.strip()[-2000:]}")
            if bad_lines:
                errs.append(f"{cfg}: {bad_lines} lines of the bench's output were not JSON")
            for b, why in missing.items():
                if b in a.backends and b not in self.missing:
                    self.missing[b] = why
            if self.missing and a.require_all_backends:
                errs.append("--require-all-backends: unavailable here: "
                            + ", ".join(sorted(self.missing)))
            sent = 0
            for b, tot in per.items():
                self.add(b, shape, tot)
                sent += tot["dest_sends"]
            self.done += sent
            if sent and wall > 0:
                self.rate[n] = sent / wall
            if not a.quiet:
                print(f"[{time.monotonic() - start:7.1f} s] {self.done / 1e6:9.3f} M of "
                      f"{a.dest_sends / 1e6:.3f} M  {shape:11s} N={n:<5d} {size:5d} B: "
                      f"{sent:>10,d} in {wall:5.1f} s  {'ok' if not errs else 'FAILED'}",
                      flush=True)
            if errs:
                self.failures += errs
                break
            if not per:
                self.failures.append(f"{cfg}: the bench produced no result")
                break
        return reason, time.monotonic() - start

    def leftovers(self):
        """Processes or namespaces left behind: none may be."""
        left = []
        for pid in self.child_pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            # A zombie of ours would have been reaped by wait(); anything alive is a leak.
            left.append(f"bench process {pid} is still running")
        if shutil.which("ip"):
            ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            # bench/netns.c: msbench-<PID namespace inode>-<pid> (the children share ours).
            pidns = os.stat("/proc/self/ns/pid").st_ino
            names = {f"msbench-{pidns}-{pid}" for pid in self.child_pids}
            for line in ns.splitlines():
                if line.split(" ")[0] in names:
                    left.append(f"namespace {line.split(' ')[0]} left behind")
        return left


def fmt_rate(x):
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.2f}{suf}"
    return f"{x:.0f}"


def report(s, reason, wall):
    a = s.a
    t = {}
    for tot in s.totals.values():
        for k, v in tot.items():
            if k != "lib_ok":
                t[k] = t.get(k, 0) + v
    g = lambda k: t.get(k, 0)  # noqa: E731
    ok = not s.failures and not s.signal and (not a.require_all_backends or not s.missing)
    verdict = ("INTERRUPTED" if s.signal and not s.failures
               else "PASS" if ok and not reason and s.done >= a.dest_sends
               else "INCOMPLETE" if ok else "FAIL")
    print(f"\nsoak {verdict}: {s.done:,} destination-sends of {a.dest_sends:,} wanted "
          f"({', '.join(b for b in a.backends if b not in s.missing)}; {'+'.join(a.shapes)}; "
          f"N {min(a.fanouts)}..{max(a.fanouts)}; {min(a.sizes)}..{max(a.sizes)} B) in "
          f"{wall:.1f} s, {s.runs} bench runs: received {g('received'):,}, kernel drops "
          f"{g('drops'):,}, unaccounted {g('unaccounted'):,}, verification errors "
          f"{g('verify_errors'):,}, refused by the kernel {g('refused'):,}; "
          f"{fmt_rate(s.done / wall if wall else 0)} destination-sends/s overall")
    print(f"\n{'backend':<10} {'sockets':<12} {'dest-sends':>13} {'received':>13} "
          f"{'drops':>8} {'unacc.':>7} {'verify':>7} {'refused':>8} {'library':>8} "
          f"{'sends/s timed':>14} {'syscalls/dest':>14}")
    for b in a.backends:
        for sh in a.shapes:
            x = s.totals.get((b, sh))
            if not x:
                continue
            rate = x["timed_dests"] / (x["timed_wall_ns"] / 1e9) if x["timed_wall_ns"] else 0
            print(f"{b:<10} {sh:<12} {x['dest_sends']:>13,} {x['received']:>13,} "
                  f"{x['drops']:>8,} {x['unaccounted']:>7,} {x['verify_errors']:>7,} "
                  f"{x['refused']:>8,} {'agrees' if x['lib_ok'] else 'DIFFERS':>8} "
                  f"{fmt_rate(rate):>14} {x['syscalls'] / x['dest_sends'] if x['dest_sends'] else 0:>14.4f}")
    print("\ndrops: counted by the kernel at each receiving socket (SO_MEMINFO SK_MEMINFO_DROPS); "
          "verify: malformed + corrupt payload + late;\nrefused: destinations whose send the "
          "kernel refused (not sent; the library counted them); library: ms_ctx_stats agrees "
          "with the bench's counts (fan-outs, destinations attempted, accepted, failed, "
          "bytes);\nsends/s timed: destination-sends per second of timed sending (receivers "
          "running); syscalls/dest: the library's own count.")
    print(f"other programs' datagrams at the receivers' ports (not from the bench's sending "
          f"sockets; ignored): {g('foreign'):,}; softnet backlog drops, machine-wide, during "
          f"the timed runs: {g('softnet_dropped'):,}")
    for b, why in s.missing.items():
        print(f"{'FAIL' if a.require_all_backends else 'note'}: backend {b} unavailable: {why}")
    if reason:
        print(f"stopped early: {reason}")
    for f in s.failures[:50]:
        print("FAIL:", f)
    if len(s.failures) > 50:
        print(f"... and {len(s.failures) - 50} more failures")
    if s.signal:
        return 128 + s.signal
    if not ok:
        return EXIT_FAIL
    return EXIT_SHORT if verdict == "INCOMPLETE" else EXIT_OK


def main(argv):
    a = parse_args(argv)
    if not os.access(a.bench, os.X_OK):
        print(f"soak.py: {a.bench}: not an executable", file=sys.stderr)
        return EXIT_USAGE
    self_test()
    s = Soak(a)
    signal.signal(signal.SIGINT, s.on_signal)
    signal.signal(signal.SIGTERM, s.on_signal)
    signal.signal(signal.SIGHUP, s.on_signal)
    reason, wall = None, 0.0
    t0 = time.monotonic()
    try:
        reason, wall = s.run()
    except Interrupted:
        wall = time.monotonic() - t0
        reason = f"interrupted by {signal.Signals(s.signal).name}"
    finally:
        if s.child:
            s.stop_child(s.child)
        if s.log:
            s.log.close()
    left = s.leftovers()
    s.failures += left
    return report(s, reason, wall)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
