#!/usr/bin/env python3
# The named seeds of tests/fuzz/corpus/fuzz-group (fanout-*, slow-*, stuck-*, unix-stream-*,
# workers-*): inputs that reach each mode of fuzz-group.c, written in its input format.
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
    return bytes([5, policy | 0x40, limit])
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
