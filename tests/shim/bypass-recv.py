# SPDX-License-Identifier: MIT
"""The verifying receiver of the bypass tests (bypass-test.sh), run in the receiving namespace.

    bypass-recv.py dgram ADDR PORT0 K [--unordered I,J...] [--headers]
        K UDP sockets on ADDR:PORT0..PORT0+K-1. Every datagram must be a bypass-proto datagram
        (below), checked byte for byte; socket i stops at its end marker. Prints, per socket,
        the sequence numbers in arrival order as ranges ("sock 0: 0-1999"), so that two runs
        (with and without the shim) can be compared line for line; --unordered sockets print
        theirs sorted (their order is the scheduler's), but each number must still arrive
        exactly once. Empty datagrams are counted and shown where they came. --headers: also, per socket, how many datagrams came from each source
        address and port with each TTL and TOS (IPv6: hop limit and traffic class).
        ADDR may be GROUP@IFADDR: the sockets join IPv4 multicast GROUP on IFADDR's interface.
    bypass-recv.py stream ADDR PORT BYTES FILE
        One socket; the payloads, concatenated, go to FILE until BYTES bytes have arrived.
        Prints the number of datagrams and bytes.

"ready" is printed once every socket is bound. A datagram's absence is found by a 20 s
bound without any datagram (a safety net: a hang would be a failure anyway), then exit 1.

bypass-proto datagram: b"BPT1", u32 stream, u32 seq, u32 length (little-endian), then
length - 16 bytes, byte k = (seq * 7 + k * 13 + stream) & 0xff. seq 0xffffffff with length 16
is the end marker of its destination.
"""
import selectors
import socket
import struct
import sys

MAGIC = b"BPT1"
END = 0xFFFFFFFF
HDR = struct.Struct("<4sIII")
IDLE = 20


def payload(stream, seq, length):
    n = length - HDR.size
    return bytes((seq * 7 + k * 13 + stream) & 0xFF for k in range(n))


def make(stream, seq, length):
    """A datagram as the senders build it (they import this module)."""
    return HDR.pack(MAGIC, stream, seq, length) + payload(stream, seq, length)


def end_marker(stream):
    return HDR.pack(MAGIC, stream, END, HDR.size)


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def bind(addr, port):
    """ADDR may be GROUP@IFADDR: an IPv4 multicast group, joined on IFADDR's interface."""
    group, _, ifaddr = addr.partition("@")
    s = socket.socket(family(group), socket.SOCK_DGRAM)
    if ifaddr:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     socket.inet_aton(group) + socket.inet_aton(ifaddr))
    addr = group
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((addr, port))
    s.setblocking(False)
    return s


def ranges(seqs):
    out, i = [], 0
    while i < len(seqs):
        j = i
        while j + 1 < len(seqs) and seqs[j + 1] == seqs[j] + 1:
            j += 1
        out.append(str(seqs[i]) if i == j else f"{seqs[i]}-{seqs[j]}")
        i = j + 1
    return ",".join(out) if out else "-"


# Ancillary data that says what the IP header held: (level, option to ask, cmsg type, name).
HEADERS4 = [(socket.IPPROTO_IP, 12, 2, "ttl"), (socket.IPPROTO_IP, 13, 1, "tos")]
HEADERS6 = [(socket.IPPROTO_IPV6, 51, 52, "hops"), (socket.IPPROTO_IPV6, 66, 67, "tclass")]


def header_fields(sock, six):
    for level, opt, _, _ in HEADERS6 if six else HEADERS4:
        sock.setsockopt(level, opt, 1)


def describe(src, anc, six, eph):
    """The datagram's source and header fields, as one comparable string. Ports the kernel
    picks (32768 and up) are shown as "ephemeral N", numbered in the order they first came
    (eph: this socket's numbering)."""
    fields = {}
    for level, typ, data in anc:
        for lv, _, t, name in HEADERS6 if six else HEADERS4:
            if level == lv and typ == t:
                fields[name] = data[0] if name == "tos" else int.from_bytes(data[:4], "little")
    port = src[1] if src[1] < 32768 else f"ephemeral {eph.setdefault(src[1], len(eph) + 1)}"
    return f"from {src[0]} port {port} " + " ".join(f"{k} {v}" for k, v in sorted(fields.items()))


def dgram(addr, port0, k, unordered, headers=False):
    socks = [bind(addr, port0 + i) for i in range(k)]
    six = ":" in addr
    seen = [{} for _ in range(k)]
    eph = [{} for _ in range(k)]
    empty = [0] * k
    if headers:
        for s in socks:
            header_fields(s, six)
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
    print("ready", flush=True)
    got = [[] for _ in range(k)]
    done = [False] * k
    bad = 0
    while not all(done):
        ev = sel.select(IDLE)
        if not ev:
            print(f"timeout: {IDLE} s without a datagram", file=sys.stderr)
            bad += 1
            break
        for key, _ in ev:
            i = key.data
            while True:
                try:
                    d, anc, _, src = socks[i].recvmsg(70000, 256)
                except BlockingIOError:
                    break
                if headers:
                    h = describe(src, anc, six, eph[i])
                    seen[i][h] = seen[i].get(h, 0) + 1
                if done[i]:
                    print(f"sock {i}: a datagram after the end marker", file=sys.stderr)
                    bad += 1
                    continue
                if not d:
                    empty[i] += 1
                    got[i].append("empty")
                    continue
                if len(d) < HDR.size:
                    print(f"sock {i}: {len(d)} bytes, shorter than a header", file=sys.stderr)
                    bad += 1
                    continue
                magic, stream, seq, length = HDR.unpack_from(d)
                if magic != MAGIC or stream != i or length != len(d):
                    print(f"sock {i}: bad header {d[:16].hex()} ({len(d)} bytes)",
                          file=sys.stderr)
                    bad += 1
                    continue
                if seq == END:
                    done[i] = True
                    continue
                if d[HDR.size:] != payload(stream, seq, length):
                    print(f"sock {i}: seq {seq}: payload differs", file=sys.stderr)
                    bad += 1
                    continue
                got[i].append(seq)
    for i in range(k):
        if empty[i]:
            # Where the empty datagrams came among the others.
            print(f"sock {i}: {empty[i]} empty datagrams: " +
                  " ".join(str(x) for x in got[i]))
        seqs = [x for x in got[i] if x != "empty"]
        if len(set(seqs)) != len(seqs):
            print(f"sock {i}: {len(seqs) - len(set(seqs))} duplicates", file=sys.stderr)
            bad += 1
        shown = sorted(seqs) if i in unordered else seqs
        print(f"sock {i}: {len(seqs)} datagrams: {ranges(shown)}")
        for h, n in sorted(seen[i].items()):
            print(f"sock {i}: {n} {h}")
    sys.stdout.flush()
    return 1 if bad else 0


def stream(addr, port, want, path):
    s = bind(addr, port)
    s.setblocking(True)
    s.settimeout(IDLE)
    print("ready", flush=True)
    n = total = 0
    with open(path, "wb") as f:
        while total < want:
            try:
                d = s.recv(70000)
            except socket.timeout:
                print(f"timeout: {IDLE} s without a datagram, {total} of {want} bytes",
                      file=sys.stderr)
                return 1
            f.write(d)
            n += 1
            total += len(d)
    print(f"received {n} datagrams, {total} bytes")
    return 0 if total == want else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "dgram":
        uo, hd = set(), False
        rest = a[4:]
        while rest:
            if rest[0] == "--unordered":
                uo = {int(x) for x in rest[1].split(",")}
                rest = rest[2:]
            elif rest[0] == "--headers":
                hd = True
                rest = rest[1:]
            else:
                sys.exit(__doc__)
        sys.exit(dgram(a[1], int(a[2]), int(a[3]), uo, hd))
    if a and a[0] == "stream":
        sys.exit(stream(a[1], int(a[2]), int(a[3]), a[4]))
    sys.exit(__doc__)
