/* SPDX-License-Identifier: MIT */
/*
 * Where the datagrams go. Each sink gives N IPv4 destinations and says how many fan-outs may
 * be sent before it must be drained.
 *
 *   loopback     one UDP socket per destination bound on 127.0.0.1 with a large receive
 *                buffer. Nobody reads while a batch is timed; between batches the sending
 *                thread drains the queues, untimed, before they can fill. So every datagram
 *                is queued at its receiver (no drops), and the cost measured is the send path
 *                plus the loopback receive path up to the socket queue, which the kernel runs
 *                on the sending CPU (softirq) and charges to the sender. The receiver's own
 *                read is not in it.
 *   deliver      the same sockets read concurrently by receiver threads that verify every
 *                datagram (length, magic, per-destination sequence number, and with
 *                --verify-payload every byte after the head). Nothing is drained by the
 *                sender; wake-ups of sleeping receivers are part of the cost.
 *   tcp          (--tcp) one TCP connection per destination over 127.0.0.1, all to one
 *                listening socket, read concurrently by receiver threads that discard what
 *                they read and count the bytes: a stream shape for the same comparison. A full
 *                send buffer blocks the sender (nothing is dropped), so receivers must read
 *                while it sends; their CPU is counted apart, as deliver's.
 *   netns-drop   destinations NETNS_REMOTE:10000.. inside the bench's own namespace (see
 *                netns.h); no sockets, nothing to drain.
 *
 * Every message starts with struct msg_head (when it is large enough): the fan-out's sequence
 * number and a magic, so receivers can check what they get.
 */
#ifndef BENCH_SINK_H
#define BENCH_SINK_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"

#define MSG_MAGIC 0x4d53424eu /* "MSBN" */

struct msg_head {
	uint64_t seq;
	uint32_t magic;
	uint32_t size;
};

/* Fill msg with the bench's message of size bytes: a fixed byte pattern after a msg_head with
 * sequence number 0 (when size allows one). Senders stamp the sequence number; deliver
 * receivers with payload checking compare every byte after the head with this pattern. */
void msg_fill(unsigned char *msg, size_t size);

/* What deliver receivers saw, summed over destinations. */
struct deliver_count {
	uint64_t received; /* valid datagrams */
	uint64_t lost;     /* sequence numbers skipped (a drop shows up when a later one arrives) */
	uint64_t late;     /* arrived after a later one (reordered or duplicated) */
	uint64_t bad;      /* wrong length or magic */
	uint64_t corrupt;  /* right head, but the payload after it differs (payload checking only) */
	uint64_t bytes;    /* tcp: bytes read (received is the whole messages among them) */
	uint64_t foreign;  /* not from the rig's sending socket for that destination: another
			    * program's (anything on the machine may send to a loopback port);
			    * ignored, neither received nor malformed */
};

struct sink;

/*
 * Open a sink for n destinations of messages of size bytes. sender_cpu >= 0: receiver
 * threads (deliver) avoid that CPU. check_payload (deliver): receivers read whole datagrams
 * and compare every byte after the head with msg_fill's pattern, not only the head. Returns 0,
 * or -errno with a reason in err.
 */
int sink_open(struct sink **out, enum sink_kind kind, size_t n, size_t size, int sender_cpu,
	      bool check_payload, char *err, size_t errlen);
void sink_close(struct sink *s);

const struct sockaddr_in *sink_dests(const struct sink *s);
/* Fan-outs that may be sent between two sink_drain calls (UINT64_MAX: no limit). */
uint64_t sink_burst_limit(const struct sink *s);
/* Empty every receive queue (loopback); a no-op for the others. 0 or -errno. */
int sink_drain(struct sink *s);
/* Datagrams the kernel dropped at this sink's own receiving sockets so far (SO_MEMINFO), exact
 * whatever else runs on the machine; 0 for netns-drop, which has no receivers. */
uint64_t sink_drops(const struct sink *s);
/* Deliver: a local port (network byte order) that destination idx's datagrams come from, i.e.
 * a rig's sending socket for it: the plain one, and each stamped variant's own ("+ts" and
 * "+wK+ts", three of each at most; up to SINK_MAX_SOURCES in all; more are ignored). Set
 * every destination's before the first send; until then anything that arrives counts as
 * foreign. A no-op for the other sinks. */
#define SINK_MAX_SOURCES 8
void sink_expect_source(struct sink *s, size_t idx, uint16_t port);
/* Deliver and tcp: counts so far (zero for other sinks). */
void sink_count(const struct sink *s, struct deliver_count *c);
/* CPU time used by receiver threads so far (deliver, tcp), so it can be taken out of the
 * process CPU that the sender is charged. */
uint64_t sink_rx_cpu_ns(const struct sink *s);
/* One paragraph for the environment header (netns-drop: see netns_describe). */
void sink_describe(enum sink_kind kind, bool check_payload, char *buf, size_t len);

#endif
