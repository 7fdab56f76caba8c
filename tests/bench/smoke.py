#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Smoke tests for multisend-bench: the SHAPE of what it prints and writes, never a timing.

usage: smoke.py TEST BENCH
  json          --quick --json -: every available backend at every configuration, ratios
                present, figures positive, the table on stderr; then --ts-compare: the +ts
                variants' ratios to their plain backend, timestamp counters and histograms
                consistent, the skew histogram printed (--ts-hist) and in the CSV
  report        --quick --mode all --report DIR (with --subscribers, --segments, --unicast):
                the files exist and parse; charts when gnuplot is installed, each with the
                run's host and date at its foot; the page carries every warning line the
                terminal printed (the same set) and the whole table, the capacity answer and
                its table first (one recommended backend, its rule stated), the multicast
                answer (S + U destinations per message, the cores for them), every
                percentile with fewer than 10 samples beyond marked (table and spectrum data)
  preflight     a --report directory that cannot be made, a --report path under a regular
                file, and --fanout 1000000 (RLIMIT_NOFILE lowered): exit 1 with the reason,
                before anything is measured (no row, no JSON result, the report not made)
  sigint-report SIGINT once the first result row is on stdout: exit 130, and the --report
                directory holds that row (runs.jsonl, summary.csv, index.html marked
                incomplete)
  ratecap       --mode latency --rate 1000,50m: the rate no host sustains is capped below
                what the fastest backend measured flat out (said on stdout, requested_rate
                in the JSON), the sustainable one kept as given
  usage         bad flags exit 2 with a message; --help documents every flag
  deliver       --sink deliver: sent = received + kernel drops, nothing unaccounted (also
                with --ts-compare, whose +ts variants send from their own sockets)
  netns         --sink netns-drop (root): the veth dropped what was sent; namespace removed;
                with --ts-sample, the veth's transmit stamps come back
  netns-sigint  SIGINT during a netns-drop run: exit 130 and the namespace is removed
  netns-stale   (root, unshare) a netns-drop bench that is PID 1 of a PID namespace, killed
                with SIGKILL, leaves its namespace; the next bench, PID 1 of another PID
                namespace, runs and removes it, and so does one in ours, and an old-style
                msbench-1; a live one (also PID 1) is left alone while another runs, and
                removes its own on SIGTERM
  raw           the hand-written baselines (--backends all: raw-sendto, raw-sendmmsg,
                raw-io_uring beside the library's) on loopback, with --connected, on deliver
                (sent = received + kernel drops for each) and, as root, on netns-drop: every
                destination-send accounted, their own system-call counts, the library's
                ratios to their hand-written twins
  variants      --dontwait, --rotate, --compare-dontwait, --compare-rotate: the header and
                env say what ran; the +dontwait / +rotate variants interleave with their plain
                backend (raw baselines have no +rotate) and carry its ratio; on deliver every
                destination-send is accounted (sent = received + kernel drops, a refusal such as
                EAGAIN counted as failed, matching the library's own counters) and, as root, on
                netns-drop (sent = veth drops + UDP drops)
  connect       --lib-connect, --compare-connect (MS_CFG_CONNECT on the unconnected shape):
                each library backend's +connect variant interleaves with it and carries its
                ratio to it and to raw-sendto (the plain unconnected loop); its sockets are
                the library's, one per destination, on the plain socket's port, so on deliver
                nothing is foreign and every destination-send is accounted (sent = received +
                kernel drops), on loopback every one was sent, and, as root, on netns-drop
                sent = veth drops + UDP drops
  offload       --compare-offload, --offload (MS_CFG_OFFLOAD, sent with ms_post): each library
                backend's +offload variant interleaves with it and carries its ratio to it
                and its caller-CPU ratio to the plain loop; on deliver every destination-send is accounted from
                the library's counters after the drain (sent = received + kernel drops), also
                with --dontwait and a small ring, where whole calls are refused; the messages
                handed over are the fan-outs timed; as root, netns-drop too
  workers       --compare-workers 2: each library backend's +w2 variant interleaves with it;
                on deliver every destination-send is accounted; with --ts-compare/--ts-sample
                the +w2+ts variant is stamped on its own sockets (none foreign at the sink),
                measured against +ts, stamps every part's first and last destination, and
                carries its skew ratio to +ts; CSV columns consistent; as root, netns-drop too
  zc            --zc-min, --compare-zc, --mtu: refused outside their ranges; on loopback, where
                the kernel copies, io_uring+zc interleaves with plain io_uring (zc_min never:
                no SEND_ZC at all), sends with SEND_ZC until the kernel's first copy report
                (zc_copied > 0, at most zc_sends, and zero copy off before the sends end);
                as root, netns-drop with --mtu 65535 and 68
  tcp           --tcp: N TCP connections to receivers that count bytes; every destination-send
                of every backend arrives whole (bytes read = sent x size, messages received =
                sent, the library's byte count too); refused with netns-drop
  auto          --backends ...,auto: AUTO's row beside the fixed backends in the table, JSON
                (ratio to raw-sendto, auto_first for --auto-warmup, auto_describe) and CSV, on
                deliver with every destination-send accounted (warm-up's and auto's first
                seconds too); --auto-warmup 0 has no auto_first; as root, netns-drop too;
                the env object carries schema_version 1
  load          --background-load K: the load processes are the bench's children while it
                runs, and none is left once it ends (nor after the bench is killed with
                SIGKILL: PR_SET_PDEATHSIG); --load-from half/seconds said in the header, the
                JSON env and end objects
  timeline      --timeline 3 with --background-load 1 --load-from half on deliver: one
                timeline object per backend, slices of both halves adding up to the whole,
                as many slices per backend in each half, every destination-send accounted,
                AUTO's ratio to the best fixed library
                backend per part, the load off in the first half and on in the second
  xdp           (root, AF_XDP) --sink netns-xdp with raw-sendto, raw-xdp and xdp at fan-out 8,
                64 B: raw-xdp reports its figures (kicks per fan-out at least one, call wall
                p50 <= p99), the veth handed its peer every frame and datagram sent, xdp runs
                or is skipped with the library's reason; raw-xdp and xdp are skipped with a
                reason on netns-drop; the namespace is removed; raw-xdp's frames, read at the
                peer inside the namespace (odd size), are well-formed: MACs, addresses, ports,
                lengths, IPv4 and UDP checksums (the peer capture waits for the link to be up).
                Skipped without root or AF_XDP
  xdp-capture   (root) that peer capture started in a namespace of its own while msb1 is still
                down, msb1 brought up once the capture has its socket, frames sent into msb0:
                the capture reads them, well-formed, instead of failing with ENETDOWN
  kfanout       (root, BPF) --sink netns-xdp with raw-sendto, raw-sendto+hook, kfanout and
                raw-kfanout at fan-out 8 and 300 (two slices), 64 B: each runs, nothing failed
                or dropped, the veth handed its peer every datagram and clone sent, template
                sends per fan-out = ceil(N / slice) exactly (raw-kfanout's system calls, the
                library's kfanout_templates; its system calls at least that, with its rtnetlink
                reads), nothing went by the kernel's path; auto+kfanout beside sendmmsg,
                xdp and kfanout at 300: AUTO (no capabilities in effect) chose kfanout among
                loop, sendmmsg, io_uring and kfanout, xdp refused for want of capabilities
                (socket(AF_XDP) and xdp alone EPERM, the effective set read back 0), its
                kfanout templates and clones counted, nothing failed, dropped or sent by the
                kernel's path; the attachment's pins and the
                namespace are gone after the run, and after a SIGINT mid-run; kfanout is
                skipped with a reason on netns-drop. Skipped (77) without root, namespaces,
                BPF, bpffs, multisend-kfanout or a kfanout build; pins under
                /sys/fs/bpf/multisend/msb0 that a failed run of the test left are removed
  callgrind     --callgrind (needs valgrind; skipped without it): the rows parse, instructions
                per destination and the library / hand-written ratios are positive and finite,
                --callgrind-out keeps callgrind's files
Exit 77 = skipped.
"""
import errno
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

SKIP = 77
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(bench, *args, timeout=120):
    p = subprocess.run([bench, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def parse_lines(text):
    objs = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            objs.append(json.loads(line))
        except ValueError as e:
            check(False, f"stdout line {n} is not JSON ({e}): {line[:120]!r}")
    return objs


def positive(d, key):
    v = d.get(key)
    return isinstance(v, dict) and isinstance(v.get("median"), (int, float)) and v["median"] > 0 \
        and v["min"] > 0 and v["max"] >= v["min"]


def check_results(objs, modes=("compare",)):
    env = [o for o in objs if o.get("type") == "env"]
    if not check(len(env) == 1, f"expected one env object, got {len(env)}"):
        return [], []
    env = env[0]
    for k in ("kernel", "cpu_model", "cores_online", "library_version", "sink", "backends"):
        check(k in env, f"env lacks {k}")
    avail = [b["name"] for b in env["backends"] if b["available"]]
    for b in env["backends"]:
        if not b["available"]:
            check(b.get("reason"), f"unavailable backend {b['name']} has no reason")
    check("raw-sendto" in avail, "raw-sendto (the baseline) is not among the backends")
    bases = {b.split("+ts/")[0] for b in avail}  # --ts-sample runs loop as loop+ts/K
    check("loop" in bases and "sendmmsg" in bases, f"loop/sendmmsg missing: {avail}")
    results = [o for o in objs if o.get("type") == "result" and o.get("mode") in modes]
    check(results, "no results")
    configs = {}
    for r in results:
        configs.setdefault((r["mode"], r["fanout"], r["size"]), []).append(r["backend"])
        for k in ("fanouts_per_s", "dests_per_s", "cpu_ns_per_dest_process",
                  "cpu_ns_per_dest_caller", "syscalls_per_fanout", "wall_ns_per_dest"):
            check(positive(r, k), f"{r['backend']} N={r['fanout']} {k} not positive: {r.get(k)}")
        ratio = r.get("ratio_to_raw_sendto")
        if check(isinstance(ratio, dict), f"{r['backend']} N={r['fanout']}: no ratio"):
            for k in ("dests_per_s", "cpu_ns_per_dest_process", "cpu_ns_per_dest_caller",
                      "syscalls_per_fanout", "fanouts_per_s"):
                check(positive(ratio, k), f"{r['backend']} ratio {k} not positive")
            if r["backend"] == "raw-sendto":
                check(abs(ratio["cpu_ns_per_dest_process"]["median"] - 1) < 1e-9,
                      "raw-sendto's ratio to itself is not 1")
        check(len(r["runs"]) == r["rounds"] and r["rounds"] >= 1, "runs array != rounds")
        for run_ in r["runs"]:
            check(run_["fanouts"] == r["fanouts_per_run"], "a run did not do its fan-outs")
        if r["backend"] == "raw-sendto":
            check(r["syscalls_per_fanout"]["median"] == r["fanout"],
                  "raw-sendto must make one system call per destination")
        check(r["dests_sent"] == sum(x["fanouts"] for x in r["runs"]) * r["fanout"],
              "dests_sent != fan-outs x fan-out")
        check(isinstance(r["kernel"]["udp_drops"], int) and isinstance(r["drops"], int),
              "no drop counts")
    for cfg, backends in configs.items():
        check(sorted(backends) == sorted(avail),
              f"configuration {cfg}: backends {backends}, available {avail}")
    return avail, results


def ts_available(objs):
    """The +ts variants that could run; False (after checking the reason) if the kernel lacks
    per-datagram timestamp keys, which is the environment, not the bench."""
    env = [o for o in objs if o.get("type") == "env"]
    if not env:
        return False
    ts = [b for b in env[0]["backends"] if "+ts/" in b["name"]]
    check(ts, "no +ts backend in the env object")
    if ts and not any(b["available"] for b in ts):
        for b in ts:
            check(b.get("reason"), f"unavailable {b['name']} has no reason")
        print("timestamps unavailable here:", ts[0].get("reason"))
        return False
    return True


def check_ts_hist(name, h):
    """A histogram summary as the JSON gives it: quantiles in order, within the max."""
    if not check(isinstance(h, dict) and isinstance(h.get("samples"), int), f"{name}: {h}"):
        return
    if h["samples"] == 0:
        return
    qs = [h[k] for k in ("p50", "p90", "p99", "p99.9", "max")]
    check(all(isinstance(q, (int, float)) and q >= 0 for q in qs), f"{name}: {h}")
    check(qs == sorted(qs), f"{name}: quantiles out of order {qs}")


def check_ts_results(results, sample, compare, all_dests=False):
    """The +ts rows carry timestamps (and, with compare, their ratio to the plain backend);
    the plain rows carry neither. Shape and consistency only, never a time."""
    backends = {r["backend"] for r in results}
    for r in results:
        name = f"{r['backend']} N={r['fanout']}"
        ts, base = r.get("tx_timestamps"), r.get("ratio_to_no_ts")
        if "+ts/" not in r["backend"]:
            check(ts is None and base is None, f"{name}: plain row with timestamps")
            continue
        check(r["backend"].endswith(f"+ts/{sample}"), f"{name}: label lacks the interval")
        plain = r["backend"].split("+ts/")[0]
        if compare:
            check(plain in backends, f"{name}: its plain backend {plain} did not run")
            if check(isinstance(base, dict), f"{name}: no ratio_to_no_ts"):
                check(base.get("baseline") == plain, f"{name}: ratio baseline {base}")
                for k in ("cpu_ns_per_dest_process", "cpu_ns_per_dest_caller", "dests_per_s"):
                    check(positive(base, k), f"{name}: ratio_to_no_ts {k} not positive")
        else:
            check(plain not in backends, f"{name}: --ts-sample ran the plain backend too")
        if not check(isinstance(ts, dict), f"{name}: no tx_timestamps"):
            continue
        check(ts["sample_one_in"] == sample, f"{name}: sample_one_in {ts['sample_one_in']}")
        check(ts["sampled"] > 0, f"{name}: no fan-out sampled")
        check(ts["stamped"] > 0, f"{name}: no stamp came back")
        check(ts["stamped"] + ts["missing"] == ts["requested"],
              f"{name}: stamped {ts['stamped']} + missing {ts['missing']} != requested "
              f"{ts['requested']}")
        check(ts["dests"] == ("all" if all_dests else "first_last"), f"{name}: dests {ts['dests']}")
        if r["fanout"] >= 2:  # the first and the last, or every destination, of each sample
            per = r["fanout"] if all_dests else 2
            check(ts["requested"] == ts["sampled"] * per,
                  f"{name}: {ts['requested']} requested for {ts['sampled']} samples of {per}")
        check(ts["dest_lag_us"]["samples"] == ts["stamped"],
              f"{name}: dest_lag samples {ts['dest_lag_us']['samples']} != stamped")
        for k in ("call_to_first_us", "call_to_last_us", "skew_first_to_last_us", "dest_lag_us"):
            check_ts_hist(f"{name} {k}", ts.get(k))
        skew = ts["skew_first_to_last_us"]
        check(0 < skew["samples"] <= ts["sampled"], f"{name}: {skew['samples']} skew samples "
              f"of {ts['sampled']} sampled")
        hist = ts.get("skew_histogram_ns", [])
        check(sum(b[2] for b in hist) == skew["samples"], f"{name}: histogram counts != samples")
        check(all(b[0] <= b[1] and b[2] > 0 for b in hist)
              and all(a[1] < b[0] for a, b in zip(hist, hist[1:])),
              f"{name}: histogram buckets not ascending and disjoint")


def t_json(bench):
    rc, out, err = run(bench, "--quick", "--json", "-")
    check(rc == 0, f"exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check("compare:" in err and "raw-sendto" in err, "the table did not go to stderr")
    check(all(r.get("tx_timestamps", 0) is None for r in results),
          "timestamps without --ts-sample")
    print(f"{len(results)} results, backends {avail}")

    # Timestamps: each backend plain and +ts/2 side by side, the skew histograms, the CSV.
    d = tempfile.mkdtemp(prefix="msbench-ts-")
    try:
        csv_path = os.path.join(d, "ts.csv")
        rc, out, err = run(bench, "--quick", "--fanout", "16", "--ts-compare", "2", "--ts-hist",
                           "--json", "-", "--csv", csv_path)
        check(rc == 0, f"--ts-compare: exit status {rc}; stderr:\n{err}")
        objs = parse_lines(out)
        env = [o for o in objs if o.get("type") == "env"]
        if env:
            check(env[0].get("tx_timestamps") == {"sample_one_in": 2, "dests": "first_last",
                                                  "compare": True},
                  f"env tx_timestamps {env[0].get('tx_timestamps')}")
        avail, results = check_results(objs)
        if not ts_available(objs):
            return
        check_ts_results(results, 2, compare=True)
        check("TX timestamps" in err and "+ts vs plain" in err, "no timestamp table")
        check("skew first -> last destination" in err, "--ts-hist printed no histogram")
        with open(csv_path) as f:
            rows = [line.split(",") for line in f.read().splitlines()]
        head = rows[0]
        for col in ("ts_sample", "skew_p50_us", "skew_max_us", "ratio_cpu_no_ts"):
            check(col in head, f"CSV lacks {col}")
        for r in rows[1:]:
            check(len(r) == len(head), f"CSV row has {len(r)} of {len(head)} columns")
            if len(r) == len(head):
                row = dict(zip(head, r))
                ts = "+ts/" in row["backend"]
                check(bool(row["skew_p50_us"]) == ts and bool(row["ratio_cpu_no_ts"]) == ts,
                      f"CSV {row['backend']}: skew/ratio columns filled wrongly")
    finally:
        shutil.rmtree(d)


def html_text(html):
    """The page's text as the terminal had it: tags gone, entities decoded."""
    import html as h
    return h.unescape(re.sub(r"<[^>]*>", "", html))


def warning_lines(text):
    """The terminal's warning lines: '! ...' under a row, and skipped configurations."""
    return {ln.strip() for ln in text.splitlines()
            if ln.strip().startswith("! ") or ln.strip().startswith("skipped ")}


def t_report(bench):
    d = tempfile.mkdtemp(prefix="msbench-report-")
    try:
        rc, out, err = run(bench, "--quick", "--mode", "all", "--report", d,
                           "--subscribers", "100000", "--segments", "40", "--unicast", "10",
                           timeout=180)
        check(rc == 0, f"exit status {rc}; stderr:\n{err}")
        files = set(os.listdir(d))
        print("report files:", sorted(files))
        for f in ("summary.csv", "runs.jsonl", "index.html", "charts.gp"):
            check(f in files and os.path.getsize(os.path.join(d, f)) > 0, f"{f} missing or empty")
        with open(os.path.join(d, "runs.jsonl")) as f:
            objs = parse_lines(f.read())
        types = {o.get("type") for o in objs}
        check({"env", "result", "latency", "capacity"} <= types, f"runs.jsonl types {types}")
        check_results(objs, modes=("sweep", "capacity"))
        cap = [o for o in objs if o.get("type") == "capacity"]
        index = open(os.path.join(d, "index.html")).read()
        text = html_text(index)
        if cap:
            c = cap[0]
            check(c["answer"].startswith("At "), "capacity answer missing")
            check(c["backends"], "capacity table empty")
            rec = [b for b in c["backends"] if b["backend"] == c["recommended"]]
            if c["recommended"]:
                check(len(rec) == 1, f"recommended {c['recommended']!r} not in the table")
                check(c["rule"] and c["rule"] in c["answer"], "the rule is not in the answer")
                # Every tied backend is within the noise of the largest N (recommend.h).
                top = max(b["n_per_core"] for b in c["backends"]
                          if not b["backend"].startswith("raw-"))
                for b in c["backends"]:
                    if b["tied"]:
                        noise = max(b["noise"], max(x["noise"] for x in c["backends"]
                                                    if x["n_per_core"] == top))
                        check(top - b["n_per_core"] <= noise * top + 1,
                              f"{b['backend']} tied at {b['n_per_core']} of {top}, noise {noise}")
            m = c.get("multicast")
            check(m and m["segments"] == 40 and m["unicast"] == 10 and
                  m["dests_per_message"] == 50, f"multicast object {m}")
            if m and rec and rec[0]["n_per_core"]:
                want = -(-50 // rec[0]["n_per_core"])
                check(m["cores"] == want, f"multicast cores {m['cores']}, expected {want}")
                check("With IP multicast" in m["answer"] and m["answer"] in text,
                      "the multicast answer is not on the page")
            u = c.get("unicast_answer")
            if rec and rec[0]["n_per_core"]:
                check(u and u["cores"] == -(-100000 // rec[0]["n_per_core"]),
                      f"unicast answer {u}")
            # The answer, then its table, come before everything else on the page.
            a = index.find("<h2>Capacity</h2>")
            check(0 <= a < index.find("<h2>Warnings") < index.find("<h2>Environment"),
                  "the capacity answer is not first")
            check('<table class="capacity">' in index, "no capacity table on the page")
            check(index.count("<td>recommended</td>") == (1 if c["recommended"] else 0),
                  "not exactly one recommended row")
            check(c["answer"] in text, "the capacity answer is not on the page")
        # Every warning line the terminal printed is on the page, and no other.
        term = warning_lines(out)
        page_warn = index[index.find("<h2>Warnings"):index.find("<h2>Environment")]
        page = warning_lines(html_text(page_warn))
        check(term == page, f"warnings: terminal only {sorted(term - page)[:3]}, page only "
              f"{sorted(page - term)[:3]}")
        print(f"{len(term)} warning lines on the terminal and the page")
        # The whole table, word for word (fit lines, capacity table, preempt column).
        check(out.strip() and html_text(index).find(out.strip().splitlines()[0]) >= 0,
              "the terminal's first line is not on the page")
        for ln in out.splitlines():
            if ln.strip() and not ln.startswith("report written"):
                check(ln in text, f"terminal line not on the page: {ln[:80]!r}")
                break
        check(all(ln in text for ln in out.splitlines()
                  if ln.strip() and not ln.startswith("report written")),
              "a terminal line is missing from the page")
        with open(os.path.join(d, "summary.csv")) as f:
            rows = f.read().splitlines()
        check(len(rows) > 1, "summary.csv has no rows")
        ncol = len(rows[0].split(","))
        for r in rows[1:]:
            check(len(r.split(",")) == ncol, f"summary.csv row has {len(r.split(','))} of {ncol} "
                  f"columns: {r[:80]}")
        hgrms = [f for f in files if f.endswith(".hgrm")]
        check(hgrms, "no .hgrm files")
        lat = [o for o in objs if o.get("type") == "latency"]
        check(len(hgrms) == len(lat), f"{len(hgrms)} .hgrm files for {len(lat)} latency results")
        for h in hgrms:
            with open(os.path.join(d, h)) as f:
                text_h = f.read()
            check(text_h.startswith("       Value     Percentile TotalCount 1/(1-Percentile)"),
                  f"{h}: not HdrHistogram's header")
            check("#[Mean" in text_h and "#[Max" in text_h, f"{h}: no footer")
        for o in lat:
            check(o["samples"] > 0 and o["latency_us"]["p50"] > 0, "latency without samples")
            check(o["latency_us"]["p50"] <= o["latency_us"]["p99"] <= o["latency_us"]["max"],
                  "latency percentiles out of order")
        # Low-sample percentiles marked: a latency row's cells on the page carry * exactly
        # where fewer than 10 samples lie beyond, as samples_beyond says.
        rows_html = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>(\d+)[^<]*</td><td>([^<]+)"
                               r"</td><td>[^<]*</td><td>(\d+)</td>((?:<td[^>]*>[^<]*</td>){5})",
                               index)
        check(len(rows_html) == len(lat), f"{len(rows_html)} latency rows on the page for "
              f"{len(lat)} results")
        thin_seen = 0
        for n, size, rate, backend, samples, cells in rows_html:
            o = [x for x in lat if str(x["fanout"]) == n and str(x["rate"]) == rate and
                 x["backend"] == backend]
            if not check(len(o) == 1, f"latency row {backend} {n} {rate} not in the JSON"):
                continue
            marks = ["*" in c for c in re.findall(r"<td[^>]*>([^<]*)</td>", cells)]
            for k, lvl in enumerate(("p50", "p90", "p99", "p99.9", "p99.99")):
                q = {"p50": 50, "p90": 90, "p99": 99, "p99.9": 99.9, "p99.99": 99.99}[lvl]
                thin = o[0]["samples"] * (1 - q / 100) < 10
                thin_seen += thin
                check(marks[k] == thin, f"{backend} {n} {rate} {lvl}: marked {marks[k]}, "
                      f"{o[0]['samples']} samples")
        check(thin_seen, "no thin percentile in a --quick run: the marking went untested")
        if shutil.which("gnuplot"):
            svgs = [f for f in files if f.endswith(".svg")]
            for want in ("throughput-s", "cpu-per-dest-s", "capacity-s"):
                check(any(f.startswith(want) for f in svgs), f"no {want}*.svg chart")
            check(any(f.startswith("latency-spectrum-") for f in svgs), "no spectrum chart")
            check(any(f.startswith("latency-vs-rate-") for f in svgs), "no latency-vs-rate chart")
            env = [o for o in objs if o.get("type") == "env"][0]
            for sv in svgs:
                body = open(os.path.join(d, sv)).read()
                check(body.find("<svg") >= 0, f"{sv} is not SVG")
                check(sv in index, f"index.html does not show {sv}")
                check(env["start"] in body, f"{sv} does not carry the run's date")
                check(env["host"] and f"host {env['host']}," in body,
                      f"{sv} does not carry the host name")
            # The throughput zig-zag is the last chart; the capacity chart is with the answer.
            imgs = re.findall(r'<img src="([^"]+)"', index)
            check(imgs and imgs[0].startswith("capacity-"), f"first chart {imgs[:1]}")
            tp = [i for i, x in enumerate(imgs) if x.startswith("throughput-")]
            check(tp and tp[0] > max(i for i, x in enumerate(imgs)
                                     if not x.startswith("throughput-")),
                  f"throughput charts not last: {imgs}")
            # The spectrum's low-sample part is drawn apart (column 4 of its data).
            for sp in [f for f in os.listdir(os.path.join(d, "data")) if f.startswith("spectrum-")]:
                pts = [ln.split() for ln in open(os.path.join(d, "data", sp))
                       if not ln.startswith("#")]
                check(pts and all(len(p) == 4 for p in pts), f"{sp}: not 4 columns")
                check(any(p[3] == "1" for p in pts), f"{sp}: no low-sample point marked")
        else:
            print("gnuplot not installed: charts not checked")
    finally:
        if not failures:
            shutil.rmtree(d)
        else:
            print("report kept in", d)


def lowered_nofile():
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))


def t_preflight(bench):
    d = tempfile.mkdtemp(prefix="msbench-preflight-")
    try:
        plain = os.path.join(d, "file")
        open(plain, "w").close()
        for args, what in ((["--report", "/nonexistent/msbench/dir"], "/nonexistent/msbench/dir"),
                           (["--report", os.path.join(plain, "sub")], "Not a directory"),
                           (["--fanout", "1000000"], "--fanout 1000000 needs about")):
            p = subprocess.run([bench, "--quick", "--mode", "all", "--json", "-", *args],
                               capture_output=True, text=True, timeout=60,
                               preexec_fn=lowered_nofile)
            check(p.returncode == 1, f"{args}: exit {p.returncode}, expected 1")
            check(what in p.stderr, f"{args}: message lacks {what!r}: {p.stderr.strip()}")
            # Nothing measured: not one JSON line (not even the environment's), no row.
            check(p.stdout == "", f"{args}: measured before refusing: {p.stdout[:200]!r}")
        check(not os.path.exists(os.path.join(plain, "sub")), "made something under a file")
        # A list with one fan-out that can be set up: said, and the run goes on.
        p = subprocess.run([bench, "--quick", "--fanout", "1000000,4", "--json", "-",
                            "--backends", "raw-sendto"], capture_output=True, text=True,
                           timeout=60, preexec_fn=lowered_nofile)
        check(p.returncode == 0, f"1000000,4: exit {p.returncode}: {p.stderr}")
        check("it will be skipped" in p.stderr, "the impossible fan-out was not announced")
        res = [o for o in parse_lines(p.stdout) if o.get("type") == "result"]
        check(res and all(o["fanout"] == 4 for o in res), "fan-out 4 not measured alone")
    finally:
        shutil.rmtree(d)


def t_sigint_report(bench):
    d = tempfile.mkdtemp(prefix="msbench-sigint-")
    try:
        rep = os.path.join(d, "rep")
        p = subprocess.Popen([bench, "--fanout", "1,16", "--size", "64", "--duration", "60",
                              "--backends", "raw-sendto,loop", "--report", rep, "--no-progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = None
        deadline = time.time() + 100  # a bound on a slow machine, not a timing
        for line in p.stdout:
            m = re.match(r"\s*(\d+)\s+64\s+(raw-sendto|loop)\s", line)
            if m:
                first = (int(m.group(1)), m.group(2))
                break
            if time.time() > deadline:
                break
        check(first, "no result row appeared")
        p.send_signal(signal.SIGINT)
        try:
            rest, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rest, err = p.communicate()
            check(False, "did not stop within 60 s of SIGINT")
        check(p.returncode == 130, f"exit status {p.returncode}, expected 130; stderr:\n{err}")
        check("holds what finished" in err, f"no word of the partial report: {err}")
        with open(os.path.join(rep, "runs.jsonl")) as f:
            objs = parse_lines(f.read())
        res = [(o["fanout"], o["backend"]) for o in objs if o.get("type") == "result"]
        check(first in res, f"the row {first} seen on stdout is not in runs.jsonl: {res}")
        rows = open(os.path.join(rep, "summary.csv")).read().splitlines()
        check(len(rows) - 1 == len(res), f"summary.csv: {len(rows) - 1} rows for {len(res)}")
        index = open(os.path.join(rep, "index.html")).read()
        check("This report is incomplete: interrupted by" in index, "not marked incomplete")
        check(f"<td>{first[0]}</td><td>64</td><td>{first[1]}</td>" in index,
              f"the row {first} is not on the page")
    finally:
        if not failures:
            shutil.rmtree(d)
        else:
            print("kept", d)


def t_ratecap(bench):
    rc, out, err = run(bench, "--mode", "latency", "--quick", "--fanout", "16",
                       "--backends", "raw-sendto,loop", "--rate", "1000,50m", "--json", "-",
                       timeout=120)
    check(rc == 0, f"exit {rc}: {err}")
    lat = [o for o in parse_lines(out) if o.get("type") == "latency"]
    check(len(lat) == 4, f"{len(lat)} latency results, expected 2 rates x 2 backends")
    capped = [o for o in lat if o["requested_rate"] is not None]
    kept = [o for o in lat if o["requested_rate"] is None]
    check(len(capped) == 2 and all(o["requested_rate"] == 50000000 for o in capped),
          f"capped: {[(o['backend'], o['rate'], o['requested_rate']) for o in capped]}")
    check(len(kept) == 2 and all(o["rate"] == 1000 for o in kept),
          f"kept: {[(o['backend'], o['rate']) for o in kept]}")
    for o in capped:
        check(o["host_max_rate"] and o["rate"] <= 0.9 * o["host_max_rate"] + 1,
              f"{o['backend']}: capped to {o['rate']}, the host sustained {o['host_max_rate']}")
        check(o["host_max_rate"] >= o["backend_max_rate"] > 0, f"{o['backend']}: flat-out rates")
    check("offered 50000000/s capped to" in err and "flat out" in err,
          f"the cap was not said: {err[-600:]}")


def t_usage(bench):
    for args, what in ((["--bogus"], "unknown option"), (["--fanout", "0"], "--fanout"),
                       (["--size", "64,x"], "--size"), (["--sink", "nowhere"], "--sink"),
                       (["--backends", "loop,loop"], "twice"), (["--mode", "fast"], "--mode"),
                       (["--rounds"], "needs a value"), (["--cpu-budget", "1.5"], "--cpu-budget"),
                       (["--rate", "-5"], "--rate"), (["extra"], "unexpected argument"),
                       (["--sink", "deliver", "--size", "8"], "16 bytes"),
                       (["--ts-sample", "x"], "--ts-sample"), (["--ts-all"], "--ts-sample K"),
                       (["--ts-hist"], "--ts-compare K"),
                       (["--ts-sample", "4", "--ts-compare", "4"], "exclude each other"),
                       (["--ts-compare", "4", "--backends", "raw-sendto"], "library backend"),
                       (["--backends", "loop+ts/4"], "unknown backend"),
                       (["--backends", "raw-writev"], "raw-sendmmsg"),
                       (["--callgrind", "--mode", "sweep"], "no use there"),
                       (["--callgrind", "--ts-sample", "4"], "no use there"),
                       (["--callgrind-out", "/tmp/x"], "needs --callgrind"),
                       (["--callgrind-child", "2"], "internal"),
                       (["--dontwait", "--compare-dontwait"], "exclude each other"),
                       (["--rotate", "--compare-rotate"], "exclude each other"),
                       (["--compare-dontwait", "--ts-compare", "4"], "exclude each other"),
                       (["--compare-rotate", "--backends", "raw-sendto"], "library backend"),
                       (["--backends", "loop+dontwait"], "unknown backend"),
                       (["--callgrind", "--compare-dontwait"], "no use there"),
                       (["--compare-connect", "--connected"], "nothing to compare"),
                       (["--lib-connect", "--connected"], "unconnected shape"),
                       (["--lib-connect", "--compare-connect"], "exclude each other"),
                       (["--compare-connect", "--ts-compare", "4"], "exclude each other"),
                       (["--compare-connect", "--ts-sample", "4"], "exclude each other"),
                       (["--compare-connect", "--backends", "raw-sendto"], "library backend"),
                       (["--backends", "loop+connect"], "unknown backend"),
                       (["--callgrind", "--compare-connect"], "no use there"),
                       (["--workers", "0"], "--workers"), (["--workers", "65"], "--workers"),
                       (["--compare-workers", "1"], "--compare-workers"),
                       (["--workers", "2", "--compare-workers", "2"], "exclude each other"),
                       (["--offload", "--compare-offload"], "exclude each other"),
                       (["--offload-kib", "128"], "needs --offload"),
                       (["--offload", "--offload-kib", "32"], "--offload-kib"),
                       (["--cpus", "0"], "no thread"), (["--spin-us", "5"], "no thread"),
                       (["--workers", "1", "--cpus", "0"], "no thread"),
                       (["--offload", "--cpus", "0,x"], "--cpus"),
                       (["--offload", "--cpus", "1000"], "not available"),
                       (["--compare-offload", "--ts-sample", "4"], "exclude each other"),
                       (["--compare-offload", "--backends", "raw-sendto"], "library backend"),
                       (["--compare-workers", "2", "--backends", "raw-sendto"],
                        "library backend"),
                       (["--backends", "loop+offload"], "unknown backend"),
                       (["--backends", "loop+w2"], "unknown backend"),
                       (["--callgrind", "--offload"], "no use there"),
                       (["--callgrind", "--compare-workers", "2"], "no use there"),
                       (["--backends", "loop,autox"], "unknown backend"),
                       (["--backends", "auto,auto"], "twice"),
                       (["--auto-warmup", "1"], "needs auto"),
                       (["--backends", "auto", "--auto-warmup", "-1"], "--auto-warmup"),
                       (["--backends", "auto", "--auto-warmup", "3601"], "--auto-warmup"),
                       (["--backends", "auto", "--ts-sample", "4"], "library backend"),
                       (["--callgrind", "--backends", "auto"], "exclude each other"),
                       (["--background-load", "65"], "--background-load"),
                       (["--background-load", "-1"], "--background-load"),
                       (["--background-load", "two"], "--background-load"),
                       (["--load-from", "half"], "needs --background-load"),
                       (["--background-load", "0", "--load-from", "2"],
                        "needs --background-load"),
                       (["--background-load", "1", "--load-from", "later"], "--load-from"),
                       (["--background-load", "1", "--load-from", "-3"], "--load-from"),
                       (["--callgrind", "--background-load", "1"], "no use there"),
                       (["--timeline", "0.5"], "--timeline"), (["--timeline", "x"], "--timeline"),
                       (["--timeline", "5", "--mode", "compare"], "not with --mode"),
                       (["--timeline", "5", "--duration", "2"], "not with --duration"),
                       (["--timeline", "5", "--rounds", "2"], "not with --duration"),
                       (["--timeline", "5", "--quick"], "not with --duration"),
                       (["--timeline", "5", "--rate", "100"], "not --timeline"),
                       (["--timeline", "5", "--backends", "auto", "--auto-warmup", "1"],
                        "exclude each other"),
                       (["--callgrind", "--timeline", "5"], "no use there"),
                       (["--timeline", "5", "--csv", "/tmp/x.csv"], "not to --csv"),
                       (["--timeline", "5", "--report", "/tmp/x"], "not to --report"),
                       (["--unicast", "5"], "needs --segments"),
                       (["--segments", "4"], "--mode capacity"),
                       (["--mode", "capacity", "--segments", "0"], "--segments"),
                       (["--mode", "capacity", "--segments", "2", "--unicast", "x"], "--unicast"),
                       (["--mode", "capacity", "--segments", "10", "--subscribers", "5"],
                        "fewer"),
                       (["--callgrind", "--segments", "4"], "no use there")):
        rc, out, err = run(bench, *args)
        check(rc == 2, f"{args}: exit {rc}, expected 2")
        check(what in err, f"{args}: message lacks {what!r}: {err.strip()}")
        check(out == "", f"{args}: printed to stdout")
    rc, out, err = run(bench, "--help")
    check(rc == 0, "--help failed")
    for flag in ("--mode", "--backends", "--fanout", "--size", "--sink", "--connected",
                 "--duration", "--iterations", "--rounds", "--quick", "--rate", "--cpu ",
                 "--cpu-budget", "--p99-bound", "--subscribers", "--relay-cores", "--json",
                 "--csv", "--report", "--no-progress", "--help", "--version",
                 "--ts-sample", "--ts-compare", "--ts-all", "--ts-hist",
                 "--dontwait", "--rotate", "--compare-dontwait", "--compare-rotate",
                 "--lib-connect", "--compare-connect", "--workers", "--offload ",
                 "--compare-offload", "--compare-workers", "--offload-kib", "--spin-us",
                 "--cpus", "--callgrind", "--callgrind-out", "raw-sendmmsg", "raw-io_uring",
                 "--zc-min", "--compare-zc", "--mtu", "--tcp", "auto", "--auto-warmup",
                 "--background-load", "--load-from", "--timeline", "--segments", "--unicast",
                 "loopback", "netns-drop", "deliver", "compare", "sweep", "latency", "capacity"):
        check(flag in out, f"--help does not mention {flag}")
    rc, out, err = run(bench, "--version")
    check(rc == 0 and "libmultisend" in out, "--version")


def t_deliver(bench):
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "1,16,256",
                       "--json", "-")
    check(rc == 0, f"exit status {rc}; stderr:\n{err}")
    avail, results = check_results(parse_lines(out))
    for r in results:
        dv = r.get("deliver", {})
        sent = r["dests_sent"] - r["dests_failed"]
        check(dv.get("unaccounted") == 0, f"{r['backend']} N={r['fanout']}: {dv}")
        check(dv.get("malformed") == 0, f"{r['backend']}: malformed datagrams {dv}")
        check(dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
              f"{r['backend']} N={r['fanout']}: sent {sent} != received + drops {dv}")
    # The +ts variants send from sockets of their own: the receivers must know those too.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16", "--ts-compare",
                       "2", "--ts-all", "--json", "-")
    check(rc == 0, f"--ts-compare: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    for r in results:
        dv = r.get("deliver", {})
        sent = r["dests_sent"] - r["dests_failed"]
        check(dv.get("unaccounted") == 0 and dv.get("foreign") == 0,
              f"--ts-compare {r['backend']}: {dv}")
        check(dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
              f"--ts-compare {r['backend']}: sent {sent} != received + drops {dv}")
    if ts_available(objs):
        check_ts_results(results, 2, compare=True, all_dests=True)


def have_netns():
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("skipped: netns-drop needs root and iproute2")
        return False
    # Root is not always enough: a chroot (where / is no mount point) or a container without
    # the right capabilities cannot make namespaces. That is the environment, not the bench.
    probe = f"msbench-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        print(f"skipped: this environment cannot create a network namespace: {made.stderr.strip()}")
        return False
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return True


def namespaces():
    """The names of the network namespaces (ip netns list: NAME [(id: N)])."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()}


def ns_name(pid):
    """The namespace a bench of this PID namespace with this pid makes."""
    return f"msbench-{os.stat('/proc/self/ns/pid').st_ino}-{pid}"


def t_netns(bench):
    if not have_netns():
        return SKIP
    p = subprocess.Popen([bench, "--quick", "--sink", "netns-drop", "--fanout", "1,64",
                          "--json", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0, f"exit status {p.returncode}; stderr:\n{err}")
    avail, results = check_results(parse_lines(out))
    for r in results:
        # Every datagram sent must die at the veth; a stray packet of the kernel's own may add one.
        sent = r["dests_sent"] - r["dests_failed"]
        dropped = r["kernel"].get("veth_tx_dropped", -1)
        check(sent <= dropped <= sent + 8,
              f"{r['backend']} N={r['fanout']}: veth dropped {dropped} of {sent} sent")
    check(ns_name(p.pid) not in namespaces(), f"namespace {ns_name(p.pid)} left behind")
    # The veth stamps what it drops (TX_SCHED on the way in, TX_SOFTWARE in the driver).
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--fanout", "64",
                       "--ts-sample", "2", "--json", "-")
    check(rc == 0, f"--ts-sample: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    if ts_available(objs):
        check_ts_results(results, 2, compare=False)


def have_af_xdp():
    try:
        socket.socket(44, socket.SOCK_RAW, 0).close()  # AF_XDP
        return True
    except OSError as e:
        print(f"skipped: no AF_XDP socket here ({e})")
        return False


# Run inside the bench's namespace: read what arrives at the veth's peer and check that raw-xdp's
# frames are well-formed UDP datagrams (checksums included, which nobody on the path verifies).
# The namespace appears before the bench has made msb1 and brought it up: a packet socket bound
# to a device that is down gets ENETDOWN at its first recv (the kernel reports it at bind), and
# one bound while the device flaps gets it again. So wait (bounded) until msb1 exists and is
# up with a carrier, then bind, and take a later ENETDOWN as "nothing yet".
FRAME_CHECK = r'''
import errno, os, socket, struct, sys, time
size, n = int(sys.argv[1]), int(sys.argv[2])
wait = float(sys.argv[3]) if len(sys.argv) > 3 else 20
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
def link_up(dev):
    try:
        with open(f"/sys/class/net/{dev}/operstate") as f:
            state = f.read().strip()
        with open(f"/sys/class/net/{dev}/carrier") as f:
            return state == "up" and f.read().strip() == "1"
    except OSError:  # not there yet, or carrier unreadable while down
        return False
deadline = time.time() + wait
while not link_up("msb1") and time.time() < deadline:
    time.sleep(0.02)
if not link_up("msb1"):
    print("msb1 never came up within %g s" % wait)
    sys.exit(1)
s.bind(("msb1", 0))
s.settimeout(1.0)
def csum(b):
    if len(b) % 2:
        b += b"\0"
    x = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while x >> 16:
        x = (x & 0xffff) + (x >> 16)
    return x
seen, bad, deadline = 0, [], time.time() + 20
ports = set()
while seen < 200 and time.time() < deadline:
    try:
        f = s.recv(4096)
    except socket.timeout:
        continue
    except OSError as e:
        if e.errno != errno.ENETDOWN:
            raise
        continue  # the link went down after the bind; it delivers again once up
    if f[12:14] != b"\x08\x00":
        continue
    ip, udp = f[14:34], f[34:]
    seen += 1
    ulen = struct.unpack("!H", udp[4:6])[0]
    pseudo = ip[12:20] + struct.pack("!BBH", 0, 17, ulen)
    ports.add(struct.unpack("!H", udp[2:4])[0])
    why = []
    if f[0:6] != bytes.fromhex("02005e100002"): why.append("dst mac")
    if ip[0] != 0x45 or ip[9] != 17 or ip[8] != 64 or ip[6:8] != b"\x40\x00": why.append("ip fields")
    if struct.unpack("!H", ip[2:4])[0] != size + 28 or ulen != size + 8: why.append("lengths")
    if len(f) != 14 + 28 + size: why.append("frame length %d" % len(f))
    if csum(ip) != 0xffff: why.append("ip checksum")
    if udp[6:8] == b"\0\0" or csum(pseudo + udp[:ulen]) != 0xffff: why.append("udp checksum")
    if socket.inet_ntoa(ip[12:16]) != "10.213.0.1" or socket.inet_ntoa(ip[16:20]) != "10.213.0.2": why.append("addresses")
    if why:
        bad.append(",".join(why))
if not ports <= set(range(10000, 10000 + n)): bad.append("ports %s" % sorted(ports))
print("frames", seen, "bad", len(bad), bad[:3])
'''


# Sends well-formed 33-byte UDP datagrams 10.213.0.1 -> 10.213.0.2 ports 10000..10003 out of
# msb0 (IP_HDRINCL, checksums computed here: veth would leave a kernel datagram's UDP checksum
# to an offload nobody performs), paced, until argv[1] seconds have passed or it is killed.
FRAME_SEND = r'''
import socket, struct, sys, time
def csum(b):
    if len(b) % 2:
        b += b"\0"
    x = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while x >> 16:
        x = (x & 0xffff) + (x >> 16)
    return x
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
src, dst = socket.inet_aton("10.213.0.1"), socket.inet_aton("10.213.0.2")
payload, end, i = b"x" * 33, time.time() + float(sys.argv[1]), 0
while time.time() < end:
    port = 10000 + i % 4
    udp = struct.pack("!HHHH", 9999, port, 8 + len(payload), 0) + payload
    c = 0xffff - csum(src + dst + struct.pack("!BBH", 0, 17, len(udp)) + udp)
    udp = udp[:6] + struct.pack("!H", c or 0xffff) + udp[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xffff, 0x4000, 64, 17, 0,
                     src, dst)
    ip = ip[:10] + struct.pack("!H", 0xffff - csum(ip)) + ip[12:]
    try:
        s.sendto(ip + udp, ("10.213.0.2", 0))
    except OSError:
        pass  # msb0 has no carrier while msb1 is down
    i += 1
    time.sleep(0.005)
'''


def t_xdp_capture(bench):
    """The peer capture of check_xdp_frames started while msb1 is still down (as when it wins
    the race with the bench's `ip link set msb1 up`): it waits for the link and reads the
    frames sent once it is up, instead of failing with ENETDOWN."""
    if not have_netns():
        return SKIP
    name = "msbcap-" + uuid.uuid4().hex[:12]
    ip = lambda *a: subprocess.run(["ip", "-n", name, *a], capture_output=True, text=True)
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if not check(made.returncode == 0, f"ip netns add {name}: {made.stderr.strip()}"):
        return 1
    cap = snd = None
    try:
        for cmd in (["link", "add", "msb0", "type", "veth", "peer", "name", "msb1"],
                    ["link", "set", "msb0", "addrgenmode", "none"],
                    ["link", "set", "msb1", "addrgenmode", "none"],
                    ["addr", "add", "10.213.0.1/24", "dev", "msb0"],
                    ["link", "set", "msb0", "up"],
                    ["neigh", "replace", "10.213.0.2", "lladdr", "02:00:5e:10:00:02", "dev",
                     "msb0", "nud", "permanent"]):
            r = ip(*cmd)
            if not check(r.returncode == 0, f"ip {' '.join(cmd)}: {r.stderr.strip()}"):
                return 1
        cap = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", FRAME_CHECK,
                                "33", "4", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # msb1 stays down until the capture has its packet socket (listed in the namespace's
        # /proc/net/packet), so the capture always starts before the link is up.
        deadline = time.time() + 30
        while time.time() < deadline and cap.poll() is None:
            r = subprocess.run(["ip", "netns", "exec", name, "cat", "/proc/net/packet"],
                               capture_output=True, text=True)
            if len(r.stdout.splitlines()) > 1:
                break
            time.sleep(0.02)
        r = ip("link", "set", "msb1", "up")
        check(r.returncode == 0, f"ip link set msb1 up: {r.stderr.strip()}")
        snd = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", FRAME_SEND,
                                "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        out, err = cap.communicate(timeout=120)
        words = out.split()
        check(cap.returncode == 0 and len(words) >= 4 and words[0] == "frames" and
              int(words[1]) > 0 and words[3] == "0",
              f"the capture started before msb1 was up: exit status {cap.returncode}: "
              f"{out.strip()} {err.strip()}")
    finally:
        for p in (cap, snd):
            if p and p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    check(name not in namespaces(), f"namespace {name} left behind")
    return 0


def skipped_off_netns_xdp(runner, bench, names):
    """On netns-drop, the variants names (which need netns-xdp) are unavailable, saying so."""
    rc, out, err = runner(bench, "--quick", "--sink", "netns-drop", "--backends",
                          "raw-sendto," + ",".join(names), "--fanout", "1", "--size", "64",
                          "--json", "-")
    check(rc == 0, f"netns-drop: exit status {rc}; stderr:\n{err}")
    env = [o for o in parse_lines(out) if o.get("type") == "env"]
    check(bool(env), "netns-drop: no env line")
    for b in env[0]["backends"] if env else []:
        if b["name"] in names:
            check(not b["available"] and "netns-xdp" in (b.get("reason") or ""),
                  f"netns-drop: {b}")


def check_xdp_frames(bench):
    """raw-xdp alone at an odd size, its frames read at the peer inside the namespace."""
    p = subprocess.Popen([bench, "--sink", "netns-xdp", "--backends", "raw-xdp", "--fanout", "4",
                          "--size", "33", "--duration", "6", "--rounds", "2", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    name = ns_name(p.pid)
    deadline = time.time() + 10
    while name not in namespaces() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    got = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", FRAME_CHECK, "33", "4"],
                         capture_output=True, text=True, timeout=60)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0, f"raw-xdp alone: exit status {p.returncode}; stderr:\n{err}")
    words = got.stdout.split()
    check(got.returncode == 0 and len(words) >= 4 and int(words[1]) > 0 and words[3] == "0",
          f"raw-xdp's frames at the peer: {got.stdout.strip()} {got.stderr.strip()}")


def t_xdp(bench):
    if not have_netns() or not have_af_xdp():
        return SKIP
    p = subprocess.Popen([bench, "--quick", "--sink", "netns-xdp", "--backends",
                          "raw-sendto,raw-xdp,xdp", "--fanout", "8", "--size", "64",
                          "--json", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    out, err = p.communicate(timeout=120)
    check(p.returncode == 0, f"exit status {p.returncode}; stderr:\n{err}")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    if not check(len(env) == 1, f"expected one env object, got {len(env)}"):
        return 1
    check(env[0].get("sink") == "netns-xdp", f"sink {env[0].get('sink')}")
    backends = {b["name"]: b for b in env[0]["backends"]}
    check(backends.get("raw-xdp", {}).get("available"),
          f"raw-xdp unavailable: {backends.get('raw-xdp')}")
    xdp = backends.get("xdp", {})
    check(xdp.get("available") or xdp.get("reason"), f"xdp neither ran nor said why: {xdp}")
    results = {o["backend"]: o for o in objs
               if o.get("type") == "result" and o.get("mode") == "compare"}
    want = ["raw-sendto", "raw-xdp"] + (["xdp"] if xdp.get("available") else [])
    check(sorted(results) == sorted(want), f"results for {sorted(results)}, expected {want}")
    for name, r in results.items():
        for k in ("dests_per_s", "cpu_ns_per_dest_process", "syscalls_per_fanout"):
            check(positive(r, k), f"{name} {k} not positive: {r.get(k)}")
        sent = r["dests_sent"] - r["dests_failed"]
        check(r["dests_failed"] == 0, f"{name}: {r['dests_failed']} destinations failed")
        # Every frame and datagram reached the peer (which drops it); nothing else is sent
        # there but the odd packet of the kernel's own.
        tx = r["kernel"].get("veth_tx_packets", -1)
        check(sent <= tx <= sent + 8, f"{name}: the veth handed on {tx} of {sent} sent")
        check(r["drops"] == 0, f"{name}: {r['drops']} drops")
        cw = r.get("call_wall_ns")
        if check(isinstance(cw, dict), f"{name}: no call_wall_ns"):
            check(cw["calls"] > 0 and 0 < cw["p50"] <= cw["p99"], f"{name}: call wall {cw}")
    raw = results.get("raw-xdp")
    if raw:
        # At fan-out 8 one kick takes the whole fan-out (copy mode takes up to 32).
        check(raw["syscalls_per_fanout"]["median"] >= 1, "raw-xdp: no kick counted")
        check(raw["library"] is None, "raw-xdp has library counters")
    if "xdp" in results:
        lib = results["xdp"]["library"]
        check(lib["xdp_frames"] + lib["xdp_fallback"] == results["xdp"]["dests_sent"],
              f"xdp: frames + fallbacks != sent: {lib}")
    check("call wall, fan-out 8" in err, "the table lacks the call wall section")
    check(ns_name(p.pid) not in namespaces(), f"namespace {ns_name(p.pid)} left behind")
    check_xdp_frames(bench)
    # Elsewhere they are skipped, with the reason.
    skipped_off_netns_xdp(run, bench, ("raw-xdp", "xdp"))
    return 0


KF_PINS = "/sys/fs/bpf/multisend/msb0"
KF_SKIP = ("built without the kernel fan-out", "multisend-kfanout not found", "nsenter",
           "bpffs", "Operation not permitted", "Function not implemented", "Invalid argument",
           "BPF")


def kf_run(bench, *args, timeout=180):
    """Run the bench; whatever happens, remove the pins if this run left them (they were not
    there before it, so they are its own)."""
    had = os.path.lexists(KF_PINS)
    try:
        return run(bench, *args, timeout=timeout)
    finally:
        if not had and os.path.lexists(KF_PINS):
            check(False, f"the bench left {KF_PINS}; removed")
            shutil.rmtree(KF_PINS, ignore_errors=True)


def t_kfanout_auto(bench):
    """auto+kfanout at a fan-out where the kernel fan-out is clearly the cheapest (300: about a
    third of sendmmsg's CPU per destination): AUTO, made and sending with no capabilities in
    effect, chooses kfanout; xdp (named in its context, available to the bench's own xdp with
    the same settings) is not among its candidates, for want of capabilities."""
    rc, out, err = kf_run(bench, "--quick", "--sink", "netns-xdp", "--backends",
                          "sendmmsg,xdp,kfanout,auto+kfanout", "--fanout", "300", "--size", "64",
                          "--json", "-")
    if not check(rc == 0, f"auto+kfanout: exit status {rc}; stderr:\n{err}"):
        return
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    backends = {b["name"]: b for b in env[0]["backends"]} if env else {}
    if not check(backends.get("auto+kfanout", {}).get("available"),
                 f"auto+kfanout unavailable: {backends.get('auto+kfanout')}"):
        return
    res = {o["backend"]: o for o in objs if o.get("type") == "result"}
    a = res.get("auto+kfanout")
    if not check(a is not None, "no result for auto+kfanout"):
        return
    check(a["auto_backend"] == "kfanout",
          f"auto+kfanout chose {a['auto_backend']!r}, not kfanout: {a['auto_describe']}")
    m = re.search(r"auto over ([^;]+);", a["auto_describe"] or "")
    cands = set(m.group(1).split(", ")) if m else set()
    check(cands == {"loop", "sendmmsg", "io_uring", "kfanout"},
          f"auto+kfanout's candidates {sorted(cands)}: {a['auto_describe']}")
    u = a.get("unprivileged") or {}
    check(u.get("cap_drops", 0) > 0 and u.get("effective_caps") == "0x0000000000000000",
          f"auto+kfanout: capabilities not cleared: {u}")
    # xdp for want of capabilities, nothing else: the same settings work for the bench's xdp
    # (with them), and without them both the socket and the backend alone are refused with
    # EPERM (the library's once-per-process probe ran with them: sendmmsg's context first).
    if backends.get("xdp", {}).get("available"):
        check(u.get("af_xdp_socket_errno") == errno.EPERM and
              u.get("xdp_alone_error") == -errno.EPERM, f"auto+kfanout: xdp not refused so: {u}")
    else:
        print(f"xdp unavailable here even with capabilities, its refusal not checked: "
              f"{backends.get('xdp')}")
    lib = a["library"]
    check(lib["kfanout_templates"] > 0 and lib["kfanout_clones"] > 0,
          f"auto+kfanout: no kernel fan-out counted: {lib}")
    check(lib["kfanout_kernel_path"] == 0 and lib["kfanout_refused"] == 0,
          f"auto+kfanout: destinations left the kernel fan-out: {lib}")
    for name, r in res.items():
        check(r["dests_failed"] == 0, f"{name} N=300: {r['dests_failed']} destinations failed")
        check(r["drops"] == 0, f"{name} N=300: {r['drops']} drops")
    m = re.search(r"auto\+kfanout / best fixed backend \((\S+)\): ([0-9.]+)", err)
    if check(m, "no 'auto+kfanout / best fixed backend' line"):
        print(f"auto+kfanout / best fixed backend ({m.group(1)}): {m.group(2)}")
    check("auto+kfanout: auto (also 'auto first Xs'), with the kernel fan-out's program" in err,
          "the notes do not explain auto+kfanout")


def t_kfanout(bench):
    if not have_netns():
        return SKIP
    if os.path.lexists(KF_PINS):
        print(f"skipped: {KF_PINS} exists (another bench measuring the kernel fan-out)")
        return SKIP
    ns_before = {n for n in namespaces() if n.startswith("msbench-")}
    rc, out, err = kf_run(bench, "--quick", "--sink", "netns-xdp", "--backends",
                          "raw-sendto,raw-sendto+hook,kfanout,raw-kfanout", "--fanout", "8,300",
                          "--size", "64", "--json", "-")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    backends = {b["name"]: b for b in env[0]["backends"]} if env else {}
    kf = backends.get("kfanout", {})
    if env and not kf.get("available"):
        why = kf.get("reason") or ""
        if any(k in why for k in KF_SKIP):
            print(f"skipped: kfanout {why}")
            return SKIP
    if not check(rc == 0, f"exit status {rc}; stderr:\n{err}"):
        return 1
    if not check(len(env) == 1, f"expected one env object, got {len(env)}"):
        return 1
    for name in ("raw-sendto+hook", "kfanout", "raw-kfanout"):
        check(backends.get(name, {}).get("available"), f"{name} unavailable: {backends.get(name)}")
    m = re.search(r"slice (\d+)", kf.get("detail") or kf.get("description") or json.dumps(kf))
    if not check(m, f"kfanout's description names no slice: {kf}"):
        return 1
    slice_ = int(m.group(1))
    results = [o for o in objs if o.get("type") == "result" and o.get("mode") == "compare"]
    seen = {(r["backend"], r["fanout"]) for r in results}
    for n in (8, 300):
        for name in ("raw-sendto", "raw-sendto+hook", "kfanout", "raw-kfanout"):
            check((name, n) in seen, f"no result for {name} at fan-out {n}")
    for r in results:
        name, n = r["backend"], r["fanout"]
        sent = r["dests_sent"] - r["dests_failed"]
        check(r["dests_failed"] == 0, f"{name} N={n}: {r['dests_failed']} destinations failed")
        check(r["drops"] == 0, f"{name} N={n}: {r['drops']} drops")
        # Every datagram and clone reached the peer (which drops it), as the netns-xdp sink
        # counts; nothing else goes there but the odd packet of the kernel's own.
        tx = r["kernel"].get("veth_tx_packets", -1)
        check(sent <= tx <= sent + 8, f"{name} N={n}: the veth handed on {tx} of {sent} sent")
        slices = -(-n // slice_)
        sc = r["syscalls_per_fanout"]
        if name == "raw-kfanout":
            check(sc["min"] == sc["max"] == slices,
                  f"raw-kfanout N={n}: {sc} system calls per fan-out, not {slices}")
            check(r["library"] is None, "raw-kfanout has library counters")
        if name == "kfanout":
            lib = r["library"]
            check(lib["kfanout_templates"] == lib["fanouts"] * slices,
                  f"kfanout N={n}: {lib['kfanout_templates']} templates for {lib['fanouts']} "
                  f"fan-outs, not {slices} each")
            check(lib["kfanout_clones"] == lib["fanouts"] * n,
                  f"kfanout N={n}: {lib['kfanout_clones']} clones for {lib['fanouts']} fan-outs")
            check(lib["kfanout_kernel_path"] == 0 and lib["kfanout_refused"] == 0,
                  f"kfanout N={n}: destinations left the kernel fan-out: {lib}")
            check(slices <= sc["min"] and sc["median"] < slices + 0.5,
                  f"kfanout N={n}: {sc} system calls per fan-out for {slices} templates")
    check(not os.path.lexists(KF_PINS), f"{KF_PINS} left after the run")
    left = {n for n in namespaces() if n.startswith("msbench-")} - ns_before
    check(not left, f"namespaces left behind: {left}")
    check("raw-sendto+hook: raw-sendto with the kernel fan-out's program" in err,
          "the notes do not explain raw-sendto+hook")
    t_kfanout_auto(bench)

    # SIGINT mid-run: the program detached and the pins removed with the namespace.
    had = os.path.lexists(KF_PINS)
    p = subprocess.Popen([bench, "--sink", "netns-xdp", "--backends", "raw-sendto,kfanout",
                          "--fanout", "16", "--size", "64", "--duration", "60",
                          "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while not os.path.lexists(KF_PINS) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        check(os.path.lexists(KF_PINS), "the bench never attached (no pins)")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        check(p.returncode == 128 + signal.SIGINT,
              f"after SIGINT: exit status {p.returncode}; stderr:\n{err}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if not had and os.path.lexists(KF_PINS):
            check(False, f"{KF_PINS} left after SIGINT; removed")
            shutil.rmtree(KF_PINS, ignore_errors=True)
    check(ns_name(p.pid) not in namespaces(), f"namespace {ns_name(p.pid)} left after SIGINT")

    # Elsewhere the kernel fan-out's variants are skipped, with the reason.
    skipped_off_netns_xdp(kf_run, bench, ("kfanout", "raw-kfanout"))
    return 0


def t_netns_sigint(bench):
    if not have_netns():
        return SKIP
    p = subprocess.Popen([bench, "--sink", "netns-drop", "--fanout", "16", "--size", "64",
                          "--duration", "60", "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    name = ns_name(p.pid)
    deadline = time.time() + 10
    while name not in namespaces() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    check(name in namespaces(), f"{name} never appeared")
    time.sleep(1.0)  # well inside the measurement
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        check(False, "did not stop within 20 s of SIGINT")
    check(p.returncode == 130, f"exit status {p.returncode}, expected 130; stderr:\n{err}")
    check("interrupted" in err, "no message about the interruption")
    check(name not in namespaces(), f"{name} left behind after SIGINT")


LOCK_DIR = "/run/multisend-bench"


def children(pid):
    """The processes whose parent is pid."""
    kids = []
    for d in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{d}/stat").read() if d.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            kids.append(int(d))
    return kids


def bench_in_pidns(bench, *args):
    """A netns-drop bench as PID 1 of a PID namespace of its own (unshare --fork waits for
    it), stopped by the caller once its header, which comes after the namespace is made, names
    the namespace. Returns (the unshare process, the namespace's name, the bench's pid here)."""
    p = subprocess.Popen(["unshare", "--pid", "--fork", bench, "--sink", "netns-drop",
                          "--fanout", "16", "--size", "64", "--backends", "raw-sendto",
                          "--duration", "600", "--no-progress", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    name = None
    for line in p.stdout:
        if "namespace msbench-" in line:
            name = line.split("namespace ", 1)[1].split(",")[0]
            break
    kids = children(p.pid)
    if not check(name and name.endswith("-1") and len(kids) == 1,
                 f"the bench in a PID namespace: namespace {name}, processes {kids}"):
        p.kill()
        out, err = p.communicate()
        print(err, file=sys.stderr)
        return None, None, None
    check(name in namespaces(), f"{name} is not there while its bench runs")
    return p, name, kids[0]


def killed_in_pidns(bench):
    """A netns-drop bench, PID 1 of its PID namespace, killed with SIGKILL: unshare returns
    once it has been reaped. Its namespace stays behind. Returns the namespace's name."""
    p, name, pid = bench_in_pidns(bench)
    if not p:
        return None
    os.kill(pid, signal.SIGKILL)
    p.communicate(timeout=60)
    check(name in namespaces(), f"{name}: the killed bench's namespace is gone (nothing shown)")
    return name


def removed(name, rc, err, what):
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    check(f"removed stale namespace {name}" in err, f"{what}: no 'removed stale namespace {name}'")
    check(name not in namespaces(), f"{what}: {name} still there")
    check(not os.path.exists(f"{LOCK_DIR}/{name}.lock"), f"{what}: {name}'s lock file still there")


def t_netns_stale(bench):
    if not have_netns():
        return SKIP
    if not shutil.which("unshare") or subprocess.run(["unshare", "--pid", "--fork", "true"],
                                                      capture_output=True).returncode:
        print("skipped: unshare --pid does not work here")
        return SKIP
    quick = ["--quick", "--sink", "netns-drop", "--fanout", "16", "--size", "64", "--backends",
             "raw-sendto", "--json", "-"]
    # The next bench is PID 1 of a PID namespace too (whose inode is often the killed one's
    # again, so that it makes the same name).
    name = killed_in_pidns(bench)
    if name:
        p = subprocess.run(["unshare", "--pid", "--fork", bench, *quick], capture_output=True,
                           text=True, timeout=120)
        removed(name, p.returncode, p.stderr, "the next bench in a PID namespace")
    # The next bench is in ours: another name; its sweep finds the namespace's lock free.
    name = killed_in_pidns(bench)
    if name:
        rc, out, err = run(bench, *quick)
        removed(name, rc, err, "the next bench in this PID namespace")
    # "msbench-1", as a bench from before the lock files left it (named by its pid alone):
    # PID 1 here is no bench, so it is stale.
    if check(subprocess.run(["ip", "netns", "add", "msbench-1"]).returncode == 0,
             "ip netns add msbench-1"):
        rc, out, err = run(bench, *quick)
        removed("msbench-1", rc, err, "an old-style msbench-1")
    # A live bench (PID 1 as well) is left alone while another runs, as PID 1 of its own PID
    # namespace; then it removes its own on SIGTERM.
    p, name, pid = bench_in_pidns(bench)
    if p:
        q = subprocess.run(["unshare", "--pid", "--fork", bench, *quick], capture_output=True,
                           text=True, timeout=120)
        check(q.returncode == 0, f"a bench beside a live one: exit {q.returncode}:\n{q.stderr}")
        check("removed stale" not in q.stderr, f"a live namespace removed:\n{q.stderr}")
        check(name in namespaces(), f"{name}, whose bench is alive, was removed")
        os.kill(pid, signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        check(name not in namespaces(), f"{name} left behind after SIGTERM:\n{err}")


RAW = ("raw-sendto", "raw-sendmmsg", "raw-io_uring")
TWIN = {"loop": "raw-sendto", "sendmmsg": "raw-sendmmsg", "io_uring": "raw-io_uring"}


def check_raw(results, avail, connected, what):
    """The hand-written baselines' rows: every destination-send made and accounted for, their
    own system-call counts, and each library backend's ratio to its twin when both ran."""
    check("raw-sendmmsg" in avail, f"{what}: raw-sendmmsg did not run: {avail}")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        n, fanouts = r["fanout"], sum(x["fanouts"] for x in r["runs"])
        check(r["dests_sent"] == fanouts * n, f"{name}: dests_sent {r['dests_sent']}")
        check(r["dests_failed"] == 0, f"{name}: {r['dests_failed']} destinations refused")
        sc = r["syscalls_per_fanout"]["median"]
        if r["backend"] in RAW:
            check(r["library"] is None, f"{name}: a baseline with library counters")
            check(r["ratio_to_raw_twin"] is None, f"{name}: a baseline with a twin ratio")
        if r["backend"] == "raw-sendmmsg":
            # One call per socket per 1024 destinations: nothing failed, so nothing resent.
            want = n if connected else -(-n // 1024)
            check(sc == want, f"{name}: {sc} system calls per fan-out, expected {want}")
        elif r["backend"] == "raw-io_uring":
            # One submit-and-wait per ring-full (and a wait more if a send had to queue).
            check(-(-n // 4096) <= sc <= 2 * -(-n // 4096) + 1,
                  f"{name}: {sc} system calls per fan-out")
        elif r["backend"] in TWIN:
            twin = r.get("ratio_to_raw_twin")
            if TWIN[r["backend"]] in avail:
                if check(isinstance(twin, dict), f"{name}: no ratio_to_raw_twin"):
                    check(twin["baseline"] == TWIN[r["backend"]], f"{name}: twin {twin}")
                    check(positive(twin, "cpu_ns_per_dest_process"),
                          f"{name}: twin ratio not positive: {twin}")
            else:
                check(twin is None, f"{name}: a twin ratio without the twin")


def t_raw(bench):
    for extra, what in (([], "loopback"), (["--connected"], "loopback --connected")):
        rc, out, err = run(bench, "--quick", "--backends", "all", "--fanout", "1,64", *extra,
                           "--json", "-")
        check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
        avail, results = check_results(parse_lines(out))
        check_raw(results, avail, bool(extra), what)
        check("vs raw twin" in err, f"{what}: no 'vs raw twin' column")
    # Deliver: the receivers see every datagram each baseline says it sent.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--backends", "all", "--fanout",
                       "16,256", "--json", "-")
    check(rc == 0, f"deliver: exit status {rc}; stderr:\n{err}")
    avail, results = check_results(parse_lines(out))
    check_raw(results, avail, False, "deliver")
    for r in results:
        dv = r.get("deliver", {})
        sent = r["dests_sent"] - r["dests_failed"]
        check(dv.get("unaccounted") == 0 and dv.get("malformed") == 0,
              f"deliver {r['backend']} N={r['fanout']}: {dv}")
        check(dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
              f"deliver {r['backend']} N={r['fanout']}: sent {sent} != received + drops {dv}")
    if not have_netns():
        return
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--backends", "all",
                       "--fanout", "1,64", "--json", "-")
    check(rc == 0, f"netns-drop: exit status {rc}; stderr:\n{err}")
    avail, results = check_results(parse_lines(out))
    check_raw(results, avail, False, "netns-drop")
    for r in results:
        sent = r["dests_sent"] - r["dests_failed"]
        dropped = r["kernel"].get("veth_tx_dropped", -1)
        check(sent <= dropped <= sent + 8,
              f"netns-drop {r['backend']} N={r['fanout']}: veth dropped {dropped} of {sent}")


def check_accounted(results, what, lib=True):
    """Deliver: every destination-send accounted: the ones the kernel took were received or
    dropped (a refusal, EAGAIN included, is failed and never expected at the sink), and the
    library's own counters agree with what ms_send returned."""
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        dv = r.get("deliver", {})
        sent = r["dests_sent"] - r["dests_failed"]
        check(dv.get("unaccounted") == 0 and dv.get("malformed") == 0 and dv.get("foreign") == 0,
              f"{name}: {dv}")
        check(dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
              f"{name}: sent {sent} != received + drops {dv}")
        lc = r.get("library")
        if lib and r["base_backend"] not in RAW and check(isinstance(lc, dict), f"{name}: no "
                                                                               "library counters"):
            check(lc["dests_attempted"] == r["dests_sent"] and
                  lc["dests_failed"] == r["dests_failed"] and
                  lc["dests_accepted"] == sent, f"{name}: library counters {lc}, sent {sent}")


def check_variants(objs, results, avail, what, dw, rot):
    """The variants' rows: each follows its plain backend, carries its ratio to it; env says
    what ran."""
    env = [o for o in objs if o.get("type") == "env"][0]
    opts = env.get("send_options", {})
    check(opts.get("compare_dontwait") == dw and opts.get("compare_rotate") == rot,
          f"{what}: env send_options {opts}")
    names = set(avail)
    for b in avail:
        base, _, var = b.partition("+")
        check(var in ("", "dontwait", "rotate"), f"{what}: unexpected backend {b}")
        if var:
            check(base in names, f"{what}: {b} without {base}")
        if var == "rotate":
            check(base not in RAW, f"{what}: a baseline with +rotate: {b}")
    for base in avail:
        if "+" in base:
            continue
        check(dw == (base + "+dontwait" in names), f"{what}: {base}+dontwait ran: {not dw}")
        if base not in RAW:
            check(rot == (base + "+rotate" in names), f"{what}: {base}+rotate ran: {not rot}")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        ratio = r.get("ratio_to_plain")
        check(r.get("base_backend") == r["backend"].split("+")[0], f"{name}: base_backend")
        if r["variant"] == "plain":
            check(ratio is None, f"{name}: a plain backend with a ratio to plain")
            continue
        check(r["variant"] == r["backend"].split("+")[1], f"{name}: variant {r['variant']}")
        if check(isinstance(ratio, dict), f"{name}: no ratio_to_plain"):
            check(ratio["baseline"] == r["base_backend"], f"{name}: ratio baseline {ratio}")
            check(positive(ratio, "cpu_ns_per_dest_process"), f"{name}: ratio {ratio}")
        twin = r.get("ratio_to_raw_twin")
        if r["variant"] == "dontwait" and r["base_backend"] in TWIN and \
                TWIN[r["base_backend"]] + "+dontwait" in names:
            check(isinstance(twin, dict) and
                  twin["baseline"] == TWIN[r["base_backend"]] + "+dontwait",
                  f"{name}: twin {twin}")


def t_variants(bench):
    # One switch at a time on deliver: the header says so; every destination-send accounted.
    for opt, line in (("--dontwait", "every send without waiting"),
                      ("--rotate", "library contexts with MS_CFG_ROTATE")):
        rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16,256",
                           "--backends", "all", opt, "--json", "-")
        check(rc == 0, f"{opt}: exit status {rc}; stderr:\n{err}")
        check(line in err, f"{opt}: the header does not say {line!r}")
        objs = parse_lines(out)
        avail, results = check_results(objs)
        env = [o for o in objs if o.get("type") == "env"]
        key = opt[2:]
        check(env and env[0].get("send_options", {}).get(key) is True,
              f"{opt}: env send_options {env and env[0].get('send_options')}")
        check_accounted(results, opt)
    # Both comparisons in one run, every backend, interleaved with the plain ones.
    for sink in ("loopback", "deliver"):
        rc, out, err = run(bench, "--quick", "--sink", sink, "--fanout", "16", "--backends",
                           "all", "--compare-dontwait", "--compare-rotate", "--json", "-")
        what = f"{sink} --compare-dontwait --compare-rotate"
        check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
        check("vs plain" in err, f"{what}: no 'vs plain' column")
        objs = parse_lines(out)
        avail, results = check_results(objs)
        check_variants(objs, results, avail, what, True, True)
        for r in results:
            check(r["dests_sent"] == sum(x["fanouts"] for x in r["runs"]) * r["fanout"],
                  f"{what} {r['backend']}: dests_sent")
        if sink == "deliver":
            check_accounted(results, what)
    rc, out, err = run(bench, "--quick", "--fanout", "16", "--compare-rotate", "--json", "-")
    check(rc == 0, f"--compare-rotate: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_variants(objs, results, avail, "--compare-rotate", False, True)
    if not have_netns():
        return
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--fanout", "1,64",
                       "--backends", "all", "--compare-dontwait", "--json", "-")
    check(rc == 0, f"netns-drop --compare-dontwait: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_variants(objs, results, avail, "netns-drop", True, False)
    for r in results:
        name = f"netns-drop {r['backend']} N={r['fanout']}"
        sent = r["dests_sent"] - r["dests_failed"]
        k = r["kernel"]
        # What the sender was told was taken: put out by UDP (and dropped at the veth), or
        # lost before (drops); a refused send is in neither.
        check(k["udp_out_datagrams"] + r["drops"] == sent,
              f"{name}: sent {sent} != UDP out {k['udp_out_datagrams']} + drops {r['drops']}")
        check(k["udp_out_datagrams"] <= k.get("veth_tx_dropped", -1) <=
              k["udp_out_datagrams"] + 8, f"{name}: veth dropped {k.get('veth_tx_dropped')} "
              f"of {k['udp_out_datagrams']}")


def check_connect(objs, results, avail, what, compare):
    """--compare-connect (compare) or --lib-connect: env says so; with compare, every library
    backend is followed by its +connect variant, which carries its ratio to the plain backend
    and to raw-sendto; every row made all its destination-sends, none refused."""
    env = [o for o in objs if o.get("type") == "env"][0]
    opts = env.get("send_options", {})
    check(opts.get("compare_connect") == compare and opts.get("connect") == (not compare),
          f"{what}: env send_options {opts}")
    names = set(avail)
    for b in avail:
        base, _, var = b.partition("+")
        check(var == "" or (var == "connect" and compare and base not in RAW),
              f"{what}: unexpected backend {b}")
        if var:
            check(base in names, f"{what}: {b} without {base}")
        elif compare and base not in RAW:
            check(base + "+connect" in names, f"{what}: {base} ran without {base}+connect")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        n, fanouts = r["fanout"], sum(x["fanouts"] for x in r["runs"])
        check(r["dests_sent"] == fanouts * n, f"{name}: dests_sent {r['dests_sent']}")
        check(r["dests_failed"] == 0, f"{name}: {r['dests_failed']} destinations refused")
        check(r.get("base_backend") == r["backend"].split("+")[0], f"{name}: base_backend")
        ratio = r.get("ratio_to_plain")
        if r["variant"] == "plain":
            check(ratio is None, f"{name}: a plain backend with a ratio to plain")
            continue
        check(r["variant"] == "connect", f"{name}: variant {r['variant']}")
        if check(isinstance(ratio, dict), f"{name}: no ratio_to_plain"):
            check(ratio["baseline"] == r["base_backend"], f"{name}: ratio baseline {ratio}")
            check(positive(ratio, "cpu_ns_per_dest_process"), f"{name}: ratio {ratio}")
        raw = r.get("ratio_to_raw_sendto")
        check(isinstance(raw, dict) and positive(raw, "cpu_ns_per_dest_process"),
              f"{name}: no ratio to raw-sendto: {raw}")
        if r["base_backend"] == "loop":
            # One connected socket per destination: one send(2) each.
            check(r["syscalls_per_fanout"]["median"] == n,
                  f"{name}: {r['syscalls_per_fanout']} system calls per fan-out")


def t_connect(bench):
    # On deliver the library's sockets send from the plain socket's port: nothing foreign,
    # every destination-send accounted; on loopback every one made.
    for sink in ("loopback", "deliver"):
        rc, out, err = run(bench, "--quick", "--sink", sink, "--fanout", "16,64",
                           "--compare-connect", "--json", "-")
        what = f"{sink} --compare-connect"
        check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
        check("vs plain" in err, f"{what}: no 'vs plain' column")
        check("each library backend also runs as +connect" in err,
              f"{what}: the header does not say so")
        objs = parse_lines(out)
        avail, results = check_results(objs)
        check_connect(objs, results, avail, what, True)
        if sink == "deliver":
            check_accounted(results, what)
        else:
            for r in results:
                check(r["drops"] == 0, f"{what} {r['backend']}: {r['drops']} drops")
    # Both --compare options together: each variant runs beside its plain backend.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16",
                       "--compare-connect", "--compare-rotate", "--json", "-")
    what = "deliver --compare-connect --compare-rotate"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    avail, results = check_results(parse_lines(out))
    for b in avail:
        if b.split("+")[0] not in RAW and "+" not in b:
            check(b + "+connect" in avail and b + "+rotate" in avail, f"{what}: {avail}")
    check_accounted(results, what)
    # The switch: every library group connected, the baselines not.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16,64",
                       "--lib-connect", "--json", "-")
    check(rc == 0, f"--lib-connect: exit status {rc}; stderr:\n{err}")
    check("library contexts with MS_CFG_CONNECT" in err,
          "--lib-connect: the header does not say so")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_connect(objs, results, avail, "--lib-connect", False)
    check_accounted(results, "--lib-connect")
    if not have_netns():
        return
    # The library's sockets are made on the sending thread, inside the namespace (the bench
    # checks each one): everything they send dies at the veth too.
    p = subprocess.Popen([bench, "--quick", "--sink", "netns-drop", "--fanout", "1,64",
                          "--compare-connect", "--json", "-"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    what = "netns-drop --compare-connect"
    check(p.returncode == 0, f"{what}: exit status {p.returncode}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_connect(objs, results, avail, what, True)
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        sent = r["dests_sent"] - r["dests_failed"]
        k = r["kernel"]
        check(k["udp_out_datagrams"] + r["drops"] == sent,
              f"{name}: sent {sent} != UDP out {k['udp_out_datagrams']} + drops {r['drops']}")
        check(k["udp_out_datagrams"] <= k.get("veth_tx_dropped", -1) <=
              k["udp_out_datagrams"] + 8, f"{name}: veth dropped {k.get('veth_tx_dropped')} "
              f"of {k['udp_out_datagrams']}")
    check(ns_name(p.pid) not in namespaces(), f"namespace {ns_name(p.pid)} left behind")


def check_threads(objs, results, avail, what, kind, k=0, ts=0):
    """--compare-offload (kind "offload") or --compare-workers k (kind "workers"), stamped
    with --ts-sample/--ts-compare ts: env says so; every library backend runs with its
    variant next to it, which carries its ratio to what it is measured against (the plain
    backend, or for +wK+ts the +ts variant) and its threads; every destination-send made."""
    env = [o for o in objs if o.get("type") == "env"][0]
    opts = env.get("send_options", {})
    check(opts.get("compare_offload") == (kind == "offload") and
          opts.get("compare_workers") == (k if kind == "workers" else 0),
          f"{what}: env send_options {opts}")
    suffix = "offload" if kind == "offload" else f"w{k}" + (f"+ts/{ts}" if ts else "")
    names = set(avail)
    for b in avail:
        base = b.split("+")[0]
        if base in RAW or "+" in b:
            continue
        check(f"{base}+{suffix}" in names, f"{what}: {base} ran without {base}+{suffix}")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        n, fanouts = r["fanout"], sum(x["fanouts"] for x in r["runs"])
        check(r["dests_sent"] == fanouts * n, f"{name}: dests_sent {r['dests_sent']}")
        check(r.get("base_backend") == r["backend"].split("+")[0], f"{name}: base_backend")
        ratio, lp = r.get("ratio_to_plain"), r.get("caller_cpu_ratio_to_loop")
        if not r["backend"].endswith("+" + suffix):
            check(r["workers"] == 0 and r["offload"] is False, f"{name}: threads {r}")
            check(lp is None, f"{name}: a caller ratio to the loop")
            continue
        check(r["variant"] == ("offload" if kind == "offload" else
                               "workers_ts" if ts else "workers"), f"{name}: {r['variant']}")
        check(r["workers"] == (k if kind == "workers" else 0) and
              r["offload"] == (kind == "offload"), f"{name}: workers {r['workers']}, "
              f"offload {r['offload']}")
        ref = r["base_backend"] + (f"+ts/{ts}" if ts else "")
        if check(isinstance(ratio, dict), f"{name}: no ratio_to_plain"):
            check(ratio["baseline"] == ref, f"{name}: ratio baseline {ratio['baseline']}")
            for key in ("cpu_ns_per_dest_process", "cpu_ns_per_dest_caller"):
                check(positive(ratio, key), f"{name}: ratio {key} {ratio.get(key)}")
        if kind == "offload":
            if "loop" in names and check(isinstance(lp, dict), f"{name}: no caller ratio"):
                check(lp["baseline"] == "loop" and positive(lp, "cpu_ns_per_dest_caller"),
                      f"{name}: caller ratio {lp}")
            lc = r["library"]
            # Every message handed over in the timed runs, each once: the fan-outs timed.
            check(lc["offload_msgs"] + lc["offload_refused"] == fanouts,
                  f"{name}: {lc['offload_msgs']} handed over + {lc['offload_refused']} refused "
                  f"for {fanouts} fan-outs")
            check(all("drain_cpu_ns" in x for x in r["runs"]), f"{name}: no drain_cpu_ns")
        else:
            check(lp is None, f"{name}: a caller ratio to the loop")


def check_lib_accounted(results, what):
    """The library's counters agree with the bench's figures; under offload a call refused
    whole (-EAGAIN, ring full) attempted nothing and counts as n failed destinations."""
    for r in results:
        lc = r.get("library")
        if r["base_backend"] in RAW or not check(isinstance(lc, dict), f"{what}: no counters"):
            continue
        name = f"{what} {r['backend']} N={r['fanout']}"
        refused = lc["offload_refused"] * r["fanout"]
        sent = r["dests_sent"] - r["dests_failed"]
        check(lc["dests_attempted"] + refused == r["dests_sent"] and
              lc["dests_failed"] + refused == r["dests_failed"] and
              lc["dests_accepted"] == sent, f"{name}: library counters {lc}, bench sent "
              f"{r['dests_sent']}, failed {r['dests_failed']}")


def check_delivered(results, what):
    """Deliver: what the kernel took was received or dropped; nothing foreign or malformed."""
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        dv = r.get("deliver", {})
        sent = r["dests_sent"] - r["dests_failed"]
        check(dv.get("unaccounted") == 0 and dv.get("malformed") == 0 and dv.get("foreign") == 0,
              f"{name}: {dv}")
        check(dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
              f"{name}: sent {sent} != received + drops {dv}")


def check_netns_sent(results, what):
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        sent = r["dests_sent"] - r["dests_failed"]
        k = r["kernel"]
        check(k["udp_out_datagrams"] + r["drops"] == sent,
              f"{name}: sent {sent} != UDP out {k['udp_out_datagrams']} + drops {r['drops']}")
        check(k["udp_out_datagrams"] <= k.get("veth_tx_dropped", -1) <=
              k["udp_out_datagrams"] + 8, f"{name}: veth dropped {k.get('veth_tx_dropped')} "
              f"of {k['udp_out_datagrams']}")


def t_offload(bench):
    # Deliver: the datagrams the library thread sent all arrive, accounted from its counters.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16,64",
                       "--compare-offload", "--json", "-")
    what = "deliver --compare-offload"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    check("vs plain" in err and "caller vs loop" in err, f"{what}: no ratio columns")
    check("each library backend also runs as +offload" in err, f"{what}: the header")
    check("ms_post" in err, f"{what}: the header does not say the messages are posted")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_threads(objs, results, avail, what, "offload")
    check_delivered(results, what)
    check_lib_accounted(results, what)
    for r in results:
        check(r["dests_failed"] == 0, f"{what} {r['backend']}: {r['dests_failed']} failed")
    # Without waiting, on a ring too small for the run: calls refused whole are failed
    # destinations, never expected at the sink, never in the library's attempts.
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "64", "--size", "1024",
                       "--backends", "loop,sendmmsg", "--offload", "--offload-kib", "64",
                       "--dontwait", "--json", "-")
    what = "deliver --offload --dontwait"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    check(env and env[0]["send_options"].get("offload") is True and
          env[0]["send_options"].get("offload_kib") == 64, f"{what}: env {env}")
    results = [o for o in objs if o.get("type") == "result"]
    check(results, f"{what}: no results")
    for r in results:
        check(r["offload"] is True and r["variant"] == "plain", f"{what}: {r['backend']}")
        check(r["library"]["offload_msgs"] + r["library"]["offload_refused"] ==
              sum(x["fanouts"] for x in r["runs"]), f"{what} {r['backend']}: {r['library']}")
    check_delivered(results, what)
    check_lib_accounted(results, what)
    if not have_netns():
        return
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--fanout", "1,64",
                       "--compare-offload", "--json", "-")
    what = "netns-drop --compare-offload"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_threads(objs, results, avail, what, "offload")
    check_lib_accounted(results, what)
    check_netns_sent(results, what)


def t_workers(bench):
    rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "16,64",
                       "--compare-workers", "2", "--json", "-")
    what = "deliver --compare-workers 2"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    check("vs plain" in err and "also runs as +w2" in err, f"{what}: column or header")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_threads(objs, results, avail, what, "workers", 2)
    check_delivered(results, what)
    check_lib_accounted(results, what)
    # Stamped: plain, +ts/2 and +w2+ts/2 of every library backend, each stamped one on its own
    # sockets (the deliver receivers know them all: nothing foreign).
    d = tempfile.mkdtemp(prefix="msbench-w-")
    try:
        csv_path = os.path.join(d, "w.csv")
        rc, out, err = run(bench, "--quick", "--sink", "deliver", "--fanout", "64",
                           "--compare-workers", "2", "--ts-compare", "2", "--json", "-",
                           "--csv", csv_path)
        what = "deliver --compare-workers 2 --ts-compare 2"
        check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
        objs = parse_lines(out)
        avail, results = check_results(objs)
        check_delivered(results, what)
        check_lib_accounted(results, what)
        if ts_available(objs):
            check_threads(objs, results, avail, what, "workers", 2, 2)
            check("skew vs 1 thread" in err, f"{what}: no skew ratio column")
            for r in results:
                name = f"{what} {r['backend']}"
                ts = r["tx_timestamps"]
                if "+w2+ts/" not in r["backend"]:
                    check(ts is None or ts.get("skew_ratio_to_single_thread") is None,
                          f"{name}: a skew ratio")
                    continue
                if not check(isinstance(ts, dict), f"{name}: no tx_timestamps"):
                    continue
                # 64 destinations in two parts: each part's first and last are stamped.
                check(ts["sampled"] > 0 and ts["requested"] == ts["sampled"] * 4,
                      f"{name}: {ts['requested']} requested for {ts['sampled']} samples")
                check(ts["stamped"] + ts["missing"] == ts["requested"], f"{name}: {ts}")
                sr = ts.get("skew_ratio_to_single_thread")
                if check(isinstance(sr, dict), f"{name}: no skew ratio"):
                    check(sr["baseline"] == r["base_backend"] + "+ts/2" and
                          all(finite_positive(sr[q]) for q in ("p50", "p99", "mean")),
                          f"{name}: skew ratio {sr}")
            with open(csv_path) as f:
                rows = [line.split(",") for line in f.read().splitlines()]
            head = rows[0]
            for col in ("workers", "offload", "ratio_cpu_caller_loop", "skew_ratio_p50"):
                check(col in head, f"CSV lacks {col}")
            for row in rows[1:]:
                if check(len(row) == len(head), f"CSV row has {len(row)} of {len(head)}"):
                    row = dict(zip(head, row))
                    w2 = "+w2+ts/" in row["backend"]
                    check(row["workers"] == ("2" if w2 else "0") and
                          bool(row["skew_ratio_p50"]) == w2,
                          f"CSV {row['backend']}: workers/skew columns {row}")
        # --ts-sample: the stamped ones only, +w2+ts against +ts.
        rc, out, err = run(bench, "--quick", "--fanout", "64", "--backends", "loop",
                           "--compare-workers", "2", "--ts-sample", "2", "--json", "-")
        what = "--compare-workers 2 --ts-sample 2"
        check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
        objs = parse_lines(out)
        if ts_available(objs):
            results = [o for o in objs if o.get("type") == "result"]
            check(sorted(r["backend"] for r in results) == ["loop+ts/2", "loop+w2+ts/2"],
                  f"{what}: {[r['backend'] for r in results]}")
            check_threads(objs, results, [r["backend"] for r in results], what, "workers",
                          2, 2)
    finally:
        shutil.rmtree(d)
    if not have_netns():
        return
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--fanout", "64,256",
                       "--compare-workers", "2", "--json", "-")
    what = "netns-drop --compare-workers 2"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_threads(objs, results, avail, what, "workers", 2)
    check_lib_accounted(results, what)
    check_netns_sent(results, what)


def finite_positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def check_callgrind(objs, what, backends, fanout):
    env = [o for o in objs if o.get("type") == "callgrind_env"]
    check(len(env) == 1 and env[0].get("valgrind", "").startswith("valgrind"),
          f"{what}: callgrind_env {env}")
    rows = [o for o in objs if o.get("type") == "callgrind"]
    check(sorted(r["backend"] for r in rows) == sorted(backends),
          f"{what}: rows for {[r['backend'] for r in rows]}, expected {backends}")
    ok = {r["backend"] for r in rows if r["status"] == "ok"}
    for r in rows:
        name = f"{what} {r['backend']}"
        check(r["fanout"] == fanout, f"{name}: fan-out {r['fanout']}")
        if r["status"] != "ok":
            # Only a backend this machine lacks may be missing, and it must say why.
            check(r["status"] == "skipped" and "io_uring" in r["backend"] and r.get("reason"),
                  f"{name}: {r}")
            continue
        check(r["function"] == ("ms_send" if r["backend"] in TWIN else
                                "bench_raw_" + r["backend"][4:].replace("io_uring", "uring")
                                + "_fanout"), f"{name}: function {r['function']}")
        check(r["fanouts"] > 0 and r["instructions"] > 0, f"{name}: {r}")
        check(finite_positive(r["instructions_per_dest"]), f"{name}: {r['instructions_per_dest']}")
        check(abs(r["instructions_per_dest"] * r["fanouts"] * r["fanout"] - r["instructions"])
              <= 1e-5 * r["instructions"] + 1 or r["warmup_counted"],  # JSON: 6 digits
              f"{name}: instructions / (fan-outs x N) != instructions_per_dest")
        check(r["dests_failed"] == 0, f"{name}: {r['dests_failed']} destination-sends refused")
        if r["backend"] in TWIN:
            check(r["twin"] == TWIN[r["backend"]], f"{name}: twin {r['twin']}")
            if TWIN[r["backend"]] in ok:
                check(finite_positive(r["ratio_to_twin"]), f"{name}: ratio {r['ratio_to_twin']}")
        else:
            check(r["twin"] is None and r["ratio_to_twin"] is None, f"{name}: {r}")
    return ok


def t_callgrind(bench):
    if not shutil.which("valgrind"):
        rc, out, err = run(bench, "--callgrind", "--fanout", "4")
        check(rc != 0 and "install" in err, f"without valgrind: exit {rc}, {err.strip()}")
        print("skipped: valgrind is not installed")
        return SKIP if not failures else None
    allb = ["raw-sendto", "raw-sendmmsg", "raw-io_uring", "loop", "sendmmsg", "io_uring"]
    d = tempfile.mkdtemp(prefix="msbench-cg-")
    try:
        rc, out, err = run(bench, "--callgrind", "--quick", "--fanout", "16", "--json", "-",
                           "--callgrind-out", d, timeout=300)
        check(rc == 0, f"exit status {rc}; stderr:\n{err}")
        check_callgrind(parse_lines(out), "unconnected", allb, 16)
        check("library / hand-written" in err and "instr/dest" in err, "no table on stderr")
        files = [f for f in os.listdir(d) if f.startswith("callgrind.out.")]
        # Every backend ran under valgrind, even one found unavailable there.
        check(len(files) == len(allb), f"--callgrind-out kept {files}")
        for f in files:
            with open(os.path.join(d, f)) as fh:
                check(any(line.startswith(("totals:", "summary:")) for line in fh),
                      f"{f}: no totals line")
        rc, out, err = run(bench, "--callgrind", "--quick", "--fanout", "8", "--connected",
                           "--backends", "raw-sendmmsg,sendmmsg", "--json", "-", timeout=300)
        check(rc == 0, f"--connected: exit status {rc}; stderr:\n{err}")
        check_callgrind(parse_lines(out), "connected", ["raw-sendmmsg", "sendmmsg"], 8)
    finally:
        shutil.rmtree(d)


def zc_counts(r):
    """A result's zero-copy counts over the warm-up and the rounds: SEND_ZC destinations,
    copied ones, destinations in all."""
    lc, wl = r["library"], r["warmup"]["library"]
    return (lc["zc_sends"] + wl["zc_sends"], lc["zc_copied"] + wl["zc_copied"],
            r["dests_sent"] + r["warmup"]["dests_sent"])


def check_zc(objs, results, what, copies):
    """Plain io_uring (zc_min never) and the other backends never send with SEND_ZC;
    io_uring+zc does, from its first fan-out, and every copy the kernel reports is one of
    those. copies: the kernel copies here, so zero copy turned itself off before the end."""
    env = [o for o in objs if o.get("type") == "env"]
    check(env and env[0]["send_options"].get("compare_zc") is True, f"{what}: env {env}")
    zc = [r for r in results if r["backend"] == "io_uring+zc"]
    check(zc, f"{what}: no io_uring+zc results")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']} size={r['size']}"
        if r["base_backend"] in RAW:
            continue
        sends, copied, dests = zc_counts(r)
        check(0 <= copied <= sends <= dests, f"{name}: zc {sends} sent, {copied} copied of {dests}")
        if r["backend"] != "io_uring+zc":
            check(sends == 0 and copied == 0, f"{name}: SEND_ZC without zero copy: {sends}")
            continue
        check(r["variant"] == "zc" and r["base_backend"] == "io_uring" and
              isinstance(r.get("ratio_to_plain"), dict), f"{name}: variant {r['variant']}")
    if zc:
        # The context lives through every configuration: its first fan-out went with SEND_ZC.
        first = zc[0]
        sends, copied, dests = zc_counts(first)
        check(sends >= first["fanout"], f"{what}: the first fan-out did not go zero copy: {sends}")
        total_sends = sum(zc_counts(r)[0] for r in zc)
        total_copied = sum(zc_counts(r)[1] for r in zc)
        total_dests = sum(zc_counts(r)[2] for r in zc)
        if copies:
            check(total_copied > 0 and total_sends < total_dests,
                  f"{what}: the kernel copies here, yet {total_copied} copied and zero copy "
                  f"stayed on ({total_sends} of {total_dests})")
    for r in results:
        if r["base_backend"] not in RAW:
            lc = r["library"]
            check(lc["dests_accepted"] == r["dests_sent"] - r["dests_failed"],
                  f"{what} {r['backend']}: library counters {lc}")


def t_zc(bench):
    for args, what in ((["--zc-min", "0"], "--zc-min"), (["--zc-min", "65537"], "--zc-min"),
                       (["--zc-min", "some"], "--zc-min"),
                       (["--compare-zc", "--zc-min", "never"], "nothing to compare"),
                       (["--compare-zc", "--backends", "raw-sendto,loop"], "io_uring"),
                       (["--compare-zc", "--compare-offload"], "exclude each other"),
                       (["--mtu", "67", "--sink", "netns-drop"], "--mtu"),
                       (["--mtu", "65536", "--sink", "netns-drop"], "--mtu"),
                       (["--mtu", "1500"], "--sink netns-drop")):
        rc, out, err = run(bench, *args)
        check(rc == 2 and what in err, f"{args}: exit {rc}, stderr {err!r}")
    # Loopback: the kernel copies, says so, and zero copy turns itself off.
    rc, out, err = run(bench, "--quick", "--compare-zc", "--fanout", "16", "--size", "64,8192",
                       "--json", "-")
    what = "loopback --compare-zc"
    if rc == 0 and "io_uring+zc" not in out:
        print("skipped: io_uring is unavailable")
        return SKIP
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    check("io_uring also runs as +zc" in err and "! zero copy:" in err, f"{what}: table")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_zc(objs, results, what, copies=True)
    # --zc-min: the +zc context's threshold; below it nothing goes zero copy.
    with tempfile.TemporaryDirectory() as d:
        csv = os.path.join(d, "zc.csv")
        rc, out, err = run(bench, "--quick", "--compare-zc", "--zc-min", "1024", "--fanout",
                           "16", "--size", "64", "--csv", csv)
        check(rc == 0, f"--zc-min 1024: exit status {rc}; stderr:\n{err}")
        rows = [l.split(",") for l in open(csv).read().splitlines()] if rc == 0 else []
    if check(rows and "zc_sends" in rows[0], f"--zc-min 1024: CSV header {rows[:1]}"):
        h = rows[0]
        for row in rows[1:]:
            if len(row) == len(h) and row[h.index("backend")] == "io_uring+zc":
                check(row[h.index("zc_min")] == "1024" and row[h.index("zc_sends")] == "0",
                      f"--zc-min 1024, 64 B: {dict(zip(h, row))}")
    if not have_netns():
        return
    rc, out, err = run(bench, "--quick", "--sink", "netns-drop", "--mtu", "65535",
                       "--compare-zc", "--fanout", "16", "--size", "8192", "--json", "-")
    what = "netns-drop --mtu 65535 --compare-zc"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    check(env and "MTU 65535" in env[0].get("sink_detail", ""), f"{what}: env {env}")
    avail, results = check_results(objs)
    check_zc(objs, results, what, copies=False)
    check_netns_sent(results, what)
    rc, out, err = run(bench, "--sink", "netns-drop", "--mtu", "68", "--backends",
                       "raw-sendto,loop,sendmmsg", "--fanout", "4", "--size", "64",
                       "--iterations", "100", "--rounds", "1", "--json", "-")
    check(rc == 0, f"--mtu 68: exit status {rc}; stderr:\n{err}")


def t_tcp(bench):
    for args, what in ((["--tcp", "--sink", "netns-drop"], "--tcp"),
                       (["--tcp", "--verify-payload"], "--tcp"),
                       (["--tcp", "--compare-connect"], "--tcp"),
                       (["--tcp", "--ts-compare", "4"], "--tcp"),
                       (["--tcp", "--dontwait"], "--tcp")):
        rc, out, err = run(bench, *args)
        check(rc == 2 and what in err, f"{args}: exit {rc}, stderr {err!r}")
    rc, out, err = run(bench, "--tcp", "--duration", "1", "--rounds", "2", "--fanout",
                       "1,16,64", "--size", "64,1000", "--json", "-")
    what = "--tcp"
    check(rc == 0, f"{what}: exit status {rc}; stderr:\n{err}")
    check("one connected TCP socket per destination" in err, f"{what}: the header")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"]
    check(env and env[0]["sink"] == "tcp" and env[0]["send_options"].get("tcp") is True,
          f"{what}: env {env}")
    avail, results = check_results(objs)
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']} size={r['size']}"
        check(r["sockets"] == "connected", f"{name}: sockets {r['sockets']}")
        for part, x in (("rounds", r), ("warm-up", r["warmup"])):
            dv = x.get("deliver", {})
            sent = x["dests_sent"] - x["dests_failed"]
            check(x["dests_failed"] == 0, f"{name} {part}: {x['dests_failed']} failed")
            check(dv.get("unaccounted") == 0 and dv.get("received") == sent and
                  dv.get("bytes_received") == sent * r["size"],
                  f"{name} {part}: sent {sent} x {r['size']} B, receivers {dv}")
            lc = x.get("library")
            if r["base_backend"] not in RAW and check(isinstance(lc, dict), f"{name}: no "
                                                                            "library counters"):
                check(lc["dests_accepted"] == sent and lc["bytes"] == sent * r["size"],
                      f"{name} {part}: library counters {lc}, sent {sent}")


def check_auto(objs, results, what, warmup):
    """AUTO's row: its own result beside the fixed backends', with its ratio to raw-sendto, its
    first seconds apart (--auto-warmup) and its context's description; schema_version in env."""
    env = [o for o in objs if o.get("type") == "env"][0]
    check(env.get("schema_version") == 1, f"{what}: env schema_version {env.get('schema_version')}")
    check(any(b["name"] == "auto" and b["available"] for b in env["backends"]),
          f"{what}: auto not among the available backends")
    autos = [r for r in results if r["backend"] == "auto"]
    fixed = {r["backend"] for r in results if r["backend"] != "auto"}
    check(autos and fixed, f"{what}: auto {len(autos)} rows, fixed {sorted(fixed)}")
    for r in results:
        name = f"{what} {r['backend']} N={r['fanout']}"
        if r["backend"] != "auto":
            check(r.get("auto_first", 0) is None and r.get("auto_describe", 0) is None,
                  f"{name}: auto fields on a fixed backend")
            continue
        check(isinstance(r.get("auto_describe"), str) and r["auto_describe"],
              f"{name}: no auto_describe")
        af = r.get("auto_first")
        if warmup:
            if check(isinstance(af, dict), f"{name}: no auto_first"):
                check(abs(af["seconds"] - warmup) < 1e-6 and af["fanouts"] > 0 and
                      af["dests_sent"] == af["fanouts"] * r["fanout"] and
                      af["cpu_ns_per_dest_process"] > 0, f"{name}: auto_first {af}")
                # Its sends are the warm-up's too (accounted with it).
                check(r["warmup"]["fanouts"] >= af["fanouts"], f"{name}: warm-up {r['warmup']}")
        else:
            check(af is None, f"{name}: --auto-warmup 0 but auto_first {af}")


def t_auto(bench):
    with tempfile.TemporaryDirectory() as d:
        csv = os.path.join(d, "r.csv")
        rc, out, err = run(bench, "--sink", "deliver", "--backends", "raw-sendto,loop,sendmmsg,auto",
                           "--fanout", "1,16", "--size", "64", "--rounds", "2", "--duration", "1",
                           "--auto-warmup", "0.2", "--no-progress", "--json", "-", "--csv", csv)
        check(rc == 0, f"exit status {rc}; stderr:\n{err}")
        objs = parse_lines(out)
        avail, results = check_results(objs)
        check("auto" in avail, f"auto not available: {avail}")
        check_auto(objs, results, "deliver", 0.2)
        check_accounted(results, "deliver")
        for r in results:
            dv = r["warmup"].get("deliver", {})
            check(dv.get("unaccounted") == 0 and dv.get("malformed") == 0,
                  f"deliver {r['backend']} warm-up: {dv}")
        for line in ("auto first 0.2s", "auto (ms_ctx_describe"):
            check(line in err, f"the table lacks {line!r}")
        rows = [l for l in err.splitlines() if l.split()[2:3] == ["auto"]]
        check(len(rows) == 2, f"table rows of auto: {rows}")
        with open(csv) as f:
            lines = f.read().splitlines()
        check(sum(1 for l in lines[1:] if l.split(",")[2] == "auto") == 2,
              "the CSV lacks auto's rows")
    rc, out, err = run(bench, "--backends", "raw-sendto,loop,sendmmsg,auto", "--fanout", "16",
                       "--rounds", "1",
                       "--duration", "0.5", "--auto-warmup", "0", "--no-progress", "--json", "-")
    check(rc == 0, f"--auto-warmup 0: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_auto(objs, results, "--auto-warmup 0", 0)
    if not have_netns():
        return 0
    rc, out, err = run(bench, "--sink", "netns-drop",
                       "--backends", "raw-sendto,loop,sendmmsg,io_uring,auto",
                       "--fanout", "64", "--rounds", "2", "--duration", "0.5",
                       "--auto-warmup", "0.2", "--no-progress", "--json", "-")
    check(rc == 0, f"netns-drop: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    avail, results = check_results(objs)
    check_auto(objs, results, "netns-drop", 0.2)
    check_netns_sent(results, "netns-drop")
    return 0


def alive(pid):
    """pid exists and is not a zombie (a killed orphan waits for its new parent's wait)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def t_load(bench):
    args = [bench, "--backends", "raw-sendto,loop,sendmmsg", "--fanout", "16", "--rounds", "2",
            "--duration", "2", "--no-progress", "--background-load", "2", "--json", "-"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    deadline = time.time() + 20
    while p.poll() is None and time.time() < deadline:
        seen |= set(children(p.pid))
        time.sleep(0.05)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0, f"exit status {p.returncode}; stderr:\n{err}")
    check(len(seen) >= 2, f"expected 2 load processes among the bench's children, saw {seen}")
    left = [k for k in seen if alive(k)]
    check(not left, f"load processes left after the bench ended: {left}")
    check("2 background processes" in err and "on for the whole run" in err,
          "the header does not say what load ran")
    check("background load: 2 processes" in err, "no load line after the run")
    objs = parse_lines(out)
    check_results(objs)
    env = [o for o in objs if o.get("type") == "env"][0]
    check(env.get("background_load", {}).get("processes") == 2 and
          env["background_load"].get("from") == 0, f"env background_load {env.get('background_load')}")
    end = [o for o in objs if o.get("type") == "end"]
    check(len(end) == 1 and end[0]["background_load"]["on_s"] > 0, f"end object {end}")

    # Half: off at first, on from half the expected run.
    rc, out, err = run(bench, "--backends", "raw-sendto,loop", "--fanout", "16", "--rounds", "2",
                       "--duration", "2", "--no-progress", "--background-load", "1",
                       "--load-from", "half", "--json", "-")
    check(rc == 0, f"--load-from half: exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"][0]
    check(env.get("background_load", {}).get("from") == "half", f"env {env.get('background_load')}")
    check("on from half the expected run" in err, "the header does not say half")

    # Killed with SIGKILL: its load processes die with it (PR_SET_PDEATHSIG), at once.
    p = subprocess.Popen(args[:-2] + ["--duration", "30"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    kids = []
    deadline = time.time() + 10
    while len(kids) < 2 and time.time() < deadline:
        kids = children(p.pid)
        time.sleep(0.05)
    check(len(kids) >= 2, f"no load processes to see: {kids}")
    time.sleep(0.3)
    p.kill()
    p.wait()
    deadline = time.time() + 5
    while any(alive(k) for k in kids) and time.time() < deadline:
        time.sleep(0.05)
    check(not any(alive(k) for k in kids),
          f"load processes alive after the bench was killed: {[k for k in kids if alive(k)]}")
    return 0


def t_timeline(bench):
    rc, out, err = run(bench, "--sink", "deliver", "--backends", "raw-sendto,loop,sendmmsg,auto",
                       "--fanout", "16", "--size", "64", "--timeline", "3",
                       "--background-load", "1", "--load-from", "half", "--no-progress",
                       "--json", "-")
    check(rc == 0, f"exit status {rc}; stderr:\n{err}")
    objs = parse_lines(out)
    env = [o for o in objs if o.get("type") == "env"][0]
    check(env.get("schema_version") == 1 and env.get("timeline_s") == 3, f"env {env}")
    tl = [o for o in objs if o.get("type") == "timeline"]
    check(sorted(o["backend"] for o in tl) == ["auto", "loop", "raw-sendto", "sendmmsg"],
          f"timeline objects {[o['backend'] for o in tl]}")
    for o in tl:
        name = f"timeline {o['backend']}"
        w, a, b = o["whole"], o["first_half"], o["second_half"]
        check(w["slices"] >= 2 and a["slices"] >= 1 and b["slices"] >= 1 and
              a["slices"] + b["slices"] == w["slices"], f"{name}: slices {w['slices']} = "
              f"{a['slices']} + {b['slices']}")
        for k in ("fanouts", "dests_sent", "dests_failed", "wall_ns"):
            check(a[k] + b[k] == w[k], f"{name}: {k} {a[k]} + {b[k]} != {w[k]}")
        check(w["dests_sent"] == w["fanouts"] * 16, f"{name}: dests_sent {w['dests_sent']}")
        for part in (w, a, b):
            check(part["cpu_ns_per_dest_process"] > 0, f"{name}: CPU {part}")
            check(part["best_fixed"] in ("loop", "sendmmsg") and
                  part["ratio_to_best_fixed"] > 0, f"{name}: best fixed {part}")
            dv = part.get("deliver", {})
            sent = part["dests_sent"] - part["dests_failed"]
            check(dv.get("unaccounted") == 0 and dv.get("malformed") == 0 and
                  dv.get("received", 0) + dv.get("kernel_drops", 0) == sent,
                  f"{name}: sent {sent}, receivers {dv}")
        check(not a["load_on"] and b["load_on"], f"{name}: load on {a['load_on']}, {b['load_on']}")
        check((o["backend"] == "auto") == isinstance(o.get("auto_describe"), str),
              f"{name}: auto_describe {o.get('auto_describe')!r}")
    per_half = [(o["backend"], o["first_half"]["slices"], o["second_half"]["slices"]) for o in tl]
    check(len({x[1:] for x in per_half}) == 1, f"slices per half differ: {per_half}")
    for line in ("timeline: deliver sink", "auto / best fixed: whole", "auto (ms_ctx_describe",
                 "off for the first half of each timeline"):
        check(line in err, f"the output lacks {line!r}")
    return 0


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tests = {"json": t_json, "report": t_report, "usage": t_usage, "deliver": t_deliver,
             "netns": t_netns, "netns-sigint": t_netns_sigint, "netns-stale": t_netns_stale,
             "raw": t_raw,
             "variants": t_variants, "connect": t_connect, "offload": t_offload,
             "workers": t_workers, "zc": t_zc, "tcp": t_tcp,
             "auto": t_auto, "load": t_load, "timeline": t_timeline, "xdp": t_xdp,
             "xdp-capture": t_xdp_capture, "kfanout": t_kfanout,
             "callgrind": t_callgrind, "preflight": t_preflight,
             "sigint-report": t_sigint_report, "ratecap": t_ratecap}
    rc = tests[sys.argv[1]](sys.argv[2])
    if rc == SKIP:
        return SKIP
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
