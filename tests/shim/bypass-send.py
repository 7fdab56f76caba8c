# SPDX-License-Identifier: MIT
"""The senders of the bypass tests (bypass-test.sh), run in the sending namespace, without the
shim and under multisend-run --bypass. Every datagram is a bypass-proto datagram
(bypass-recv.py, which checks them in the receiving namespace); destination i is
HOST:PORT0+i and carries stream i. Each ends with an end marker to every destination.

    bypass-send.py HOST PORT0 twosockets | dup    two sockets (or a socket and its dup) in a
                                                  random interleaving, 2000 x 2 destinations
    bypass-send.py HOST PORT0 threads             three threads take turns (threading.Event)
    bypass-send.py HOST PORT0 processes           parent and forked child take turns
                                                  (multiprocessing.Event)
    bypass-send.py HOST PORT0 concurrent          eight threads at once (four sockets of
                                                  their own, four sharing one), after a
                                                  first datagram
    bypass-send.py HOST PORT0 concurrent-cold     the same, the first sends at once
    bypass-send.py GROUP PORT0 multicast          IPv4 multicast, IP_MULTICAST_LOOP off and on
    bypass-send.py HOST PORT0 closeall            close_range, close and dup2 over numbers
                                                  the program did not open
    bypass-send.py HOST PORT0 zerolength          calls that send no bytes
    bypass-send.py HOST PORT0 highfd              a socket numbered past the shim's table
    bypass-send.py HOST PORT0 headers             source address and port, TTL, TOS (v4, v6)
    bypass-send.py HOST PORT0 descriptors         reconnect, disconnect, dup2 over, a number
                                                  reused by a new socket
    bypass-send.py HOST PORT0 calls               sendto loop, sendmsg (gathered), send,
                                                  os.write and os.writev on a connected
                                                  socket, sendmmsg (libc through ctypes;
                                                  vectors of 1, 7, 64 and 1100)

A turn is a fan-out to three destinations handed over after the second: destinations 0 and 1
must see the exact send order (nothing is deferred in bypass mode); destination 2's order is
the scheduler's (two senders run at once there). Prints what it did (compared between runs).
"""
import ctypes
import importlib.util
import os
import random
import socket
import sys
import threading

_spec = importlib.util.spec_from_file_location(
    "bypass_recv", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bypass-recv.py"))
proto = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proto)


def udp(host):
    return socket.socket(proto.family(host), socket.SOCK_DGRAM)


def finish(host, port0, k):
    s = udp(host)
    for i in range(k):
        s.sendto(proto.end_marker(i), (host, port0 + i))
    s.close()


def two_sockets(host, port0, dup):
    a = udp(host)
    b = socket.socket(fileno=os.dup(a.fileno())) if dup else udp(host)
    d = [(host, port0), (host, port0 + 1)]
    rnd = random.Random(7)
    n = 2000
    for seq in range(n):
        s = a if rnd.random() < 0.5 else b
        for i in (0, 1):
            s.sendto(proto.make(i, seq, 64), d[i])
    finish(host, port0, 2)
    print(f"sent {n} x 2 from two descriptors")


def threads(host, port0):
    k, n = 3, 600
    d = [(host, port0 + i) for i in range(3)]
    turn = [threading.Event() for _ in range(k)]
    errors = []

    def run(i):
        try:
            s = udp(host)
            for seq in range(i, n, k):
                turn[i].wait()
                turn[i].clear()
                s.sendto(proto.make(0, seq, 64), d[0])
                s.sendto(proto.make(1, seq, 64), d[1])
                turn[(i + 1) % k].set()
                s.sendto(proto.make(2, seq, 64), d[2])
        except OSError as e:
            errors.append(e)
            for t in turn:
                t.set()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in ts:
        t.start()
    turn[0].set()
    for t in ts:
        t.join()
    if errors:
        sys.exit(f"a thread failed: {errors[0]}")
    finish(host, port0, 3)
    print(f"sent {n} x 3 from {k} threads")


def concurrent(host, port0, warm):
    """Eight threads sending at once, as fast as they can, 3000 datagrams each: threads 0..3
    on sockets of their own to destinations 0..3, threads 4..7 sharing one socket, to
    destinations 4..7. One sender per destination: each must see its numbers in order.
    warm: one datagram first (to PORT0+8, where nobody listens), so that the shim's port
    exists before the threads start."""
    n = 3000
    shared = udp(host)
    if warm:
        shared.sendto(b"warm-up", (host, port0 + 8))
    start = threading.Barrier(8)
    errors = []

    def run(i):
        try:
            s = udp(host) if i < 4 else shared
            d = (host, port0 + i)
            msgs = [proto.make(i, seq, 64 + 16 * i) for seq in range(n)]
            start.wait()
            for m in msgs:
                s.sendto(m, d)
        except OSError as e:
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        sys.exit(f"a thread failed: {errors[0]}")
    finish(host, port0, 8)
    print(f"sent {n} x 8 from 8 threads at once")


def headers(host, port0):
    """What the IP and UDP headers carry (bypass-recv.py --headers shows it): the socket's own
    address and port (bound to a fixed port, to the interface's address, or picked by the
    kernel), TTL / hop limit and TOS / traffic class set on the socket, multicast TTL.
    Destination i gets socket i's datagrams: 100 each (socket 4 connected to its own)."""
    six = ":" in host
    ip = socket.IPPROTO_IPV6 if six else socket.IPPROTO_IP
    ttl = socket.IPV6_UNICAST_HOPS if six else socket.IP_TTL
    tos = socket.IPV6_TCLASS if six else socket.IP_TOS
    local = "fd77::1" if six else "10.77.0.1"
    any_ = "::" if six else "0.0.0.0"
    socks = []
    a = udp(host)  # the kernel picks its port at the first send
    socks.append(a)
    b = udp(host)
    b.bind((any_, 20001))
    socks.append(b)
    c = udp(host)
    c.bind((local, 20002))
    c.setsockopt(ip, ttl, 7)
    socks.append(c)
    d = udp(host)
    d.bind((any_, 20003))
    d.setsockopt(ip, tos, 0x20)
    d.setsockopt(ip, ttl, 200)
    socks.append(d)
    e = udp(host)  # connected: its address and port chosen by connect
    e.setsockopt(ip, tos, 0xc0)
    e.connect((host, port0 + 4))
    socks.append(e)
    # IPv4's IP_TOS also sets the socket's priority (rt_tos2priority): 0 for 0x20 and 0xc0
    # above, 6 for 0xb8 (SO_PRIORITY != 0: the kernel's path); IPV6_TCLASS does not.
    f = udp(host)
    f.setsockopt(ip, tos, 0xb8)
    socks.append(f)
    for seq in range(100):
        for i, s in enumerate(socks):
            m = proto.make(i, seq, 64 + seq)
            if i == 4:
                s.send(m)
            else:
                s.sendto(m, (host, port0 + i))
    finish(host, port0, 6)
    print("headers: 6 sockets x 100")


def highfd(host, port0):
    """A socket whose number is past the shim's table (70000, RLIMIT_NOFILE raised): it
    cannot see what happens to that number (connect, dup2 over it), so those sends go by the
    kernel's path; a socket with a low number alongside goes as frames. 100 datagrams on the
    high number unconnected to destination 0, 100 on the low one to destination 1, then the
    high number connected to destination 2 (50), reconnected to 0 (50), and a socket
    dup2'd over it connected to 1 (50)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 70001
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        print(f"cannot raise RLIMIT_NOFILE to {want} (hard limit {hard}, no CAP_SYS_RESOURCE)",
              file=sys.stderr)
        sys.exit(77)
    seq = [0, 0, 0]

    def m(i):
        seq[i] += 1
        return proto.make(i, seq[i] - 1, 100)

    low = udp(host)
    tmp = udp(host)
    os.dup2(tmp.fileno(), 70000)
    tmp.close()
    high = socket.socket(fileno=70000)
    for _ in range(100):
        high.sendto(m(0), (host, port0))
        low.sendto(m(1), (host, port0 + 1))
    high.connect((host, port0 + 2))
    for _ in range(50):
        high.send(m(2))
    high.connect((host, port0))
    for _ in range(50):
        high.send(m(0))
    other = udp(host)
    other.connect((host, port0 + 1))
    os.dup2(other.fileno(), 70000)
    for _ in range(50):
        high.send(m(1))
    finish(host, port0, 3)
    print("per destination: " + " ".join(str(x) for x in seq))


def zerolength(host, port0):
    """Calls that send no bytes, each between two numbered datagrams: on a connected socket
    (destination 0) write, writev of no buffer and of two empty ones, send, sendmsg of
    nothing; unconnected (destination 1) sendto, sendmsg with no buffer and with empty ones,
    sendmmsg with an empty message in the middle. The kernel sends an empty datagram for
    some (not for a writev of 0 bytes, which never reaches the socket)."""
    c = udp(host)
    c.connect((host, port0))
    u = udp(host)
    d1 = (host, port0 + 1)
    seq = [0, 0]
    out = []

    def num(i):
        m = proto.make(i, seq[i], 32)
        seq[i] += 1
        if i == 0:
            c.send(m)
        else:
            u.sendto(m, d1)

    for name, call in (("write", lambda: os.write(c.fileno(), b"")),
                       ("writev0", lambda: os.writev(c.fileno(), [])),
                       ("writev2", lambda: os.writev(c.fileno(), [b"", b""])),
                       ("send", lambda: c.send(b"")),
                       ("sendmsg", lambda: c.sendmsg([]))):
        num(0)
        out.append(f"{name}:{call()}")
    num(0)
    for name, call in (("sendto", lambda: u.sendto(b"", d1)),
                       ("sendmsg0", lambda: u.sendmsg([], [], 0, d1)),
                       ("sendmsg2", lambda: u.sendmsg([b"", b""], [], 0, d1)),
                       ("sendmmsg", lambda: sendmmsg(u.fileno(), [
                           (proto.make(1, 1000, 32), d1), (b"", d1),
                           (proto.make(1, 1001, 32), d1)]))):
        num(1)
        out.append(f"{name}:{call()}")
    num(1)
    finish(host, port0, 2)
    print(" ".join(out))


def closeall(host, port0):
    """What daemons do to descriptors they did not open, after the shim's port exists:
    os.closerange over everything (close_range), then close(2) on every number up to 1024,
    then dup2 of a socket onto each number the program does not know of (the port's, under
    the shim). After each, 100 more datagrams to destination 0, from a new socket: all must
    arrive, in order."""
    seq = 0

    def burst(s):
        nonlocal seq
        for _ in range(100):
            s.sendto(proto.make(0, seq, 64), (host, port0))
            seq += 1

    s = udp(host)
    burst(s)
    s.detach()  # (its number is closed below; the object must not close it again)
    os.closerange(3, 1 << 16)
    s = udp(host)
    burst(s)
    mine = s.fileno()
    for fd in range(3, 1024):
        if fd != mine:
            try:
                os.close(fd)
            except OSError:
                pass
    burst(s)
    # Numbers open that the program did not open: dup2 over them.
    d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    names = os.listdir(d)
    os.close(d)
    for fd in (int(x) for x in names):
        if fd > 2 and fd not in (mine, d):
            try:
                os.dup2(mine, fd)
            except OSError:
                pass
    burst(s)
    s2 = udp(host)
    burst(s2)
    finish(host, port0, 1)
    print(f"closeall: {seq} datagrams")


def descriptors(host, port0):
    """What a socket's number and peer become: connect to one port, then another (5 times),
    write(2) after the second; connect(AF_UNSPEC) (no peer: EDESTADDRREQ, then sendto);
    dup2 of another connected socket onto the number; close, and a new socket that gets the
    same number, connected elsewhere. Each datagram must reach the destination it names."""
    import ctypes
    s = udp(host)
    seq = [0, 0, 0]
    out = []

    def snd(i, how):
        m = proto.make(i, seq[i], 64)
        try:
            r = how(m)
            seq[i] += 1
        except OSError as e:
            r = os.strerror(e.errno)
        out.append(str(r))

    for _ in range(5):
        s.connect((host, port0))
        snd(0, s.send)
        s.connect((host, port0 + 1))
        snd(1, s.send)
        snd(1, lambda m: os.write(s.fileno(), m))
    libc = ctypes.CDLL(None, use_errno=True)
    unspec = (ctypes.c_ubyte * 16)()
    out.append(f"disconnect:{libc.connect(s.fileno(), unspec, 16)}")
    snd(1, s.send)
    snd(2, lambda m: s.sendto(m, (host, port0 + 2)))
    t = udp(host)
    t.connect((host, port0))
    os.dup2(t.fileno(), s.fileno())
    snd(0, s.send)
    n = s.fileno()
    s.close()
    t.close()
    u = udp(host)
    u.connect((host, port0 + 2))
    out.append(f"same-number:{u.fileno() == n}")
    snd(2, u.send)
    snd(2, lambda m: os.write(u.fileno(), m))
    finish(host, port0, 3)
    print(" ".join(out))
    print("per destination: " + " ".join(str(x) for x in seq))


def processes(host, port0):
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    n = 400
    d = [(host, port0 + i) for i in range(3)]
    turn = [ctx.Event(), ctx.Event()]

    def run(i):
        s = udp(host)
        for seq in range(i, n, 2):
            turn[i].wait()
            turn[i].clear()
            s.sendto(proto.make(0, seq, 64), d[0])
            s.sendto(proto.make(1, seq, 64), d[1])
            turn[1 - i].set()
            s.sendto(proto.make(2, seq, 64), d[2])

    child = ctx.Process(target=run, args=(1,))
    child.start()
    turn[0].set()
    run(0)
    child.join()
    if child.exitcode != 0:
        sys.exit(f"child exited with {child.exitcode}")
    finish(host, port0, 3)
    print(f"sent {n} x 3 from two processes")


class Mmsghdr(ctypes.Structure):
    pass


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


Mmsghdr._fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def sockaddr(host, port):
    """A struct sockaddr_in/in6 as bytes, the kernel's layout."""
    if ":" in host:
        return (socket.AF_INET6.to_bytes(2, "little") + port.to_bytes(2, "big") +
                bytes(4) + socket.inet_pton(socket.AF_INET6, host) + bytes(4))
    return (socket.AF_INET.to_bytes(2, "little") + port.to_bytes(2, "big") +
            socket.inet_pton(socket.AF_INET, host) + bytes(8))


def sendmmsg(fd, msgs):
    """libc's sendmmsg (the shim's, under LD_PRELOAD) on [(datagram, (host, port))]."""
    libc = ctypes.CDLL(None, use_errno=True)
    n = len(msgs)
    vec = (Mmsghdr * n)()
    keep = []
    for j, (data, (host, port)) in enumerate(msgs):
        buf = ctypes.create_string_buffer(data, len(data))
        name = ctypes.create_string_buffer(sockaddr(host, port))
        iov = Iovec(ctypes.cast(buf, ctypes.c_void_p), len(data))
        keep += [buf, name, iov]
        vec[j].hdr.name = ctypes.cast(name, ctypes.c_void_p)
        vec[j].hdr.namelen = len(name.raw)
        vec[j].hdr.iov = ctypes.pointer(iov)
        vec[j].hdr.iovlen = 1
    r = libc.sendmmsg(fd, vec, n, 0)
    if r < 0:
        return f"-1 {os.strerror(ctypes.get_errno())}"
    return f"{r} [{' '.join(str(vec[j].len) for j in range(n))}]"


def calls(host, port0):
    k = 8
    d = [(host, port0 + i) for i in range(k)]
    seq = [0] * k
    out = []

    def nxt(i, size):
        m = proto.make(i, seq[i], size)
        seq[i] += 1
        return m

    s = udp(host)
    # A sendto loop, two sizes, destinations 0..3.
    for r in range(200):
        for i in range(4):
            m = nxt(i, 64 if r % 2 else 1400)
            out.append(s.sendto(m, d[i]))
    # sendmsg, the datagram gathered from three buffers, destinations 4 and 5.
    for r in range(100):
        for i in (4, 5):
            m = nxt(i, 300)
            out.append(s.sendmsg([m[:10], m[10:100], m[100:]], [], 0, d[i]))
    # A connected socket: send, os.write, os.writev to destination 6.
    c = udp(host)
    c.connect(d[6])
    for r in range(100):
        out.append(c.send(nxt(6, 200)))
        out.append(os.write(c.fileno(), nxt(6, 100)))
        m = nxt(6, 500)
        out.append(os.writev(c.fileno(), [m[:16], m[16:]]))
    # sendmmsg: vectors of 1, 7 and 64 over destinations 0..7 (streams continue).
    mm = []
    for vlen in (1, 7, 64):
        for r in range(10):
            v = []
            for j in range(vlen):
                i = j % k
                v.append((nxt(i, 64 + 8 * j), d[i]))
            mm.append(sendmmsg(s.fileno(), v))
    # One vector longer than UIO_MAXIOV: the kernel sends the first 1024 and says so.
    v = [(proto.make(j % k, seq[j % k] + j // k, 1400), d[j % k]) for j in range(1100)]
    r = sendmmsg(s.fileno(), v)
    mm.append(r.split(" ")[0])
    for j in range(int(r.split(" ")[0])):
        seq[j % k] += 1 if j < 1024 else 0
    finish(host, port0, k)
    print(f"sendto/sendmsg/send/write/writev: {len(out)} calls, {sum(out)} bytes")
    print(f"sendmmsg: {' '.join(mm[:3])} ... {mm[-1]} ({len(mm)} calls)")
    print("per destination: " + " ".join(str(x) for x in seq))


def multicast(group, port0):
    """IPv4 multicast out of xs0 (IP_MULTICAST_IF 10.77.0.1, TTL 1): 500 datagrams with
    IP_MULTICAST_LOOP off (frames can carry them) to GROUP:PORT0, 500 with it on (the
    default: the kernel's path, which loops a copy back) to GROUP:PORT0+1."""
    n = 500
    out = []
    for i, loop in ((0, 0), (1, 1)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("10.77.0.1"))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, loop)
        for seq in range(n):
            out.append(s.sendto(proto.make(i, seq, 200), (group, port0 + i)))
        s.sendto(proto.end_marker(i), (group, port0 + i))
        s.close()
    print(f"multicast: {len(out)} datagrams, {sum(out)} bytes")


if __name__ == "__main__":
    host, port0, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    {"twosockets": lambda: two_sockets(host, port0, False),
     "dup": lambda: two_sockets(host, port0, True),
     "threads": lambda: threads(host, port0),
     "processes": lambda: processes(host, port0),
     "descriptors": lambda: descriptors(host, port0),
     "closeall": lambda: closeall(host, port0),
     "zerolength": lambda: zerolength(host, port0),
     "highfd": lambda: highfd(host, port0),
     "headers": lambda: headers(host, port0),
     "concurrent": lambda: concurrent(host, port0, True),
     "concurrent-cold": lambda: concurrent(host, port0, False),
     "calls": lambda: calls(host, port0),
     "multicast": lambda: multicast(host, port0)}[what]()
