#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile peers of md-publisher's and md-relay's control protocol (md-proto.h), for
tests/serve/serve-test.sh. Every loop is bounded in count and time; addresses are loopback
only (the callers run it inside a network namespace of their own when it spoofs or sweeps).

  ctl.py spoof [-w SECONDS] SRC:DST:TEXT...    UDP datagrams 127.0.0.1:SRC -> :DST from a raw
                                               socket (root), each TEXT NUL-padded to 64 bytes
                                               unless it starts with 'raw:'; with -w, then
                                               print how many datagrams the namespace
                                               received (Udp InDatagrams) within SECONDS'
  ctl.py victim PORT_FILE STOP_FILE SECONDS    bind 127.0.0.1:0, write the port, then print
                                               what arrived there until STOP_FILE exists (at
                                               most SECONDS): 'datagrams N bytes B ticks T
                                               challenges C'
  ctl.py flood CTL_PORT SECONDS STOP_FILE      unproven JOIN2 (64 B) and old JOIN (4 B) from
                                               256 sockets on as many 127.x addresses until
                                               STOP_FILE exists or SECONDS pass; print
                                               'sent N received R ticks T bytes B'
  ctl.py sweep CTL_PORT SEQ [SPOOF_PORT [tick]] a tick with sequence number SEQ, then an END
                                               (with 'tick': no END), to every port
                                               1024..65535 of 127.0.0.1 except CTL_PORT, from
                                               an ordinary socket, or from
                                               127.0.0.1:SPOOF_PORT by raw socket
  ctl.py lease CTL_PORT SECONDS                a well-behaved subscriber that joins (cookie
                                               echoed) and then never renews: print
                                               'acked lease_ms ticks N stopped yes|no'
"""
import os
import select
import socket
import struct
import sys
import time

MD_CTL_SIZE = 64
MAGIC_TICK = 0x314B544D
MAGIC_END = 0x31444E45


def request(text):
    if text.startswith('raw:'):
        return text[4:].encode()
    b = text.encode()
    return b + b'\0' * (MD_CTL_SIZE - len(b))


def tick(magic, seq, size=40):
    return struct.pack('<IIQQqII', magic, size, seq, time.time_ns(), 1000000, 1, 100)


def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def raw_udp(src_port, dst_port, payload, src='127.0.0.1', dst='127.0.0.1'):
    """An IPv4/UDP datagram built by hand; IPPROTO_RAW implies IP_HDRINCL."""
    s_ip, d_ip = socket.inet_aton(src), socket.inet_aton(dst)
    ulen = 8 + len(payload)
    pseudo = s_ip + d_ip + struct.pack('!BBH', 0, socket.IPPROTO_UDP, ulen)
    udp = struct.pack('!HHHH', src_port, dst_port, ulen, 0)
    c = csum(pseudo + udp + payload) or 0xFFFF
    udp = struct.pack('!HHHH', src_port, dst_port, ulen, c)
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + ulen, 0, 0, 64, socket.IPPROTO_UDP, 0,
                     s_ip, d_ip)
    ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
    return ip + udp + payload


def raw_socket():
    return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)


def classify(data):
    """'tick', 'end', 'challenge' or 'other'."""
    if len(data) >= 40:
        magic, size = struct.unpack_from('<II', data)
        if magic == MAGIC_TICK and size == len(data):
            return 'tick'
        if magic == MAGIC_END and size == len(data):
            return 'end'
    if data.startswith(b'CHALLENGE2 '):
        return 'challenge'
    return 'other'


def udp_in():
    with open('/proc/net/snmp') as f:
        rows = [l.split() for l in f if l.startswith('Udp:')]
    return int(rows[1][rows[0].index('InDatagrams')])


def cmd_spoof(*args):
    window = None
    if args[0] == '-w':
        window, args = float(args[1]), args[2:]
    r = raw_socket()
    before = udp_in()
    for a in args:
        src, dst, text = a.split(':', 2)
        r.sendto(raw_udp(int(src), int(dst), request(text)), ('127.0.0.1', 0))
    if window is not None:
        # An observation window, not a wait for anything: a reply loop would fill it.
        time.sleep(window)
        print('received %d' % (udp_in() - before))


def cmd_victim(port_file, stop_file, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(('127.0.0.1', 0))
    with open(port_file + '.tmp', 'w') as f:
        f.write('%d\n' % s.getsockname()[1])
    os.rename(port_file + '.tmp', port_file)
    end = time.monotonic() + float(seconds)
    n = nbytes = ticks = challenges = 0
    stopping = False
    while n < 1000000 and time.monotonic() < end:
        # Once STOP_FILE exists, whatever was sent here before has arrived (loopback
        # delivers within the sender's call): take what is queued, then stop.
        if not stopping and os.path.exists(stop_file):
            stopping = True
        if not select.select([s], [], [], 0 if stopping else 0.1)[0]:
            if stopping:
                break
            continue
        data = s.recv(65536)
        n += 1
        nbytes += len(data)
        k = classify(data)
        ticks += k in ('tick', 'end')
        challenges += k == 'challenge'
    print('datagrams %d bytes %d ticks %d challenges %d' % (n, nbytes, ticks, challenges))


def cmd_flood(ctl_port, seconds, stop_file):
    socks = []
    for i in range(256):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # 127.0.0.0/8 is all loopback: 256 source addresses, one port each.
        s.bind(('127.%d.%d.%d' % (1 + i // 65536 % 250, i // 256 % 256, 1 + i % 250), 0))
        s.setblocking(False)
        socks.append(s)
    join2, join1 = request('JOIN2'), b'JOIN'
    end = time.monotonic() + float(seconds)
    sent = received = ticks = nbytes = 0
    dst = ('127.0.0.1', int(ctl_port))
    rounds = 0
    while time.monotonic() < end and rounds < 100000:
        rounds += 1
        if rounds % 16 == 0 and os.path.exists(stop_file):
            break
        for s in socks:
            for msg in (join2, join1):
                try:
                    s.sendto(msg, dst)
                    sent += 1
                except (BlockingIOError, ConnectionRefusedError):
                    pass
        for s in socks:
            for _ in range(64):
                try:
                    data = s.recv(65536)
                except (BlockingIOError, ConnectionRefusedError):
                    break
                received += 1
                nbytes += len(data)
                ticks += classify(data) in ('tick', 'end')
    # What was already on its way: a server that took these sources on keeps sending.
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        r = select.select(socks, [], [], max(0.0, deadline - time.monotonic()))[0]
        if not r:
            break
        for s in r:
            try:
                data = s.recv(65536)
            except (BlockingIOError, ConnectionRefusedError):
                continue
            received += 1
            nbytes += len(data)
            ticks += classify(data) in ('tick', 'end')
    print('sent %d received %d ticks %d bytes %d' % (sent, received, ticks, nbytes))


def cmd_sweep(ctl_port, seq, spoof_port=None, only=None):
    ctl_port, seq = int(ctl_port), int(seq)
    msgs = [tick(MAGIC_TICK, seq)] + ([] if only == 'tick' else [tick(MAGIC_END, seq)])
    if spoof_port is None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(('127.0.0.1', 0))
        send = lambda m, p: s.sendto(m, ('127.0.0.1', p))
    else:
        r = raw_socket()
        send = lambda m, p: r.sendto(raw_udp(int(spoof_port), p, m), ('127.0.0.1', 0))
    n = 0
    for m in msgs:
        for p in range(1024, 65536):
            if p == ctl_port:
                continue
            try:
                send(m, p)
                n += 1
            except OSError:
                pass
    print('swept %d datagrams' % n)


def cmd_lease(ctl_port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(('127.0.0.1', 0))
    ctl = ('127.0.0.1', int(ctl_port))
    end = time.monotonic() + float(seconds)
    lease_ms = acked = None
    cookie = None
    nticks = 0
    last_tick = None
    while time.monotonic() < end:
        if acked is None:
            s.sendto(request('JOIN2' + (' ' + cookie if cookie else '')), ctl)
        r = select.select([s], [], [], 0.2)[0]
        if not r:
            if acked is not None and last_tick is not None and \
               time.monotonic() - last_tick > 1.0:
                break  # the feed stopped coming
            continue
        data, src = s.recvfrom(65536)
        if src == ctl:
            f = data.decode(errors='replace').split()
            if f and f[0] == 'CHALLENGE2':
                cookie = f[1]
            elif f and f[0] == 'ACK2':
                acked, lease_ms = time.monotonic(), int(f[3])
            continue
        if classify(data) == 'tick':
            nticks += 1
            last_tick = time.monotonic()
    stopped = acked is not None and last_tick is not None and \
        time.monotonic() - last_tick > 1.0
    print('acked %s lease_ms %s ticks %d stopped %s' %
          ('yes' if acked else 'no', lease_ms, nticks, 'yes' if stopped else 'no'))


if __name__ == '__main__':
    cmds = {'spoof': cmd_spoof, 'victim': cmd_victim, 'flood': cmd_flood, 'sweep': cmd_sweep,
            'lease': cmd_lease}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
