# SPDX-License-Identifier: MIT
"""multisend-stat's metrics (--openmetrics, --listen) checked with the Prometheus client's own
parsers (Debian's python3-prometheus-client; run with /usr/bin/python3). Used by
tests/stat/stat-test.sh (metrics, http). Each mode exits 0 or says what failed.

  metrics-check.py live OMFILE PATH PID COUNT
      OMFILE (one --openmetrics scrape) has PATH's publisher PID alive, its slot live and
      0 < fanouts <= COUNT.
  metrics-check.py absent OMFILE PATH
      OMFILE parses and has no series of PATH (a publisher that is gone is not discovered).
  metrics-check.py final OMFILE PATH JSONFILE COUNT SUBS SIZE ACCEPTED
      the finished publisher's file: every counter the publisher reports, exactly, and the
      histograms against multisend-stat's JSON line (JSONFILE) for the same file.
  metrics-check.py http URL PATH JSONFILE COUNT SUBS SIZE ACCEPTED
      the same through GET URL, in both formats (content negotiation), HEAD, the errors (404,
      405, 400, 431), and hostile clients (slowloris, idle connections past the server's
      table, garbage, a huge request) that never stop it answering.
"""
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus

OM_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"
END_REPEATS, END_SIZE = 3, 40  # examples/md-publisher.c's END: how often, how big


def die(msg):
    sys.exit("metrics-check: " + msg)


def families(text, om):
    """{family name: family}; the parser raises on anything malformed."""
    if om:
        if not text.endswith("# EOF\n"):
            die("OpenMetrics text does not end in '# EOF'")
        fams = list(parse_openmetrics(text))
    else:
        fams = list(parse_prometheus(text))
    names = [f.name for f in fams]
    if len(names) != len(set(names)):
        die("a family appears twice: %s" % names)
    return {f.name: f for f in fams}


def of_file(fams, path):
    """The samples of path's series: {(sample name, slot, le): value}, and their labels."""
    out = {}
    for f in fams.values():
        for s in f.samples:
            if s.labels.get("file") != path:
                continue
            out[(s.name, s.labels.get("slot"), s.labels.get("le"))] = s.value
    return out


def one(samples, name, slot="0"):
    v = samples.get((name, slot, None))
    if v is None:
        die("no sample %s{slot=%s}" % (name, slot))
    return v


def expect(what, got, want):
    if got != want:
        die("%s = %r, expected %r" % (what, got, want))


def check_live(fams, path, pid, count):
    s = of_file(fams, path)
    if not s:
        die("the live publisher's file %s was not discovered" % path)
    labels = [x.labels for f in fams.values() for x in f.samples if x.labels.get("file") == path]
    expect("pid label", {x["pid"] for x in labels}, {pid})
    expect("program label", {x["program"] for x in labels}, {"md-publisher"})
    expect("alive", one(s, "multisend_publisher_alive", None), 1)
    expect("pid_verified", one(s, "multisend_publisher_pid_verified", None), 1)
    expect("slot_live", one(s, "multisend_slot_live"), 1)
    f = one(s, "multisend_fanouts_total")
    if not 0 < f <= count:
        die("fanouts %r is not in 1..%d while the publisher runs" % (f, count))
    ctx = {x["context"] for x in labels if "context" in x}
    if ctx != {"ctx 1"}:
        die("context labels %r (the name has no backend: backend_info says it)" % ctx)
    backend_info(fams, path)


BACKENDS = ("loop", "sendmmsg", "io_uring", "xdp", "kfanout")


def backend_info(fams, path):
    """multisend_backend_info{...,slot="0",backend=B} 1 for the context's slot: its backend."""
    f = fams.get("multisend_backend_info") or fams.get("multisend_backend")
    if f is None:
        die("no multisend_backend_info family")
    bs = [(x.labels.get("slot"), x.labels.get("backend"), x.value) for x in f.samples
          if x.labels.get("file") == path]
    if len(bs) != 1 or bs[0][0] != "0" or bs[0][1] not in BACKENDS or bs[0][2] != 1:
        die("multisend_backend_info of %s: %r" % (path, bs))
    return bs[0][1]


def check_build_info(fams):
    """multisend_build_info{version="X.Y.Z"} 1, X.Y.Z the library's (MULTISEND_VERSION)."""
    f = fams.get("multisend_build_info") or fams.get("multisend_build")
    if f is None:
        die("no multisend_build_info")
    v = [x for x in f.samples if x.name == "multisend_build_info"]
    if len(v) != 1 or v[0].value != 1:
        die("multisend_build_info: %r" % (v,))
    want = os.environ.get("MULTISEND_VERSION")
    if not want:
        die("MULTISEND_VERSION is not set (tests/stat/meson.build sets it to the project's)")
    if v[0].labels.get("version") != want:
        die("multisend_build_info version %r, the library's is %r" %
            (v[0].labels.get("version"), want))


def check_final(fams, path, js, count, subs, size, accepted, om):
    check_build_info(fams)
    s = of_file(fams, path)
    # The backend: the same in the JSON and the metrics (the shell checks the publisher's
    # own summary against the JSON).
    b = backend_info(fams, path)
    jb = [x.get("backend") for x in js["slots"] if x["name"] == "ctx 1"]
    expect("backend in the JSON and the metrics", jb, [b])
    expect("alive (publisher gone)", one(s, "multisend_publisher_alive", None), 0)
    expect("pid_verified (publisher gone)", one(s, "multisend_publisher_pid_verified", None), 0)
    expect("slot_live (slot closed)", one(s, "multisend_slot_live"), 0)
    # What the publisher itself reported (its counters as of the last tick): every tick to
    # every subscriber. After the ticks it sends END (examples/md-publisher.c) 1 to 3 times,
    # 40 bytes each, while subscribers leave (those may fail): the file has those too.
    expect("accepted reported", accepted, count * subs)
    fanouts = one(s, "multisend_fanouts_total")
    ends = fanouts - count
    if not 1 <= ends <= END_REPEATS:
        die("fanouts %r: not %d ticks and 1 to %d ENDs" % (fanouts, count, END_REPEATS))
    acc = one(s, "multisend_dests_accepted_total")
    end_acc = acc - accepted
    if not 0 <= end_acc <= ends * subs:
        die("dests_accepted %r: not %d and at most %d ENDs" % (acc, accepted, ends * subs))
    expect("bytes", one(s, "multisend_bytes_total"), accepted * size + end_acc * END_SIZE)
    failed = one(s, "multisend_dests_failed_total")
    expect("dests_attempted", one(s, "multisend_dests_attempted_total"), acc + failed)
    if failed > ends * subs - end_acc:
        die("dests_failed %r: more than the ENDs not accepted" % failed)
    expect("dests_partial", one(s, "multisend_dests_partial_total"), 0)
    # Every counter of the JSON line, by the same name, with the same value.
    slot = [x for x in js["slots"] if x["name"].startswith("ctx ")][0]
    gauges = {"backlog_bytes", "auto_backend"}
    for name, v in slot["counters"].items():
        if name.startswith("auto_ns_"):
            got = one(s, "multisend_auto_%s_seconds" % name[8:])
            expect(name + " (in seconds)", round(got * 1e9), v)
        elif name.startswith("auto_cpu_ns_"):
            got = one(s, "multisend_auto_cpu_%s_seconds" % name[12:])
            expect(name + " (in seconds)", round(got * 1e9), v)
        elif name in gauges:
            expect(name, one(s, "multisend_" + name), v)
        elif name == "backlog_discarded":
            expect(name, one(s, "multisend_backlog_discarded_bytes_total"), v)
        else:
            expect(name, one(s, "multisend_%s_total" % name), v)
    # Every library counter and histogram says what it counts (lib/core/counters.h), never
    # the generic line a name the table does not know gets.
    generic = {"libmultisend live counter", "libmultisend live value",
               "libmultisend histogram, in seconds"}
    for f in fams.values():
        if f.name.startswith(("multisend_publisher_", "multisend_slot_", "multisend_stat_",
                              "multisend_build")):
            continue
        if not f.documentation or f.documentation in generic:
            die("%s: HELP %r" % (f.name, f.documentation))
    expect("fanouts HELP", fams["multisend_fanouts"].documentation,
           "ms_send/ms_sendv calls that attempted at least one destination")
    # Types and units.
    expect("fanouts type", fams["multisend_fanouts"].type, "counter")
    expect("backlog_bytes type", fams["multisend_backlog_bytes"].type, "gauge")
    for h in ("call_first", "call_last", "first_last", "dest_lag"):
        fam = fams["multisend_%s_seconds" % h]
        expect(h + " type", fam.type, "histogram")
        if om:
            expect(h + " unit", fam.unit, "seconds")
    # Histograms: cumulative buckets, +Inf = _count = the JSON's count, _sum its mean x count,
    # and the bounds in seconds: none of the values at or below a bound under the smallest,
    # all of them at a bound at or above the largest.
    sampled = 0
    for name, h in slot["histograms"].items():
        fam = "multisend_%s_seconds" % name[:-3]
        n = h["count"]
        sampled += n
        expect(name + " _count", one(s, fam + "_count"), n)
        buckets = sorted((float(le), v) for (sn, sl, le), v in s.items()
                         if sn == fam + "_bucket" and sl == "0")
        if len(buckets) != 37 or not math.isinf(buckets[-1][0]):
            die("%s: %d buckets, the last %r" % (fam, len(buckets), buckets[-1]))
        expect(name + " +Inf", buckets[-1][1], n)
        for (a, ca), (b, cb) in zip(buckets, buckets[1:]):
            if cb < ca:
                die("%s: not cumulative at le=%r" % (fam, b))
        if not n:
            continue
        for le, c in buckets:
            if le * 1e9 < h["min"] - 0.5 and c != 0:
                die("%s: %r values <= %r s, below the smallest (%d ns)" % (fam, c, le, h["min"]))
            if le * 1e9 >= h["max"] - 0.5 and c != n:
                die("%s: %r values <= %r s, not all %d (largest %d ns)" % (fam, c, le, n, h["max"]))
        got = one(s, fam + "_sum") * 1e9
        if abs(got - h["mean"] * n) > 0.05 * n + 1:  # the JSON's mean has one decimal
            die("%s _sum %r ns, the JSON's mean x count %r" % (fam, got, h["mean"] * n))
    if not sampled:
        die("no histogram has samples: the publisher was to stamp some")


def get(url, accept=None, method="GET"):
    req = urllib.request.Request(url, method=method)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def raw(host, port, data, read=True):
    """Send data on a new connection; the response's status line (or '' if closed first)."""
    s = socket.create_connection((host, port), timeout=30)
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may close a connection that sends too much
    if not read:
        return s
    got = b""
    try:
        while b"\r\n" not in got:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except OSError:
        pass
    s.close()
    return got.split(b"\r\n")[0].decode("latin-1")


def check_http(url, path, js, *nums):
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port
    st, hd, body = get(url)
    expect("GET status", st, 200)
    expect("default Content-Type", hd["Content-Type"], PROM_TYPE)
    prom = families(body.decode("utf-8"), False)
    check_final(prom, path, js, *nums, False)
    st, hd, body = get(url, "application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    expect("OpenMetrics status", st, 200)
    expect("negotiated Content-Type", hd["Content-Type"], OM_TYPE)
    om = families(body.decode("utf-8"), True)
    check_final(om, path, js, *nums, True)
    # Both formats carry the same series with the same values.
    a, b = of_file(prom, path), of_file(om, path)
    expect("series in both formats", sorted(a) == sorted(b), True)
    expect("values in both formats", all(a[k] == b[k] for k in a), True)
    # q=0 refuses OpenMetrics.
    st, hd, _ = get(url, "application/openmetrics-text;q=0, text/plain")
    expect("q=0 Content-Type", hd["Content-Type"], PROM_TYPE)
    st, hd, body = get(url, method="HEAD")
    expect("HEAD status", (st, body), (200, b""))
    st, hd, _ = get(url + "?name[]=x")
    expect("GET with a query", st, 200)
    for p in ("/", "/metricsx", "/metrics/x"):
        st, _, _ = get(urllib.parse.urlunsplit((u.scheme, u.netloc, p, "", "")))
        expect("GET " + p, st, 404)
    for m in ("POST", "PUT", "DELETE"):
        st, hd, _ = get(url, method=m)
        expect(m + " status", st, 405)
        expect(m + " Allow", hd["Allow"], "GET, HEAD")
    # Hostile clients: one that sends a request a byte at a time and never finishes
    # (slowloris), more idle connections than the server keeps, garbage, a NUL, a request head
    # past the bound. Each gets an error or is dropped; a good client is answered all along.
    slow = raw(host, port, b"GET /metr", read=False)
    idle = [raw(host, port, b"", read=False) for _ in range(40)]
    expect("garbage", raw(host, port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"
                          ).split(" ")[1:2], ["400"])
    expect("NUL", raw(host, port, b"GET /metrics\x00 HTTP/1.1\r\n\r\n").split(" ")[1:2], ["400"])
    expect("HTTP/2 preface", raw(host, port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").split(" ")[1:2],
           ["400"])
    huge = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"
    status = raw(host, port, huge)
    if status and status.split(" ")[1:2] != ["431"]:
        die("a huge request: %r" % status)
    try:
        slow.sendall(b"i")  # it may have been dropped for a newer connection: no matter
    except OSError:
        pass
    t0 = time.monotonic()
    st, hd, body = get(url, "application/openmetrics-text")
    expect("GET among hostile clients", st, 200)
    check_final(families(body.decode("utf-8"), True), path, js, *nums, True)
    took = time.monotonic() - t0
    for s in idle + [slow]:
        s.close()
    # A connection that never sends a whole request is closed by the server (after its 10 s
    # per connection; waited for up to 60 s), with nothing sent.
    lazy = raw(host, port, b"GET /metrics HTTP/1.1\r\n", read=False)
    lazy.settimeout(60)
    try:
        left = lazy.recv(4096)
    except OSError as e:
        die("a request never finished: the connection was not closed (%s)" % e)
    expect("what a never-finished request got", left, b"")
    lazy.close()
    print("metrics-check: http ok (the GET among hostile clients took %.2f s)" % took)


def main():
    mode, a = sys.argv[1], sys.argv[2:]
    if mode == "live":
        check_live(families(open(a[0]).read(), True), a[1], a[2], int(a[3]))
    elif mode == "absent":
        if of_file(families(open(a[0]).read(), True), a[1]):
            die("%s is exported, but its publisher is gone" % a[1])
    elif mode in ("final", "http"):
        import json
        js = json.loads(open(a[2]).read().splitlines()[-1])
        nums = [int(x) for x in a[3:7]]
        if mode == "final":
            check_final(families(open(a[0]).read(), True), a[1], js, *nums, True)
        else:
            check_http(a[0], a[1], js, *nums)
    else:
        die("unknown mode " + mode)
    print("metrics-check: %s ok" % mode)


main()
