/* SPDX-License-Identifier: MIT */
/*
 * The xdp backend's frames for datagrams that are not a group's: a "port" is an AF_XDP socket
 * on one interface with its packet memory, which sends any socket's datagrams (each its own
 * message and destination) as frames, in order, and says where it must stop: the preload
 * shim's batches go out through one (shim/batch.c). Same frames, same rules as the backend
 * (lib/be/xdp.c, multisend.h's "Kernel bypass"): what it cannot carry, the caller sends by
 * the kernel's path.
 */
#ifndef MS_XDP_H
#define MS_XDP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Why a datagram goes by the kernel's path (the ms_stats xdp_fallback_* counters). */
enum {
	MS__XDP_LOCAL = 1, /* local or loopback, broadcast, multicast looped back */
	MS__XDP_IFACE,     /* leaves by another interface */
	MS__XDP_MTU,       /* does not fit one frame under the path's MTU */
	MS__XDP_ROUTE,     /* no usable route */
	MS__XDP_NEIGH,     /* next hop not resolved yet (the kernel's send resolves it) */
	MS__XDP_OTHER,     /* anything else (not UDP, no frame, no socket...) */
	MS__XDP_SOCKOPT,   /* a socket option frames cannot honour (IP_RECVERR, UDP_CORK,
	                      UDP_SEGMENT, IP_OPTIONS, SO_TIMESTAMPING for sends, IPV6_V6ONLY
	                      with an IPv4 destination; a port also: SO_PRIORITY) */
	MS__XDP_ERROR,     /* a port: the connected socket has an error pending, which the
	                      kernel's path returns (and clears) instead of sending */
	MS__XDP_NREASONS
};

struct ms__xport;

struct ms__xport_counts {
	uint64_t frames;   /* datagrams the kernel took as frames */
	uint64_t kicks;    /* system calls that handed frames over */
	uint64_t syscalls; /* all the port's system calls, kicks included */
};

/* A port on interface ifname: frames packet buffers (0: 2048), flags MS__XPORT_*; its queue
 * is taken by its first frame (ms__xport_queue), and not at all where netfilter has output
 * hooks or cannot be asked (lib/os/netfilter.h) unless MS__XPORT_NF_SKIP. 0, or -errno with
 * why (whylen bytes) saying what failed. */
#define MS__XPORT_COPY 1u    /* copy mode only (else zero copy first) */
#define MS__XPORT_NF_SKIP 2u /* frames may skip netfilter's output hooks: the caller accepts it */
int ms__xport_open(const char *ifname, uint32_t frames, unsigned flags, struct ms__xport **out,
		   char *why, size_t whylen);
void ms__xport_close(struct ms__xport *p);
void ms__xport_describe(const struct ms__xport *p, char *buf, size_t len);
/* A port takes its transmit queue (its AF_XDP socket and packet memory) with its first frame,
 * not when it is opened: a program that never sends a datagram the interface would carry never
 * holds one. 1: taken; 0: not yet; -errno: taking it failed (why, whylen bytes, says what),
 * and every message is skipped since (MS__XDP_OTHER). */
int ms__xport_queue(const struct ms__xport *p, char *why, size_t whylen);
/* The network may have changed (the program made a request on a netlink socket: now true;
 * it waited for something, another process perhaps: now false): the next send reads the
 * kernel's notifications before it makes a frame; with now false, only if none were read or
 * polled for in the last millisecond. Any thread, no lock, no system call. */
void ms__xport_recheck(struct ms__xport *p, bool now);
/* Is fd one of the port's own descriptors (its AF_XDP socket, its rtnetlink sockets)? A
 * caller that intercepts close and dup2 keeps a program from closing them. */
bool ms__xport_owns(const struct ms__xport *p, int fd);
/* Its descriptors (those open) into fds[3]; returns how many. */
int ms__xport_fds(const struct ms__xport *p, int fds[3]);
/* The program took one of the port's descriptor numbers (dup2 onto it): the port forgets
 * them all without closing any, and sends nothing more (every message skipped, MS__XDP_OTHER). */
void ms__xport_lose(struct ms__xport *p);

/*
 * Send datagrams m[0..cnt) of socket fd, in order: the first ones as frames, as many as the
 * port can carry; returns how many went (each taken by the kernel: its whole length sent).
 * *skip is then the number of messages after them that must go by the kernel's path, counted
 * by reason in fb[MS__XDP_*]: the caller sends m[ret .. ret + *skip) itself (with sendmmsg),
 * then calls again for the rest, so that the order holds. ret + *skip is never 0 (unless
 * cnt is). m[k].msg_hdr: msg_name / msg_namelen (NULL: the socket's peer), msg_iov /
 * msg_iovlen; a message with msg_control is not carried. fdgen: the caller's generation of
 * the descriptor number, changed whenever fd may name another socket or its options may have
 * changed (what the port read of the socket is kept until then: the caller must change it on
 * every setsockopt, connect, bind, shutdown or close it sees). flags: MSG_DONTWAIT: when no
 * frame is free, skip rather than wait for one (up to a second).
 *
 * Every frame is handed to the kernel before the call returns (a kick per call, as poll(2) on
 * the AF_XDP socket, the rtnetlink listener and, for a connected socket, the socket itself:
 * one system call that transmits, notices network changes and notices an error the socket
 * received, e.g. ICMP port unreachable, so that the socket's next message is skipped with
 * MS__XDP_ERROR and the kernel's path returns the error where it would have). After a pause
 * of more than 5 ms without a kick, the kernel's notifications are read before the first
 * frame is made (one more system call). Safe from several threads (one at a time); a forked
 * child, or a signal handler re-entering on a thread already inside, gets everything skipped.
 * Counts are added to *c.
 */
uint32_t ms__xport_send(struct ms__xport *p, int fd, uint32_t fdgen, const struct mmsghdr *m,
			uint32_t cnt, int flags, uint32_t *skip, uint64_t fb[MS__XDP_NREASONS],
			struct ms__xport_counts *c);

#endif
