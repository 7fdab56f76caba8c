/* SPDX-License-Identifier: MIT */
/*
 * The netns-drop sink's private network namespace.
 *
 * netns_create (main thread, root) makes a uniquely named namespace
 * "msbench-<PID namespace inode>-<pid>", held by a lock file (netns.c) so that one a killed
 * bench left is known as such and removed by the next, with a
 * veth pair inside it: NETNS_DEV is up and has NETNS_LOCAL/24, its peer NETNS_PEER stays
 * down, and NETNS_REMOTE has a permanent neighbour entry to a locally administered MAC that
 * nothing owns. Every datagram sent to NETNS_REMOTE therefore leaves the UDP/IP stack
 * normally and is dropped by the veth driver (its peer is down): the sender pays its whole
 * path, and nothing is received anywhere. The addresses exist only inside the namespace; the
 * host's interfaces, routes and neighbours are never touched.
 *
 * The netns-xdp sink (ns->xdp) is the same namespace, addresses and neighbour entry with the
 * peer up, so that AF_XDP can transmit on NETNS_DEV; the peer drops every frame as it
 * arrives (see netns_describe for how).
 *
 * The sending thread enters it with netns_enter (setns(2), this thread only) before it opens
 * any socket, and netns_check_socket proves each sending socket lives there.
 * netns_destroy deletes it; main calls it on every exit path, including SIGINT/SIGTERM.
 */
#ifndef BENCH_NETNS_H
#define BENCH_NETNS_H

#include <stdbool.h>
#include <stddef.h>

#define NETNS_DEV "msb0"
#define NETNS_PEER "msb1"
#define NETNS_LOCAL "10.213.0.1"
#define NETNS_REMOTE "10.213.0.2"
#define NETNS_PREFIX "msbench-"
/* The sinks' destinations: NETNS_REMOTE, ports NETNS_FIRST_PORT + i (sink.c). */
#define NETNS_FIRST_PORT 10000u
/* NETNS_REMOTE's permanent neighbour entry: locally administered (bit 1 of the first octet),
 * so it can belong to no real card. */
#define NETNS_REMOTE_MAC "02:00:5e:10:00:02"

struct netns {
	char name[64];
	char path[128]; /* /run/netns/<name> */
	bool created;
	int lockfd; /* holds the name's lock (netns.c) while the namespace is ours; -1: none */
	unsigned mtu; /* the veth pair's MTU, set before netns_create (0: the kernel's, 1500) */
	/* netns-xdp, set before netns_create: the peer is up (an AF_XDP socket transmits only
	 * on a veth with carrier) and drops the frames on arrival (netns.c, PEER_XDP_DROP). */
	bool xdp;
	bool peer_prog; /* netns-xdp: an XDP_DROP program is attached to the peer */
};

/* Create it (with ns->mtu as set by the caller). Returns 0, or -errno with a reason in err. */
int netns_create(struct netns *ns, char *err, size_t errlen);
/* Move the calling thread into it and check that it is there. 0 or -errno. */
int netns_enter(const struct netns *ns);
/* 0 if socket fd belongs to the namespace, -EXDEV if it does not, other -errno on failure. */
int netns_check_socket(const struct netns *ns, int fd);
/* Delete it if it was created. 0 or -errno (the name stays for the message). */
int netns_destroy(struct netns *ns);
/* A one-line description for the environment header. */
void netns_describe(const struct netns *ns, char *buf, size_t len);

#endif
