# SPDX-License-Identifier: MIT
"""Send patterns a program can tell apart if the shim defers, reorders or swallows anything.

Run under multisend-run (batch mode) by shim-test.sh, and the same way without the shim where
the test compares outputs. Receivers are ordinary UDP sockets on 127.0.0.1 whose ports the
kernel picks; every datagram carries a sequence number that the receiver checks.

    patterns.py twosockets | dup | threads | processes   order (prints "order ok N")
    patterns.py refused | recverr | noroute | broadcast  errno per send (prints the list)
    patterns.py unshare                                   unshare(CLONE_NEWUSER) after sends
    patterns.py dupnonblock                               O_NONBLOCK set through a dup
    patterns.py single N                                  N sendto to one destination
"""
import ctypes
import errno
import os
import random
import select
import socket
import struct
import sys
import threading

LO = "127.0.0.1"


def receiver():
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    r.bind((LO, 0))
    return r


def drain(r, count):
    """The sequence numbers of count datagrams, in arrival order (fails on a timeout)."""
    r.settimeout(10)
    got = []
    for _ in range(count):
        data = r.recv(2048)
        got.append(struct.unpack("<I", data[:4])[0])
    return got


def check_order(name, got, count):
    if got != list(range(count)):
        bad = sum(1 for a, b in zip(got, got[1:]) if b < a)
        sys.exit(f"{name}: {bad} inversions, first 12: {got[:12]}")


def msg(seq):
    return struct.pack("<I", seq) + b"x" * 60


def two_sockets(dup):
    # Two descriptors (two sockets, or a socket and its dup) send to the same two receivers in
    # a random interleaving; each receiver must see its numbers in order.
    r1, r2 = receiver(), receiver()
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(fileno=os.dup(a.fileno())) if dup else \
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    d1, d2 = r1.getsockname(), r2.getsockname()
    rnd = random.Random(7)
    n = 2000
    for seq in range(n):
        s = a if rnd.random() < 0.5 else b
        s.sendto(msg(seq), d1)
        s.sendto(msg(seq), d2)
    check_order("receiver 1", drain(r1, n), n)
    check_order("receiver 2", drain(r2, n), n)
    print(f"order ok {n}")


def threads():
    # Three threads take turns through threading.Event (futexes the shim never sees as socket
    # calls); each turn is a fan-out to three receivers, handed over after the second.
    r1, r2, r3 = receiver(), receiver(), receiver()
    d1, d2, d3 = r1.getsockname(), r2.getsockname(), r3.getsockname()
    k, n = 3, 600
    turn = [threading.Event() for _ in range(k)]

    def run(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for seq in range(i, n, k):
            turn[i].wait()
            turn[i].clear()
            s.sendto(msg(seq), d1)
            s.sendto(msg(seq), d2)
            turn[(i + 1) % k].set()
            s.sendto(msg(seq), d3)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in ts:
        t.start()
    turn[0].set()
    for t in ts:
        t.join()
    check_order("receiver 1", drain(r1, n), n)
    check_order("receiver 2", drain(r2, n), n)
    print(f"order ok {n}")


def processes():
    # A parent and its forked child take turns through multiprocessing.Event (process-shared
    # semaphores).
    # Each turn is a fan-out to three receivers, handed over after the second: the batch
    # is pending at the hand-over. The third receiver's order is the scheduler's, not the
    # program's, so only the first two are checked.
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    r1, r2, r3 = receiver(), receiver(), receiver()
    d1, d2, d3 = r1.getsockname(), r2.getsockname(), r3.getsockname()
    n = 400
    turn = [ctx.Event(), ctx.Event()]

    def run(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for seq in range(i, n, 2):
            turn[i].wait()
            turn[i].clear()
            s.sendto(msg(seq), d1)
            s.sendto(msg(seq), d2)
            turn[1 - i].set()
            s.sendto(msg(seq), d3)

    child = ctx.Process(target=run, args=(1,))
    child.start()
    turn[0].set()
    run(0)
    child.join()
    if child.exitcode != 0:
        sys.exit(f"child exited with {child.exitcode}")
    check_order("receiver 1", drain(r1, n), n)
    check_order("receiver 2", drain(r2, n), n)
    print(f"order ok {n}")


def dupnonblock():
    # A socket and its dup; the dup is made non-blocking (ioctl FIONBIO through
    # setblocking): the socket, which shares the file, must stop being batched.
    r1, r2 = receiver(), receiver()
    d1, d2 = r1.getsockname(), r2.getsockname()
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(fileno=os.dup(a.fileno()))
    for half in (0, 1):
        if half:
            b.setblocking(False)
        for seq in range(50):
            a.sendto(msg(seq), d1)
            a.sendto(msg(seq), d2)
    print("sent 200")


def closed_port():
    # A port nobody listens on: the kernel's pick, released.
    p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    p.bind((LO, 0))
    addr = p.getsockname()
    p.close()
    return addr


def errnos(send, count):
    out = []
    for seq in range(count):
        try:
            send(msg(seq))
            out.append("ok")
        except OSError as e:
            out.append(errno.errorcode.get(e.errno, str(e.errno)))
    return out


def wait_error(s):
    """Until the ICMP error of the last send has reached the socket (under load loopback's
    softirq can run after the next send; then the results would depend on timing). The 5 s
    are only a bound against a hang."""
    select.select([s], [], [s], 5)


def drain_errqueue(s):
    while True:
        try:
            s.recvmsg(512, 512, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except OSError:
            return


def refused():
    # A connected socket whose peer has no listener: the kernel reports the ICMP error on
    # the next send (ECONNREFUSED on alternate sends).
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(closed_port())

    def send(m):
        s.send(m)
        wait_error(s)
    print(" ".join(errnos(send, 12)))


def recverr():
    # IP_RECVERR on an unconnected socket: errors are queued and reported by later calls.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, 11, 1)  # IP_RECVERR
    dead, live = closed_port(), receiver()
    dl = live.getsockname()

    # a fan-out pattern, so that batch mode would batch it if it could
    def send(m):
        drain_errqueue(s)
        s.sendto(m, dead)
        wait_error(s)
        s.sendto(m, dl)
    print(" ".join(errnos(send, 12)))


def broadcast():
    # A subnet broadcast address without SO_BROADCAST: EACCES, decided by the route.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    live = receiver()
    dests = [live.getsockname(), ("127.255.255.255", live.getsockname()[1])]
    print(" ".join(errnos(lambda m: [s.sendto(m, d) for d in dests], 12)))


def noroute():
    # Run in a network namespace whose loopback is down: no route to anything.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dests = [(LO, 9), ("127.0.0.2", 9), (LO, 10)]
    print(" ".join(errnos(lambda m: [s.sendto(m, d) for d in dests], 8)))


def unshare():
    # Batched sends (a fan-out, so batches and the flusher thread exist), then a call that
    # needs a single-threaded process.
    r1, r2 = receiver(), receiver()
    d1, d2 = r1.getsockname(), r2.getsockname()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for seq in range(50):
        s.sendto(msg(seq), d1)
        s.sendto(msg(seq), d2)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        sys.exit(f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}")
    check_order("receiver 1", drain(r1, 50), 50)
    check_order("receiver 2", drain(r2, 50), 50)
    print("unshare ok")


def single(n):
    r = receiver()
    d = r.getsockname()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    m = msg(0)
    for _ in range(n):
        s.sendto(m, d)
    print(f"sent {n}")


if __name__ == "__main__":
    what = sys.argv[1]
    {"twosockets": lambda: two_sockets(False), "dup": lambda: two_sockets(True),
     "threads": threads, "processes": processes, "refused": refused, "recverr": recverr,
     "noroute": noroute, "broadcast": broadcast, "dupnonblock": dupnonblock, "unshare": unshare,
     "single": lambda: single(int(sys.argv[2]))}[what]()
