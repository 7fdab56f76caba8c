#!/bin/sh
# SPDX-License-Identifier: MIT
# measure.sh BUILD_DIR [ROUNDS]: the shim's figures, measured (not a pass/fail test).
#
#  1. Send-family system calls per fan-out, counted by strace -f -c on the real run of
#     legacy-fanout --identical, N = 64, without the shim and in batch mode, next to the
#     shim's own counter.
#  2. Sender CPU per destination (process CPU time, every thread: user + system), without the
#     shim, in batch mode and in metrics mode, and the same fan-out sent by hand with raw
#     sendto and raw sendmmsg (the kernel's floor for batching), INTERLEAVED (A B C D E,
#     B C D E A, ...), each run into a fresh fanout-receiver that checks every datagram;
#     medians and the median of the per-round ratios.
#  3. The metrics-mode cost of one intercepted call: tests/shim/shim-callbench with a fake
#     "next" library (libshim-fakesend.so) preloaded after the shim, so its sendto and poll
#     return at once and the loop measures the shim alone; interleaved with the fake alone;
#     and, if valgrind is installed, callgrind's instruction counts of the same loops.
#
# Loopback only. About two minutes with the default 11 rounds.
set -eu
build=${1:?usage: measure.sh BUILD_DIR [ROUNDS]}
rounds=${2:-11}
build=$(cd "$build" && pwd)
command -v python3 >/dev/null || { echo "measure.sh needs python3" >&2; exit 77; }
exec python3 - "$build" "$rounds" <<'PY'
import json, os, random, resource, shutil, statistics, subprocess, sys, tempfile, time

build, rounds = sys.argv[1], int(sys.argv[2])
shim = f"{build}/shim/libmultisend-preload.so"
legacy = f"{build}/examples/legacy-fanout"
receiver = f"{build}/examples/fanout-receiver"
callbench = f"{build}/tests/shim/shim-callbench"
fake = f"{build}/tests/shim/libshim-fakesend.so"
tmp = tempfile.mkdtemp(prefix="shim-measure.")
N = 64

def start_receiver(m):
    for _ in range(20):
        base = random.randint(10000, 30000)
        p = subprocess.Popen([receiver, "--listen", f"127.0.0.1:{base}", "--subscribers", str(N),
                              "--messages", str(m), "--identical", "--idle-timeout", "5",
                              "--linger-ms", "50"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if line.strip() == "ready":
            return p, base
        p.wait()
    sys.exit("fanout-receiver did not start")

def finish_receiver(p):
    out, err = p.communicate(timeout=60)
    if p.returncode != 0:
        sys.exit(f"receiver failed: {out}{err}")

def env_for(mode, stats=None):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    if mode != "plain":
        e["LD_PRELOAD"] = shim
        e["MULTISEND_PRELOAD_MODE"] = mode
        e["MULTISEND_STATS"] = stats or "/dev/null"
    return e

# ---- 1. system calls per fan-out ---------------------------------------------------------------
print("1. send-family system calls per fan-out, legacy-fanout --identical, N = 64, "
      "strace -f -c on the real run")
print(f"   {'pacing':<22} {'run':<8} {'sendto':>8} {'sendmsg':>8} {'sendmmsg':>8} "
      f"{'per fan-out':>12} {'shim counter':>13}")
if not shutil.which("strace"):
    print("   strace is not installed: skipped")
else:
    M = 2000
    for pacing, rate in (("--rate 2000 (sleeps)", "2000"), ("full speed", "0")):
        for mode in ("plain", "batch"):
            rx, base = start_receiver(M)
            st = f"{tmp}/strace.{mode}"
            stats = f"{tmp}/stats.{mode}.json"
            if os.path.exists(stats):
                os.unlink(stats)
            subprocess.run(["strace", "-f", "-qq", "-c", "-o", st,
                            "-e", "trace=sendto,sendmsg,sendmmsg", legacy,
                            "--dest", f"127.0.0.1:{base}", "--subscribers", str(N),
                            "--messages", str(M), "--identical", "--rate", rate],
                           env=env_for(mode, stats), check=True, stdout=subprocess.DEVNULL)
            finish_receiver(rx)
            counts = {"sendto": 0, "sendmsg": 0, "sendmmsg": 0}
            for line in open(st):
                f = line.split()
                if len(f) >= 5 and f[-1] in counts:
                    counts[f[-1]] = int(f[3])
            per = sum(counts.values()) / M
            own = "-"
            if mode != "plain":
                own = f"{json.loads(open(stats).readline())['total']['syscalls'] / M:.3f}"
            print(f"   {pacing:<22} {mode:<8} {counts['sendto']:>8} {counts['sendmsg']:>8} "
                  f"{counts['sendmmsg']:>8} {per:>12.3f} {own:>13}")

# ---- 2. CPU per destination --------------------------------------------------------------------
M = 3000
print(f"\n2. sender CPU ns per destination (user + system, all threads), legacy-fanout --identical, "
      f"N = {N}, {M} messages, full speed, {rounds} interleaved rounds")
# raw-sendto / raw-sendmmsg: the same fan-out sent by hand, no shim: the kernel's floor.
rawsend = f"{build}/tests/shim/shim-rawsend"
modes = ["plain", "batch", "metrics", "raw-sendto", "raw-sendmmsg"]
res = {m: [] for m in modes}
for r in range(rounds):
    order = modes[r % len(modes):] + modes[:r % len(modes)]
    for mode in order:
        rx, base = start_receiver(M)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if mode.startswith("raw-"):
            cmd = [rawsend, mode[4:], str(base), str(N), str(M)]
        else:
            cmd = [legacy, "--dest", f"127.0.0.1:{base}", "--subscribers", str(N),
                   "--messages", str(M), "--identical"]
        subprocess.run(cmd, env=env_for("plain" if mode.startswith("raw-") else mode),
                       check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        finish_receiver(rx)  # reaped after the sender: its CPU is not in the delta
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        res[mode].append(cpu * 1e9 / (N * M))
for mode in modes:
    print(f"   {mode:<8} median {statistics.median(res[mode]):7.0f}   runs "
          + " ".join(f"{v:.0f}" for v in res[mode]))
for mode, ref in (("batch", "plain"), ("metrics", "plain"), ("raw-sendmmsg", "raw-sendto")):
    ratios = [b / p for b, p in zip(res[mode], res[ref])]
    print(f"   {mode}/{ref}: median ratio {statistics.median(ratios):.3f} "
          f"(per round: {' '.join(f'{x:.3f}' for x in ratios)})")

# ---- 3. metrics-mode cost per intercepted call -------------------------------------------------
calls = 2000000
print(f"\n3. metrics-mode cost per call: shim-callbench ({calls} sendto to 64 destinations, "
      f"then {calls} poll), a fake next library returning at once, {rounds} interleaved rounds")
def bench(preload, mode):
    e = dict(os.environ, LD_PRELOAD=preload, MULTISEND_STATS="/dev/null")
    if mode:
        e["MULTISEND_PRELOAD_MODE"] = mode
    out = subprocess.run([callbench, str(calls)], env=e, check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[1]), float(out[4])
runs = {"fake alone": [], "shim metrics": [], "shim off": []}
for r in range(rounds):
    runs["fake alone"].append(bench(fake, None))
    runs["shim metrics"].append(bench(f"{shim} {fake}", "metrics"))
    runs["shim off"].append(bench(f"{shim} {fake}", "off"))
for name, v in runs.items():
    print(f"   {name:<13} sendto median {statistics.median(x[0] for x in v):6.1f} ns, "
          f"poll median {statistics.median(x[1] for x in v):6.1f} ns")
for name in ("shim metrics", "shim off"):
    d_send = [a[0] - b[0] for a, b in zip(runs[name], runs["fake alone"])]
    d_poll = [a[1] - b[1] for a, b in zip(runs[name], runs["fake alone"])]
    print(f"   {name}: the shim adds {statistics.median(d_send):.1f} ns per sendto, "
          f"{statistics.median(d_poll):.1f} ns per poll (medians of per-round differences)")
if shutil.which("valgrind"):
    def instructions(preload, mode, n):
        e = dict(os.environ, LD_PRELOAD=preload, MULTISEND_STATS="/dev/null")
        if mode:
            e["MULTISEND_PRELOAD_MODE"] = mode
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg",
                            callbench, str(n)], env=e, capture_output=True, text=True)
        for line in p.stderr.splitlines():
            if "Collected" in line:
                return int(line.split()[-1])
        sys.exit("callgrind: " + p.stderr)
    a1, a2 = instructions(fake, None, 100000), instructions(fake, None, 200000)
    b1, b2 = instructions(f"{shim} {fake}", "metrics", 100000), \
        instructions(f"{shim} {fake}", "metrics", 200000)
    # The difference between 200k and 100k calls removes start-up and exit costs.
    per_fake, per_shim = (a2 - a1) / 100000, (b2 - b1) / 100000
    print(f"   callgrind: {per_fake:.0f} instructions per sendto+poll pair without the shim, "
          f"{per_shim:.0f} with it in metrics mode: the shim adds {per_shim - per_fake:.0f}")
shutil.rmtree(tmp, ignore_errors=True)
PY
