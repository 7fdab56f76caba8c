#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Hostile and careless TCP peers for tests/serve/serve-limits.sh, on loopback only:
#
#   serve-peers.py hold PORT N TIMEOUT
#       N connections to 127.0.0.1:PORT, each read to its end. A connection the server refused
#       ends with no byte; one it served ends with END (a tick frame of magic END1). Prints
#       "hold: connections N, refused R, served S, cut C, reset X, open O".
#   serve-peers.py stall PORT N PID TIMEOUT
#       N connections with a small receive buffer that read nothing while PID (the server)
#       runs; meanwhile the peak of PID's VmHWM. Then each read to its end. Prints
#       "stall: connections N, start-rss KB, peak-hwm KB, served S, cut C, reset X, open O".
#   serve-peers.py churn PORT N TIMEOUT
#       N connections, each closed with a reset as soon as it is made. Prints
#       "churn: connections N".
#
# Every loop is bounded by TIMEOUT seconds; exit status 1 if it ran out.
import os
import selectors
import socket
import struct
import sys
import time

MAGIC_END = 0x31444E45


def connect(port, rcvbuf=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s


def status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def read_all(socks, deadline):
    """Read every socket to its end; returns (served, cut, reset, refused, open)."""
    sel = selectors.DefaultSelector()
    got = {}
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        got[s] = bytearray()
    ends = {}
    while len(ends) < len(socks) and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                b = s.recv(1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                b = None
            if b:
                got[s] += b
                continue
            ends[s] = "reset" if b is None else "eof"
            sel.unregister(s)
    served = cut = reset = refused = 0
    for s in socks:
        data, end = got[s], ends.get(s)
        if end is None:
            continue
        if end == "reset":
            reset += 1
            continue
        if not data:
            refused += 1
            continue
        # Walk the frames (size at offset 4); served when the last whole frame is END.
        off, last = 0, None
        while len(data) - off >= 8:
            magic, size = struct.unpack_from("<II", data, off)
            if size < 40 or len(data) - off < size:
                break
            last, off = magic, off + size
        if last == MAGIC_END and off == len(data):
            served += 1
        else:
            cut += 1
    return served, cut, reset, refused, len(socks) - len(ends)


def main():
    mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "hold":
        deadline = time.monotonic() + float(sys.argv[4])
        socks = [connect(port) for _ in range(n)]
        served, cut, reset, refused, left = read_all(socks, deadline)
        print(f"hold: connections {n}, refused {refused}, served {served}, cut {cut}, "
              f"reset {reset}, open {left}")
        return 1 if left else 0
    if mode == "stall":
        pid, deadline = int(sys.argv[4]), time.monotonic() + float(sys.argv[5])
        start = status_kb(pid, "VmRSS")
        socks = [connect(port, rcvbuf=4096) for _ in range(n)]
        peak = 0
        # The server's peak resident size (a high-water mark the kernel keeps) while it runs.
        while time.monotonic() < deadline:
            hwm = status_kb(pid, "VmHWM")
            if hwm is None:
                break
            peak = max(peak, hwm)
            time.sleep(0.02)
        served, cut, reset, refused, left = read_all(socks, deadline)
        print(f"stall: connections {n}, start-rss {start}, peak-hwm {peak}, served {served}, "
              f"cut {cut + refused}, reset {reset}, open {left}")
        return 1 if left or time.monotonic() >= deadline else 0
    if mode == "churn":
        deadline = time.monotonic() + float(sys.argv[4])
        linger = struct.pack("ii", 1, 0)
        for i in range(n):
            if time.monotonic() >= deadline:
                print(f"churn: connections {i} (out of time)")
                return 1
            try:
                s = connect(port)
            except ConnectionRefusedError:
                print(f"churn: connections {i} (the server is gone)")
                return 1
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            s.close()
        print(f"churn: connections {n}")
        return 0
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
