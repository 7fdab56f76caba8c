#!/usr/bin/env python3
# The named seeds of tests/fuzz/corpus/fuzz-group (fanout-*, slow-*, stuck-*, unix-stream-*,
# workers-*, post-*): inputs that reach each mode of fuzz-group.c, written in its input format.
#   tests/fuzz/group-seeds.py tests/fuzz/corpus/fuzz-group
import os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def hdr(backend, workers, ts, rot, qd=3):
    # backend 1 loop 2 sendmmsg 3 io_uring; workers 1..4; ts 0 off 1 first/last 2 all
    x = next(x for x in range(16) if (rot * 16 + x) % 3 == ts)  # ts is (shape >> 3) % 3
    return bytes([(workers - 1) * 3 + (backend - 1), (rot << 7) | (x << 3) | qd])
def add(i): return bytes([0, i])
def rm(i): return bytes([2, i + 8])
def send(n, dontwait=False, res=True):
    return bytes([3, n >> 8, n & 255, 1 | (4 if dontwait else 0), 1 if res else 0])
def sendv(lens, dontwait=False, res=True):
    b = bytes([4, 0, 0, 1 | (4 if dontwait else 0), 1 if res else 0, len(lens)])
    for l in lens:
        b += bytes([l, 0])  # iov length l*97 % 8000 (0: an empty buffer)
    return b
def slow(policy, limit=None):
    if limit is None:
        return bytes([5, policy])
    # do_set_slow: policy = byte % 5, 0x40 = a queue limit follows (policy | 0x40 would
    # change the policy: 66 % 5 is 1)
    return bytes([5, next(b for b in range(0x40, 0x80) if b % 5 == policy), limit])
FLUSH, DRAIN = bytes([6]), bytes([7])
UDP_UNCONN = [7, 8, 9]; UDP_CONN = [10, 11]; UNIX_DG = [0, 1, 2]; UNIX_UNCONN = [4, 5, 6]
SEQPACKET, TCP, SMALL = 3, 12, 13
def write(name, b):
    assert len(b) <= 1024, name
    open(os.path.join(out, name), 'wb').write(b)

def fanout(backend, workers, ts, rot):
    b = hdr(backend, workers, ts, rot)
    # many unconnected destinations on one UDP socket, connected UDP, AF_UNIX datagrams
    for k in range(6):
        for i in UDP_UNCONN: b += add(i)
    for i in UDP_CONN + UNIX_DG + UNIX_UNCONN: b += add(i)
    b += send(100) + send(100) + send(100, dontwait=True) + send(100, res=False) + send(1400)
    b += sendv([3, 0, 5, 0, 1]) + sendv([0]) + sendv([7, 9], dontwait=True)
    b += rm(3) + send(64) + send(64) + rm(0) + add(7) + send(64) + send(64)
    return b

names = {1: 'loop', 2: 'sendmmsg', 3: 'io_uring'}
for be in (1, 2, 3):
    for w in (1, 2, 3, 4):
        for ts, rot in ((2, 1), (1, 1), (0, 0)) if w in (1, 4) else ((2, 1),):
            write(f'fanout-{names[be]}-w{w}-ts{ts}-rot{rot}', fanout(be, w, ts, rot))

def streams(backend, workers, policy, ts, rot):
    b = hdr(backend, workers, ts, rot)
    b += add(SMALL) + add(TCP) + add(SEQPACKET)
    for k in range(4):
        for i in UDP_UNCONN: b += add(i)
    b += slow(policy, 2) if policy == 2 else slow(policy)
    for k in range(8):
        b += send(0xfff6 if k % 2 else 0x07ff, dontwait=bool(k & 2))
    b += FLUSH + DRAIN + FLUSH + send(300) + sendv([50, 0, 60]) + DRAIN + FLUSH + send(10)
    return b
for be in (1, 2, 3):
    for pol, pname in ((1, 'drop'), (2, 'queue'), (3, 'disconnect')):
        write(f'slow-{pname}-{names[be]}', streams(be, 2 if pol == 2 else 1, pol, 1, pol & 1))
# workers with streams without a policy: TCP and seqpacket split among parts
b = hdr(2, 4, 2, 1)
for k in range(5):
    for i in UDP_UNCONN + UNIX_UNCONN: b += add(i)
b += add(TCP) + add(SEQPACKET) + send(2000) + send(2000, dontwait=True) + sendv([1, 2, 3]) + rm(0) + send(9)
write('workers-mixed-sendmmsg', b)
# 40 destinations, 32 of them on one unconnected UDP socket: four parts with four workers
for be in (1, 2, 3):
    b = hdr(be, 4, 2, 1)
    for k in range(11):
        for i in UDP_UNCONN: b += add(i)
    for i in UDP_CONN + UNIX_DG + UNIX_UNCONN: b += add(i)
    b += send(200) + send(200, dontwait=True) + sendv([2, 0, 4]) + send(0xfff2) + rm(5) + send(20) + send(20)
    write(f'fanout-wide-{names[be]}-w4', b)
# the stuck destination (a blocking socket whose peer is full): every send to it DONTWAIT
STUCK = 14
for be in (1, 2, 3):
    for w in (1, 3):
        b = hdr(be, w, 2 if w == 3 else 0, 1)
        b += add(STUCK)
        for k in range(5):
            for i in UDP_UNCONN: b += add(i)
        for i in UNIX_DG + UDP_CONN: b += add(i)
        b += send(100) + send(100, dontwait=True) + sendv([1, 0, 2]) + send(0xfff6) + rm(0) + send(5) + add(STUCK) + send(7)
        write(f'stuck-dontwait-{names[be]}-w{w}', b)
# the AF_UNIX stream with TCP and seqpacket, no policy then a queue policy, with workers
USTREAM = 15
for be in (1, 2, 3):
    b = hdr(be, 2, 1, 1)
    b += add(USTREAM) + add(TCP) + add(SEQPACKET)
    for k in range(5):
        for i in UDP_UNCONN: b += add(i)
    b += send(1000) + sendv([5, 0, 6]) + send(0xfff6, dontwait=True) + send(3)
    b += slow(2) + send(0xfff6) + send(100, dontwait=True) + FLUSH + rm(0) + send(9) + FLUSH
    write(f'unix-stream-{names[be]}', b)

# Offload (first byte 228..239): posts (op byte bits 3-4 = 1), synchronous sends among them
# (3), the synchronous do_send after settling (0); op 7 with 0xc0 ends the input with the
# group freed while posts are queued (0x20: the context freed too).
def phdr(backend, workers, ts=0, rot=0, qd=3):
    h = hdr(backend, workers, ts, rot, qd)
    return bytes([228 + h[0]]) + h[1:]
def plen(n):  # post_shape's length: 16384 (a quarter of the ring), 16385, 12000, 16000
    return {16384: 0xf002, 16385: 0xf003, 12000: 0xf004, 16000: 0xf005}.get(n, n)
def post(n, dontwait=False):
    r = plen(n)
    return bytes([3 | 8, r >> 8, r & 255, 1 | (4 if dontwait else 0)])
def postv(lens, dontwait=False):
    b = bytes([4 | 8, 0, 0, len(lens)])
    for l in lens:
        b += bytes([l, 0])  # length l*97 % 9000
    return b + bytes([1 | (4 if dontwait else 0)])
def psync(n, dontwait=False):
    r = plen(n)
    return bytes([3 | 24, r >> 8, r & 255, 1 if dontwait else 0])
def psyncv(lens):
    b = bytes([4 | 24, 0, 0, len(lens)])
    for l in lens:
        b += bytes([l, 0])
    return b + bytes([0])
END_FREE, END_FREE_CTX = bytes([0xc7]), bytes([0xe7])
for be in (1, 2, 3):
    for w in (1, 2, 4):
        b = phdr(be, w, 0 if w != 4 else 2, 1 if w == 2 else 0)
        for k in range(3 if w < 4 else 6):
            for i in UDP_UNCONN: b += add(i)
        for i in UDP_CONN + UNIX_DG + UNIX_UNCONN + [TCP]: b += add(i)
        b += post(100) + post(1400) + postv([3, 0, 5]) + psync(200) + post(0) + post(16384)
        b += rm(3) + post(64) + add(3) + post(65) + psyncv([1, 2]) + post(16385)
        b += send(100) + post(9) + post(10, dontwait=True) + rm(0) + post(11)
        write(f'post-fanout-{names[be]}-w{w}', b)
        # a full ring: bursts of 16000-byte posts, with and without MS_SEND_DONTWAIT
        b = phdr(be, w)
        for i in UDP_UNCONN + UDP_CONN: b += add(i)
        for k in range(10): b += post(16000, dontwait=True)
        b += post(16000) + post(16000) + psync(12000)
        for k in range(8): b += post(12000, dontwait=k % 2 == 0)
        write(f'post-full-{names[be]}-w{w}', b)
    # the stuck socket and the small stream without a policy: -EAGAIN and short counts logged
    b = phdr(be, 2 if be == 2 else 1)
    b += add(STUCK) + add(SMALL) + add(USTREAM)
    for i in UDP_UNCONN + UNIX_DG: b += add(i)
    for k in range(6): b += post(12000) + post(16000, dontwait=True)
    b += psync(3000) + DRAIN + post(500) + rm(0) + post(100) + DRAIN
    write(f'post-stuck-small-{names[be]}', b)
    # slow-consumer policies on the small stream, with posts
    for pol, pname in ((1, 'drop'), (2, 'queue'), (3, 'disconnect')):
        b = phdr(be, 1)
        b += add(SMALL) + add(TCP) + add(SEQPACKET)
        for i in UDP_UNCONN: b += add(i)
        # do_set_slow's byte: policy = byte % 5, 0x40 a queue limit (byte 67: queue)
        b += slow(pol, 16) if pol == 2 else slow(pol)
        for k in range(12): b += post(16000, dontwait=bool(k & 1))
        b += FLUSH + DRAIN + post(300) + FLUSH + send(10) + post(20)
        write(f'post-slow-{pname}-{names[be]}', b)
    # the group freed with posts queued; and the context too
    for end, ename in ((END_FREE, 'free-group'), (END_FREE_CTX, 'free-ctx')):
        b = phdr(be, 3)
        for k in range(3):
            for i in UDP_UNCONN: b += add(i)
        for i in UNIX_DG + [TCP, STUCK, SMALL]: b += add(i)  # the stuck one: log entries
        b += post(16000) + post(16000) + post(1000) + rm(1) + post(16000) + end
        write(f'post-{ename}-{names[be]}', b)

# xdp (first byte 216..227): MS_BACKEND_XDP on the veth fuzz-group.c makes (root); the veth
# destinations are pool entries 16..23, six addresses on one unconnected UDP socket and two
# connected UDP sockets, to receivers in the peer's namespace. The shape byte's bit 0: copy
# mode only (MS_CFG_XDP_COPY). Op 5 with bit 7: ms_group_kernel_path (bit 6: on) on the id
# byte - 9 (8: MS_GROUP_ALL, 0..7: invalid negatives).
def xhdr(workers, ts, rot, copy):
    h = hdr(1, workers, ts, rot, copy)
    return bytes([216 + h[0]]) + h[1:]
def kpath(i, on):
    return bytes([0x85 | (0x40 if on else 0), i + 9])
VETH_UNCONN = [16, 17, 18, 19, 20, 21]; VETH_CONN = [22, 23]; ALL = -1
for w in (1, 4):
    for ts, rot in ((0, 0), (1, 1)):
        for copy in (0, 1):
            b = xhdr(w, ts, rot, copy)
            for k in range(2):
                for i in VETH_UNCONN: b += add(i)
            for i in VETH_CONN: b += add(i)
            b += send(100) + send(1472) + send(1473) + send(100, dontwait=True) + send(0xfff2)
            b += sendv([3, 0, 5]) + send(50, res=False)
            b += kpath(0, True) + send(64) + kpath(ALL, True) + send(64) + add(16) + send(64)
            b += kpath(ALL, False) + kpath(-3, True) + kpath(200, True) + send(64)
            write(f'xdp-veth-w{w}-ts{ts}-rot{rot}-copy{copy}', b)
# the veth among the rest: loopback UDP (local), AF_UNIX, TCP, the stuck socket (DONTWAIT)
for w in (1, 3):
    b = xhdr(w, 1, 0, 1)
    for i in VETH_UNCONN + VETH_CONN + UDP_UNCONN + UDP_CONN + UNIX_DG + [TCP, SEQPACKET, USTREAM]:
        b += add(i)
    b += send(200) + sendv([1, 2, 3]) + kpath(1, True) + send(300) + rm(1) + send(10)
    b += kpath(1, False) + add(STUCK) + send(100) + send(2000) + rm(1) + send(5)
    write(f'xdp-mixed-w{w}', b)
# a wide fan-out, 56 veth destinations of the 64 frames (an input has at most 64 operations:
# more would need more frames than the kernel holds; in copy mode it releases them in the kick)
b = xhdr(2, 0, 1, 1)
for k in range(9):
    for i in VETH_UNCONN: b += add(i)
for i in VETH_CONN + UDP_UNCONN: b += add(i)
b += send(1000) + send(1000, dontwait=True) + send(1000, dontwait=True) + send(10) + sendv([9, 9, 9])
write('xdp-wide', b)
