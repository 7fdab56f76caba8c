#!/bin/sh
# SPDX-License-Identifier: MIT
# measure-bypass.sh BUILD_DIR [ROUNDS]: the shim's bypass mode (MULTISEND_PRELOAD_MODE=bypass,
# every send sent at once as AF_XDP frames), measured (not a pass/fail test).
#
# The sink is the bench's netns-xdp, made with ip commands: the sender runs in namespace S
# with veth xs0 (10.77.0.1/24); the peer xr0 is up in namespace R, with no address and no
# IPv6 link-local address; S's permanent neighbour entry gives the destination 10.77.0.2 the
# MAC 02:00:5e:10:00:02, which nobody owns, so R's IP layer drops every frame on arrival
# (PACKET_OTHERHOST) and nothing comes back. Every datagram, by the kernel's path or as an
# AF_XDP frame, crosses the veth: each run checks that xr0's rx packets grew by exactly the
# datagrams the program sent, and in bypass mode reads xdp_frames / xdp_fallback from the
# shim's JSON report.
#
#  0. One run through multisend-run --bypass --xdp-iface xs0: the wrapper's text report.
#  1. legacy-fanout --identical at N = 64 and 1024 subscribers, 64 and 512 bytes: the sender's
#     CPU per destination (user + system, every thread, from wait4's rusage) without the shim
#     ('plain'), in bypass mode, in batch mode, and in batch mode with
#     MULTISEND_BATCH_DELAY_US=100000, interleaved (A B C D, B C D A, ...); medians and the
#     medians of the per-round ratios to plain.
#  2. One destination, one unconnected socket: sockperf tp (its own sendto loop, MSG_NOSIGNAL)
#     and legacy-fanout --subscribers 1: CPU per datagram plain and bypass, interleaved.
#  3. One destination, a connected socket (send(2)): a small C loop compiled here (neither
#     sockperf nor legacy-fanout connects a UDP socket), next to its own unconnected (sendto)
#     twin, plain and bypass, interleaved.
#  4. System calls under strace -f -c, plain and bypass, for the programs of 2 and 3: each at
#     two lengths, so that the per-datagram count (the slope) and the fixed set-up count (the
#     intercept) come apart.
#  5. The fixed CPU cost: a run that sends one datagram, plain and bypass, interleaved.
#
# MEASURE_BASE_SHIM=PATH (another build's libmultisend-preload.so, e.g. main's): 1, 2 and 3 also
# run it in the same rounds, as modes bypass-base and batch-base (1) and bypass-base (2, 3), so
# that a change to the shim is measured before and after side by side, interleaved.
#
# Root (namespaces, AF_XDP); skips (77) otherwise. Two to three minutes with the default 7
# rounds. Exit status 1 when a run failed or a check did not hold (listed at the end).
set -eu
build=${1:?usage: measure-bypass.sh BUILD_DIR [ROUNDS]}
rounds=${2:-7}
build=$(cd "$build" && pwd)
command -v python3 >/dev/null || { echo "measure-bypass.sh needs python3" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "measure-bypass.sh needs root (namespaces, AF_XDP)" >&2; exit 77; }
command -v ip >/dev/null || { echo "measure-bypass.sh needs ip (iproute2)" >&2; exit 77; }
for f in shim/libmultisend-preload.so shim/multisend-run examples/legacy-fanout; do
	[ -e "$build/$f" ] || { echo "measure-bypass.sh: no $build/$f (-Dexamples=true)" >&2; exit 77; }
done

r=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
nsS=msbypass-$r-s
nsR=msbypass-$r-r
ipq() { env -u LD_PRELOAD ip "$@"; }
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	ipq netns del "$nsS" 2>/dev/null || :
	ipq netns del "$nsR" 2>/dev/null || :
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ipq netns add "$nsS"
ipq netns add "$nsR"
ipq -n "$nsS" link add xs0 type veth peer name xr0 netns "$nsR"
for c in "-n $nsS link set lo up" "-n $nsR link set lo up" \
	"-n $nsS link set xs0 addrgenmode none" "-n $nsR link set xr0 addrgenmode none" \
	"-n $nsS addr add 10.77.0.1/24 dev xs0" \
	"-n $nsS link set xs0 up" "-n $nsR link set xr0 up" \
	"-n $nsS neigh replace 10.77.0.2 lladdr 02:00:5e:10:00:02 dev xs0 nud permanent"; do
	# shellcheck disable=SC2086 # a word list
	ipq $c
done

# The measurement runs inside S (ip netns exec remounts /sys for S), so that the programs it
# starts need no launcher of their own whose CPU would join theirs.
set +e
env -u LD_PRELOAD ip netns exec "$nsS" python3 - "$build" "$rounds" "$nsS" "$nsR" <<'PY'
import json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time

build, rounds, nsS, nsR = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
shim = f"{build}/shim/libmultisend-preload.so"
base_shim = os.environ.get("MEASURE_BASE_SHIM") or None
if base_shim and not os.path.exists(base_shim):
    sys.exit(f"measure-bypass.sh: MEASURE_BASE_SHIM={base_shim} does not exist")
BASE = ["bypass-base", "batch-base"] if base_shim else []
wrapper = f"{build}/shim/multisend-run"
legacy = f"{build}/examples/legacy-fanout"
IFACE, DEST, PORT = "xs0", "10.77.0.2", 12000
tmp = tempfile.mkdtemp(prefix="shim-bypass-measure.")
bad = []  # every check that failed, repeated at the end
t_start = time.monotonic()
def took(t0):
    return f"(took {time.monotonic() - t0:.0f} s)"

def rx_packets():
    out = subprocess.run(["ip", "-n", nsR, "-s", "-j", "link", "show", "xr0"], check=True,
                         capture_output=True, text=True, env=base_env).stdout
    return json.loads(out)[0]["stats64"]["rx"]["packets"]

base_env = {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("MULTISEND_")
            and k != "MEASURE_BASE_SHIM"}

# What each mode adds to the program's environment (nothing for plain).
MODES = {
    "plain": {},
    "bypass": {"MULTISEND_PRELOAD_MODE": "bypass", "MULTISEND_PRELOAD_XDP_IFACE": IFACE},
    "batch": {"MULTISEND_PRELOAD_MODE": "batch"},
    "batch-100ms": {"MULTISEND_PRELOAD_MODE": "batch", "MULTISEND_BATCH_DELAY_US": "100000"},
}
# The same modes with MEASURE_BASE_SHIM's shim.
MODES["bypass-base"] = MODES["bypass"]
MODES["batch-base"] = MODES["batch"]

def mode_vars(mode, stats):
    v = dict(MODES[mode])
    if v:
        v["LD_PRELOAD"] = base_shim if mode.endswith("-base") else shim
        v["MULTISEND_STATS"] = stats
    return v

def read_reports(stats, label):
    if not os.path.exists(stats):
        return []
    try:
        return [json.loads(l) for l in open(stats) if l.strip()]
    except ValueError as e:
        bad.append(f"{label}: the shim's report is not JSON: {e}")
        return None

def check_report(mode, label, reports, datagrams, r):
    """The shim's own counts against the program's: one report, mode, datagrams; in bypass
    mode frames + fallbacks == datagrams."""
    if mode == "plain" or reports is None:
        return
    if len(reports) != 1:
        bad.append(f"{label}: {len(reports)} shim reports, expected 1")
        return
    rep = reports[0]
    tot = rep["total"]
    want = mode.split("-")[0]
    if rep.get("mode") != want:
        bad.append(f"{label}: the shim ran in mode {rep.get('mode')!r}, not {want!r}")
    if tot["datagrams"] != datagrams:
        bad.append(f"{label}: the shim counted {tot['datagrams']} datagrams, the program sent "
                   f"{datagrams}")
    r["shim_syscalls"] = tot.get("syscalls")
    if mode.startswith("bypass"):
        if "xdp_frames" not in tot:
            bad.append(f"{label}: no xdp_frames in the shim's report")
            return
        r["frames"], r["kicks"] = tot["xdp_frames"], tot["xdp_kicks"]
        r["fallback"] = {k: v for k, v in tot["xdp_fallback"].items() if v}
        if r["frames"] + sum(tot["xdp_fallback"].values()) != tot["datagrams"]:
            bad.append(f"{label}: xdp_frames {r['frames']} + fallbacks {r['fallback']} != "
                       f"datagrams {tot['datagrams']}")

TIMEOUT = 120  # seconds a run may take before it is killed (and counted as failed)

def run(label, cmd, mode, datagrams=None, parse=None, strace=None):
    """Run cmd (in S) in mode, reap it with wait4: CPU seconds (user + system, every thread),
    the veth peer's rx packets delta against the datagrams sent (datagrams, or parse(output)),
    and the shim's report. None when it fails (exit status, timeout): listed at the end, left
    out of the medians and of the ratios of its round."""
    stats = f"{tmp}/stats.json"
    if os.path.exists(stats):
        os.unlink(stats)
    env = dict(base_env)
    pre = []
    if strace:
        # -E: only the traced program gets the preload, not strace.
        pre = ["strace", "-f", "-qq", "-c", "-o", strace]
        for k, v in mode_vars(mode, stats).items():
            pre += ["-E", f"{k}={v}"]
    else:
        env.update(mode_vars(mode, stats))
    before = rx_packets()
    with open(f"{tmp}/out", "w+") as out, open(f"{tmp}/err", "w+") as err:
        # A process group of its own, so that a timeout kills strace's tracee too.
        p = subprocess.Popen(pre + cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True)
        signal.signal(signal.SIGALRM, lambda *_: os.killpg(p.pid, signal.SIGKILL))
        signal.alarm(TIMEOUT)
        _, status, ru = os.wait4(p.pid, 0)
        signal.alarm(0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    rx = rx_packets() - before
    datagrams = parse(stdout + stderr) if parse and p.returncode == 0 else datagrams
    if p.returncode != 0 or datagrams is None:
        why = (f"killed after {TIMEOUT} s" if p.returncode == -signal.SIGKILL
               else f"exit status {p.returncode}")
        tail = (stdout + stderr).strip().splitlines()[-6:]
        bad.append(f"{label}: FAILED, {why} (veth peer rx +{rx}): {shown(pre + cmd)}"
                   + "".join(f"\n      | {l}" for l in tail))
        return None
    r = {"cpu": ru.ru_utime + ru.ru_stime, "datagrams": datagrams, "rx": rx, "stderr": stderr}
    if rx != datagrams:
        bad.append(f"{label}: veth peer rx packets +{rx}, datagrams sent {datagrams}")
    try:
        check_report(mode, label, read_reports(stats, label), datagrams, r)
    except (KeyError, TypeError) as e:
        bad.append(f"{label}: the shim's report lacks {e}")
    if mode != "plain":
        # A warning from the shim (kernel bypass unavailable, ...), shown with the figures.
        w = [l for l in stderr.splitlines() if re.search("multisend|bypass|xdp", l, re.I)]
        if w:
            r["warning"] = w[0]
    return r

def shown(cmd):
    return " ".join(cmd).replace(build, "BUILD").replace(tmp, "TMP")

def med(v):
    return statistics.median(v)

def good(runs):
    return [x for x in runs if x]

def median_line(name, v, fmt="6.0f", indent="   "):
    if not good(v):
        print(f"{indent}{name:<12} no run succeeded")
        return
    print(f"{indent}{name:<12} median {med(good(v)):{fmt}}   runs "
          + " ".join("failed" if x is None else f"{x:.0f}" for x in v))

def ratio_line(res, a, b, target=None, indent="   ", key="cpu"):
    ratios = [x[key] / y[key] for x, y in zip(res[a], res[b]) if x and y]
    if not ratios:
        print(f"{indent}{a}/{b}: no round where both succeeded")
        return
    m = med(ratios)
    t = ""
    if target is not None:
        t = f"  [target <= {target}: {'met' if m <= target else 'NOT met'}]"
    print(f"{indent}{a}/{b}: median ratio {m:.3f}{t} (per round: "
          + " ".join(f"{x:.3f}" for x in ratios) + ")"
          + (f" ({len(res[a]) - len(ratios)} rounds left out: a run failed)"
             if len(ratios) < len(res[a]) else ""))

def frames_line(runs, indent="   "):
    """What bypass mode's report said over these runs: frames, kicks, fallbacks."""
    runs = good(runs)
    d = sum(r["datagrams"] for r in runs)
    f = sum(r.get("frames", 0) for r in runs)
    k = sum(r.get("kicks", 0) for r in runs)
    fb = {}
    for r in runs:
        for key, v in r.get("fallback", {}).items():
            fb[key] = fb.get(key, 0) + v
    fbs = ", ".join(f"{key} {v}" for key, v in sorted(fb.items())) or "none"
    print(f"{indent}bypass report over its {len(runs)} runs: {d} datagrams, xdp_frames {f} "
          f"({100 * f / d if d else 0:.2f}%), xdp_kicks {k} ({k / d if d else 0:.3f} per "
          f"datagram), by the kernel's path: {fbs}")
    warn = {r["warning"] for r in runs if "warning" in r}
    for w in sorted(warn):
        print(f"{indent}shim's stderr: {w}")

def rx_line(res, indent="   "):
    allruns = good(r for v in res.values() for r in v)
    ok = sum(1 for r in allruns if r["rx"] == r["datagrams"])
    per = ", ".join(f"{m} {sum(r['rx'] for r in good(v))} of "
                    f"{sum(r['datagrams'] for r in good(v))}"
                    for m, v in res.items())
    print(f"{indent}veth peer xr0 rx packets / datagrams sent, all runs: {per}; equal in {ok} of "
          f"{len(allruns)} runs" + ("" if ok == len(allruns) else "  ** MISMATCH, see the end **"))

uname = os.uname()
print(f"measure-bypass.sh: Linux {uname.release}, {os.cpu_count()} CPUs, {rounds} rounds, "
      f"shim BUILD/shim/libmultisend-preload.so (BUILD = {build}, TMP = a private temporary "
      "directory)")
print(f"sink: sender in namespace {nsS}, veth {IFACE} 10.77.0.1/24 -> peer xr0 up in {nsR} "
      "(no address); destination 10.77.0.2 has a permanent neighbour entry for "
      "02:00:5e:10:00:02, nobody's MAC: R's IP layer drops every frame (PACKET_OTHERHOST)")
print("load average at the start: " + " ".join(open("/proc/loadavg").read().split()[:3])
      + " (other work on the machine moves the absolute figures; the ratios are taken inside "
      "each round)")
if base_shim:
    print(f"base shim (modes *-base): {base_shim}")
print("modes: plain = no shim; bypass = LD_PRELOAD shim, MULTISEND_PRELOAD_MODE=bypass "
      f"MULTISEND_PRELOAD_XDP_IFACE={IFACE}; batch = MULTISEND_PRELOAD_MODE=batch (kernel path, "
      "sendmmsg); batch-100ms = batch with MULTISEND_BATCH_DELAY_US=100000. Every shim run "
      "writes a JSON report (MULTISEND_STATS) that is checked against the program's counts")

# ---- 0. the wrapper ----------------------------------------------------------------------------
txt = f"{tmp}/report.txt"
cmd0 = [wrapper, "--bypass", "--xdp-iface", IFACE, "--stats", txt, "--", legacy, "--dest",
        f"{DEST}:{PORT}", "--subscribers", "64", "--messages", "100", "--identical"]
print(f"\n0. the wrapper: {shown(cmd0)}")
before = rx_packets()
p = subprocess.run(cmd0, env=base_env, stdin=subprocess.DEVNULL, capture_output=True,
                   text=True)
rx0 = rx_packets() - before
print(f"   exit status {p.returncode}; veth peer rx packets +{rx0} (sent 6400)")
for l in p.stdout.strip().splitlines():
    print(f"   stdout: {l}")
for l in p.stderr.strip().splitlines():
    print(f"   stderr: {l}")
if os.path.exists(txt):
    for l in open(txt):
        print(f"   report: {l.rstrip()}")
if p.returncode != 0 or rx0 != 6400:
    bad.append(f"0: multisend-run --bypass: exit status {p.returncode}, rx +{rx0} of 6400")

# ---- 1. fan-out: CPU per destination -----------------------------------------------------------
configs = [(64, 64, 1500), (64, 512, 1500), (1024, 64, 100), (1024, 512, 100)]
modes = ["plain", "bypass", "batch", "batch-100ms"] + BASE
print(f"\n1. sender CPU ns per destination (user + system, all threads, wait4 rusage), "
      f"legacy-fanout --identical, full speed, {rounds} interleaved rounds "
      f"({' '.join(modes)}, rotated each round)")
res1 = {c: {m: [] for m in modes} for c in configs}
t0 = time.monotonic()
def fanout_cmd(n, size, m):
    return [legacy, "--dest", f"{DEST}:{PORT}", "--subscribers", str(n), "--messages", str(m),
            "--size", str(size), "--identical"]
for r in range(rounds):
    order = modes[r % len(modes):] + modes[:r % len(modes)]
    for (n, size, m) in configs:
        for mode in order:
            x = run(f"1 N={n} {size}B {mode} round {r + 1}", fanout_cmd(n, size, m), mode,
                    datagrams=n * m)
            if x:
                x["ns"] = x["cpu"] * 1e9 / (n * m)
            res1[(n, size, m)][mode].append(x)
print(f"   {took(t0)}")
for (n, size, m), res in res1.items():
    print(f"\n   N = {n}, {size} B: {shown(fanout_cmd(n, size, m))}  ({n * m} datagrams a run)")
    for mode in modes:
        median_line(mode, [x and x["ns"] for x in res[mode]])
    ratio_line(res, "bypass", "plain", 0.45)
    ratio_line(res, "batch", "plain", 1.0)
    ratio_line(res, "batch-100ms", "plain", 1.0)
    for b in BASE:
        ratio_line(res, b, "plain")
    frames_line(res["bypass"])
    rx_line(res)

# ---- 2, 3. one destination ---------------------------------------------------------------------
cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
sender = None
if cc:
    src = f"{tmp}/bm-send.c"
    with open(src, "w") as f:
        f.write(r'''
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
/* bm-send connect|sendto IP PORT SIZE COUNT: COUNT datagrams of SIZE bytes to IP:PORT on one
 * socket, connected (send) or not (sendto); the first 8 bytes count. */
int main(int argc, char **argv)
{
	if (argc != 6)
		return 2;
	int conn = !strcmp(argv[1], "connect"), fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
	size_t size = strtoul(argv[4], 0, 10);
	unsigned long long n = strtoull(argv[5], 0, 10), sent = 0, errs = 0;
	char *buf = calloc(1, size);
	if (fd < 0 || !buf || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1 ||
	    (conn && connect(fd, (struct sockaddr *)&a, sizeof(a)))) {
		perror("bm-send");
		return 1;
	}
	for (unsigned long long i = 0; i < n; i++) {
		memcpy(buf, &i, sizeof(i) < size ? sizeof(i) : size);
		ssize_t r = conn ? send(fd, buf, size, 0)
				 : sendto(fd, buf, size, 0, (struct sockaddr *)&a, sizeof(a));
		if (r == (ssize_t)size)
			sent++;
		else
			errs++;
	}
	printf("bm-send: %s, %llu datagrams sent, %llu errors\n", argv[1], sent, errs);
	return errs != 0;
}
''')
    sender = f"{tmp}/bm-send"
    c = subprocess.run([cc, "-O2", "-o", sender, src], capture_output=True, text=True)
    if c.returncode != 0:
        print(f"\n(cannot compile the connected-socket sender with {cc}: {c.stderr.strip()})")
        sender = None
have_sockperf = shutil.which("sockperf") is not None

def sockperf_count(out):
    m_ = re.search(r"Total of (\d+) messages sent", out)
    return int(m_.group(1)) if m_ else None

M1 = 100000
progs = {}  # name: (cmd for a length, datagrams or None (parse), parse, what)
if have_sockperf:
    progs["sockperf"] = (lambda t: ["sockperf", "tp", "-i", DEST, "-p", str(PORT), "-m", "64",
                                    "--time", str(t), "--mps=max"],
                         None, sockperf_count, "unconnected, sendto(MSG_NOSIGNAL), 1 s a run")
progs["lf-1"] = (lambda k: fanout_cmd(1, 64, k), True, None, "unconnected, sendto")
if sender:
    progs["sendto"] = (lambda k: [sender, "sendto", DEST, str(PORT), "64", str(k)], True, None,
                       "unconnected, sendto: the twin of 'connect'")
    progs["connect"] = (lambda k: [sender, "connect", DEST, str(PORT), "64", str(k)], True, None,
                        "connected, send")
length1 = {"sockperf": 1}

def prog_cmd(name, k=None):
    mk, fixed, parse, _ = progs[name]
    k = k if k is not None else length1.get(name, M1)
    return mk(k), (k if fixed else None), parse

print(f"\n2, 3. one destination, 64 B, sender CPU ns per datagram, plain and bypass, {rounds} "
      f"interleaved rounds")
if not have_sockperf:
    print("   (sockperf is not installed: legacy-fanout --subscribers 1 only)")
if not sender:
    print("   (no C compiler: the connected-socket figure (3) is not measured)")
modes2 = ["plain", "bypass"] + BASE[:1]
res2 = {p_: {m: [] for m in modes2} for p_ in progs}
t0 = time.monotonic()
for r in range(rounds):
    for name in progs:
        for mode in modes2[r % len(modes2):] + modes2[:r % len(modes2)]:
            cmd, d, parse = prog_cmd(name)
            x = run(f"2/3 {name} {mode} round {r + 1}", cmd, mode, datagrams=d, parse=parse)
            if x:
                x["ns"] = x["cpu"] * 1e9 / x["datagrams"]
            res2[name][mode].append(x)
print(f"   {took(t0)}")
for name, res in res2.items():
    cmd, _, _ = prog_cmd(name)
    sec = "3 (connected)" if name == "connect" else "2"
    print(f"\n   [{sec}] {name}: {shown(cmd)}  ({progs[name][3]}; "
          + (f"{M1} datagrams a run)" if name != "sockperf" else
             "datagrams a run: " + ", ".join(
                 f"{mode} median {med([x['datagrams'] for x in good(res[mode])]):.0f}"
                 for mode in modes2 if good(res[mode])) + ")"))
    for mode in modes2:
        median_line(mode, [x and x["ns"] for x in res[mode]])
    # per datagram (sockperf's runs send different counts)
    ratio_line(res, "bypass", "plain", 0.6, key="ns")
    if BASE:
        ratio_line(res, "bypass-base", "plain", key="ns")
    frames_line(res["bypass"])
    rx_line(res)

# ---- 4. system calls ---------------------------------------------------------------------------
SEND = ("sendto", "sendmsg", "sendmmsg", "send", "write", "writev")
def strace_counts(path):
    counts = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[3].isdigit() and not f[-1].startswith("-"):
            counts[f[-1]] = int(f[3])
    return counts

print("\n4. system calls, strace -f -c (the traced program's own, every thread), plain and "
      "bypass, each program at two lengths:")
print("   per datagram = (calls at length 2 - calls at length 1) / (datagrams 2 - datagrams 1); "
      "fixed = calls at length 1 - per datagram x datagrams 1 (start-up, loader, set-up, exit)")
print("   send family = sendto + sendmsg + sendmmsg; write/writev and the AF_XDP port's kick "
      "(whichever call it is: see each program's per-datagram calls) in the total")
if not shutil.which("strace"):
    print("   strace is not installed: skipped")
else:
    lengths = {"sockperf": (1, 2)}
    print(f"   {'program':<10} {'run':<7} {'datagrams':>17} {'send/dgram':>11} {'total/dgram':>12} "
          f"{'send fixed':>11} {'total fixed':>12}")
    fits = {}
    t0 = time.monotonic()
    for name in progs:
        L = lengths.get(name, (20000, 40000))
        for mode in ("plain", "bypass"):
            pts = []
            for k in L:
                st = f"{tmp}/strace.{name}.{mode}.{k}"
                cmd, d, parse = prog_cmd(name, k)
                x = run(f"4 {name} {mode} strace {k}", cmd, mode, datagrams=d, parse=parse,
                        strace=st)
                if not x:
                    break
                c_ = strace_counts(st)
                c_.pop("total", None)
                pts.append((x["datagrams"], c_, x))
            if len(pts) < 2:
                print(f"   {name:<10} {mode:<7} failed (see the end)")
                continue
            (d1, c1, x1), (d2, c2, _) = pts
            names = set(c1) | set(c2)
            slope = {s: (c2.get(s, 0) - c1.get(s, 0)) / (d2 - d1) for s in names}
            fixed = {s: c1.get(s, 0) - slope[s] * d1 for s in names}
            fits[(name, mode)] = (slope, fixed, c1, c2)
            sf = lambda t: sum(v for s, v in t.items() if s in SEND[:3])
            print(f"   {name:<10} {mode:<7} {d1:>8}/{d2:<8} {sf(slope):>11.4f} "
                  f"{sum(slope.values()):>12.4f} {sf(fixed):>11.0f} {sum(fixed.values()):>12.0f}")
            if mode == "bypass" and "frames" in x1:
                x2 = pts[1][2]
                own = (f"; the shim's own count of system calls: {x1['shim_syscalls']} and "
                       f"{x2['shim_syscalls']}" if x1.get("shim_syscalls") is not None else "")
                print(f"   {'':<10} {'':<7} (xdp_frames {x1['frames']} of {x1['datagrams']}, "
                      f"kicks {x1['kicks']}, by the kernel's path: "
                      f"{x1.get('fallback') or 'none'}{own})")
    print(f"   {took(t0)}")
    for name in progs:
        if (name, "plain") not in fits or (name, "bypass") not in fits:
            continue
        (sp, fp, _, _), (sb, fb, _, _) = fits[(name, "plain")], fits[(name, "bypass")]
        # Steady state: the calls made at least once per 100 datagrams; rarer ones (a timer,
        # a retry: strace slows the program, so time-driven calls grow with the length too)
        # are listed apart with their counts at both lengths.
        steady = lambda sl: sum(v for v in sl.values() if v >= 0.01)
        tp_, tb = steady(sp), steady(sb)
        verdict = "not more" if tb <= tp_ + 0.01 else "MORE"
        print(f"   {name}: steady state per datagram, bypass {tb:.3f} vs plain {tp_:.3f}: "
              f"{verdict} [target: never more]")
        for mode in ("plain", "bypass"):
            sl, _, c1, c2 = fits[(name, mode)]
            per = ", ".join(f"{s} {v:.3f}" for s, v in sorted(sl.items()) if v >= 0.01)
            rare = ", ".join(f"{s} {c1.get(s, 0)} -> {c2.get(s, 0)}"
                             for s, v in sorted(sl.items()) if 0 < abs(v) < 0.01)
            print(f"      {mode}: per datagram {per or 'none'}"
                  + (f"; rarer, calls at length 1 -> 2: {rare}" if rare else ""))
        extra = {s: fb.get(s, 0) - fp.get(s, 0) for s in set(fp) | set(fb)}
        extra = {s: round(v) for s, v in extra.items() if abs(round(v)) >= 1}
        dfix = round(sum(fb.values()) - sum(fp.values()))
        print(f"      fixed set-up, bypass minus plain: {dfix:+d} ("
              + ", ".join(f"{s} {v:+d}" for s, v in sorted(extra.items(),
                                                          key=lambda t: (-abs(t[1]), t[0])))
              + ")")

# ---- 5. set-up CPU -----------------------------------------------------------------------------
cmd5 = fanout_cmd(1, 64, 1)
print(f"\n5. fixed CPU: one datagram, {shown(cmd5)}, plain and bypass, {rounds} interleaved "
      "rounds: the process's whole CPU time (loader, shim, AF_XDP port, exit), microseconds")
res5 = {"plain": [], "bypass": []}
for r in range(rounds):
    for mode in (["plain", "bypass"] if r % 2 == 0 else ["bypass", "plain"]):
        res5[mode].append(run(f"5 {mode} round {r + 1}", cmd5, mode, datagrams=1))
for mode in ("plain", "bypass"):
    median_line(mode, [x and x["cpu"] * 1e6 for x in res5[mode]])
d5 = [(b["cpu"] - p_["cpu"]) * 1e6 for b, p_ in zip(res5["bypass"], res5["plain"]) if b and p_]
if d5:
    print(f"   bypass - plain: median {med(d5):.0f} us (per round: "
          + " ".join(f"{x:.0f}" for x in d5) + ")")
frames_line(res5["bypass"])
rx_line(res5)

print(f"\nmeasure-bypass.sh: {time.monotonic() - t_start:.0f} s in all; load average at the end: "
      + " ".join(open("/proc/loadavg").read().split()[:3]))
if bad:
    print(f"\nCHECKS THAT FAILED ({len(bad)}):")
    for b in bad:
        print(f"   {b}")
shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if bad else 0)
PY
rc=$?
exit $rc
