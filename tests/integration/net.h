/* SPDX-License-Identifier: MIT */
/*
 * Real endpoints on loopback (127.0.0.1, ::1) and AF_UNIX for the integration tests: each one
 * is a receiving socket plus the destination the library sends to, and the helpers check that
 * what arrived is exactly one byte-identical copy.
 */
#ifndef MS_TEST_NET_H
#define MS_TEST_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "multisend.h"

enum kind {
	K_UDP4,      /* one shared unconnected IPv4 socket, one address per destination */
	K_UDP6,      /* the same on IPv6 */
	K_UDP4_CONN, /* one connected IPv4 UDP socket per destination */
	K_UDP6_CONN,
	K_UNIX,      /* one shared unconnected AF_UNIX datagram socket, abstract addresses */
	K_UNIX_CONN, /* a connected AF_UNIX datagram pair per destination */
	K_SEQPACKET, /* a connected AF_UNIX seqpacket pair per destination */
	K_TCP4,      /* a connected TCP stream per destination */
	K_TCP6,
	K_NKINDS
};

const char *kind_name(enum kind k);

struct endpoint {
	enum kind kind;
	int rx;      /* where the copy arrives */
	int tx;      /* the socket the library sends on */
	bool own_tx; /* tx belongs to this endpoint (not a shared socket) */
	struct sockaddr_storage addr; /* destination address for unconnected kinds */
	socklen_t addrlen;
	int id;      /* id in the group */
};

/* A set of endpoints and the shared senders they use. */
struct net {
	struct endpoint *ep;
	size_t n, cap;
	int shared[3]; /* unconnected senders: IPv4, IPv6, AF_UNIX (-1 until needed) */
	int listen4, listen6;
};

/* Raise RLIMIT_NOFILE so thousands of sockets fit (root may also raise the hard limit). */
void net_raise_nofile(unsigned need);
/* Where it may (root), move the process into a network namespace of its own with its loopback
 * up; elsewhere say so on stderr (prog names the program) and stay. Call before any socket or
 * thread. */
void net_private_netns(const char *prog);
/* The backend the test program's one argument names (loop, sendmmsg, io_uring), checked to
 * work here with cfg's other fields (its backend set, MS_CFG_NO_FALLBACK and
 * MS_CFG_IGNORE_ENV added): exits 2 on a bad argument and 77 (skipped) when the backend is
 * unavailable. line (cap bytes), if not NULL, gets the probe context's ms_ctx_describe. */
enum ms_backend net_backend_arg(int argc, char **argv, struct ms_config cfg, char *line,
				size_t cap);
bool net_have_ipv6(void);

void net_init(struct net *nt);
/* Add n endpoints of one kind; returns 0 or -errno. Does not add them to a group. */
int net_add(struct net *nt, enum kind k, size_t n);
/* Add every endpoint (from index first) to g, storing the ids; returns 0 or the first error. */
int net_join(struct net *nt, struct ms_group *g, size_t first);
void net_free(struct net *nt);

/* In a child: report and exit; the parent's test fails on the exit status. */
#define CHECK(cond)                                                                          \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			fflush(NULL);                                                        \
			_exit(1);                                                            \
		}                                                                            \
	} while (0)
#define CHECK_EQ(a, b)                                                                        \
	do {                                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);                           \
		if (a_ != b_) {                                                               \
			fprintf(stderr, "%s:%d: %s is %lld, expected %s = %lld\n", __FILE__,   \
				__LINE__, #a, a_, #b, b_);                                      \
			fflush(NULL);                                                         \
			_exit(1);                                                             \
		}                                                                             \
	} while (0)

/* Run fn in a forked child (which exits 0 when fn returns): its exit status (0 passed, 77
 * skipped, other failed), 128 + N when signal N killed it, -1 when fork failed. */
int net_run_child(void (*fn)(void));

/* Make a distinct message for round r. */
void make_payload(unsigned char *buf, size_t len, unsigned round);

/*
 * Check that endpoint e received exactly one copy of msg[0..len) and nothing else (waits up to
 * timeout_ms for it to arrive). Returns true, or false with a reason printed.
 */
bool expect_one(const struct endpoint *e, const void *msg, size_t len, int timeout_ms);
/* Check that nothing is waiting at endpoint e (after a send that must not reach it). */
bool expect_none(const struct endpoint *e);

/* Index of the endpoint with this id, or -1. */
long net_find(const struct net *nt, int id);

#endif
