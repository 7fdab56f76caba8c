/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net.h"

static const char *const names[K_NKINDS] = {
	[K_UDP4] = "udp4",           [K_UDP6] = "udp6",         [K_UDP4_CONN] = "udp4-connected",
	[K_UDP6_CONN] = "udp6-connected", [K_UNIX] = "unix-dgram", [K_UNIX_CONN] = "unix-dgram-connected",
	[K_SEQPACKET] = "unix-seqpacket", [K_TCP4] = "tcp4",       [K_TCP6] = "tcp6",
};

const char *kind_name(enum kind k)
{
	return names[k];
}

void net_raise_nofile(unsigned need)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur >= need)
		return;
	if (rl.rlim_max < need) {
		struct rlimit r2 = { need, need };
		if (!setrlimit(RLIMIT_NOFILE, &r2))
			return;
	}
	rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/*
 * The ephemeral port range (28,232 ports by default) is shared by every process of a network
 * namespace. A test that holds thousands of ports fails with EADDRINUSE where other test runs
 * hold the rest, and a receiver's port, once another program's receiver there has closed, gets
 * that program's datagrams (seen: "datagram of 4 bytes, expected 64" on a machine running
 * other suites): failures of the machine, not of the library. In a namespace of its own the
 * range, the loopback and the traffic are the test's alone.
 */
void net_private_netns(const char *prog)
{
	if (unshare(CLONE_NEWNET)) {
		fprintf(stderr, "# %s: in the shared network namespace (unshare: %s): other "
			"programs' ports and datagrams can reach it\n", prog, strerror(errno));
		return;
	}
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr)) {
		fprintf(stderr, "%s: lo in a new network namespace: %s\n", prog, strerror(errno));
		exit(1);
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr)) {
		fprintf(stderr, "%s: bringing lo up in a new network namespace: %s\n", prog,
			strerror(errno));
		exit(1);
	}
	close(s);
}

bool net_have_ipv6(void)
{
	int s = socket(AF_INET6, SOCK_DGRAM, 0);
	if (s < 0)
		return false;
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	bool ok = bind(s, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(s);
	return ok;
}

void net_init(struct net *nt)
{
	memset(nt, 0, sizeof(*nt));
	nt->shared[0] = nt->shared[1] = nt->shared[2] = -1;
	nt->listen4 = nt->listen6 = -1;
}

static void loopback(int family, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		*len = sizeof(*a);
	}
}

/* A bound socket on loopback; its address in *ss. */
static int bound(int family, int type, struct sockaddr_storage *ss, socklen_t *len)
{
	int s = socket(family, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	loopback(family, ss, len);
	if (bind(s, (struct sockaddr *)ss, *len) || getsockname(s, (struct sockaddr *)ss, len)) {
		int e = -errno;
		close(s);
		return e;
	}
	return s;
}

static int shared_sender(struct net *nt, int family)
{
	int k = family == AF_INET ? 0 : family == AF_INET6 ? 1 : 2;
	if (nt->shared[k] < 0) {
		nt->shared[k] = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		/* An AF_UNIX datagram stays charged to the sender until it is read, and the tests
		 * read only after the fan-out: room for thousands of them (FORCE needs root). */
		int big = 64 << 20;
		if (setsockopt(nt->shared[k], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)))
			setsockopt(nt->shared[k], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	}
	return nt->shared[k];
}

static int listener(struct net *nt, int family)
{
	int *l = family == AF_INET ? &nt->listen4 : &nt->listen6;
	if (*l >= 0)
		return *l;
	struct sockaddr_storage ss;
	socklen_t len;
	int s = bound(family, SOCK_STREAM, &ss, &len);
	if (s < 0)
		return s;
	if (listen(s, 4096)) {
		close(s);
		return -errno;
	}
	*l = s;
	return s;
}

static int make(struct net *nt, enum kind k, struct endpoint *e)
{
	static unsigned counter;
	int family = (k == K_UDP6 || k == K_UDP6_CONN || k == K_TCP6) ? AF_INET6 : AF_INET;
	int sv[2];

	memset(e, 0, sizeof(*e));
	e->kind = k;
	e->rx = e->tx = -1;
	switch (k) {
	case K_UDP4:
	case K_UDP6:
		e->rx = bound(family, SOCK_DGRAM, &e->addr, &e->addrlen);
		e->tx = shared_sender(nt, family);
		break;
	case K_UDP4_CONN:
	case K_UDP6_CONN:
		e->rx = bound(family, SOCK_DGRAM, &e->addr, &e->addrlen);
		if (e->rx < 0)
			break;
		e->tx = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		e->own_tx = true;
		if (e->tx >= 0 && connect(e->tx, (struct sockaddr *)&e->addr, e->addrlen))
			return -errno;
		e->addrlen = 0;
		break;
	case K_UNIX: {
		struct sockaddr_un *a = (struct sockaddr_un *)&e->addr;
		a->sun_family = AF_UNIX;
		/* Abstract names: nothing to clean up on disk. */
		int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "ms-test-%d-%u", getpid(),
				 counter++);
		e->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
		e->rx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (e->rx >= 0 && bind(e->rx, (struct sockaddr *)a, e->addrlen))
			return -errno;
		e->tx = shared_sender(nt, AF_UNIX);
		break;
	}
	case K_UNIX_CONN:
	case K_SEQPACKET:
		if (socketpair(AF_UNIX, (k == K_UNIX_CONN ? SOCK_DGRAM : SOCK_SEQPACKET) | SOCK_CLOEXEC,
			       0, sv))
			return -errno;
		e->rx = sv[0];
		e->tx = sv[1];
		e->own_tx = true;
		break;
	case K_TCP4:
	case K_TCP6: {
		int l = listener(nt, family);
		if (l < 0)
			return l;
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		getsockname(l, (struct sockaddr *)&ss, &len);
		e->tx = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		e->own_tx = true;
		if (e->tx < 0 || connect(e->tx, (struct sockaddr *)&ss, len))
			return -errno;
		e->rx = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		int one = 1;
		setsockopt(e->tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		break;
	}
	default:
		return -EINVAL;
	}
	if (e->rx < 0)
		return e->rx < -1 ? e->rx : -errno;
	if (e->tx < 0)
		return -errno;
	return 0;
}

int net_add(struct net *nt, enum kind k, size_t n)
{
	if (nt->n + n > nt->cap) {
		size_t cap = (nt->n + n) * 2;
		struct endpoint *ep = realloc(nt->ep, cap * sizeof(*ep));
		if (!ep)
			return -ENOMEM;
		nt->ep = ep;
		nt->cap = cap;
	}
	for (size_t i = 0; i < n; i++) {
		int err = make(nt, k, &nt->ep[nt->n]);
		nt->n++; /* counted even on error, so net_free closes what was opened */
		if (err)
			return err;
	}
	return 0;
}

int net_join(struct net *nt, struct ms_group *g, size_t first)
{
	for (size_t i = first; i < nt->n; i++) {
		struct endpoint *e = &nt->ep[i];
		struct ms_dest d = { .fd = e->tx,
				     .addrlen = e->addrlen,
				     .addr = e->addrlen ? (struct sockaddr *)&e->addr : NULL };
		int id = ms_group_add(g, &d);
		if (id < 0)
			return id;
		e->id = id;
	}
	return 0;
}

void net_free(struct net *nt)
{
	for (size_t i = 0; i < nt->n; i++) {
		struct endpoint *e = &nt->ep[i];
		if (e->rx >= 0)
			close(e->rx);
		if (e->own_tx && e->tx >= 0)
			close(e->tx);
	}
	for (int k = 0; k < 3; k++)
		if (nt->shared[k] >= 0)
			close(nt->shared[k]);
	if (nt->listen4 >= 0)
		close(nt->listen4);
	if (nt->listen6 >= 0)
		close(nt->listen6);
	free(nt->ep);
	net_init(nt);
}

void make_payload(unsigned char *buf, size_t len, unsigned round)
{
	uint32_t x = 2166136261u ^ round;
	for (size_t i = 0; i < len; i++) {
		x = x * 16777619u + (uint32_t)i;
		buf[i] = (unsigned char)(x >> 24);
	}
}

static bool is_stream(enum kind k)
{
	return k == K_TCP4 || k == K_TCP6;
}

bool expect_one(const struct endpoint *e, const void *msg, size_t len, int timeout_ms)
{
	unsigned char *got = malloc(len + 1);
	size_t have = 0;
	bool ok = false;

	if (!got)
		return false;
	while (have < len || (!is_stream(e->kind) && have == 0)) {
		struct pollfd p = { .fd = e->rx, .events = POLLIN };
		if (poll(&p, 1, timeout_ms) <= 0) {
			fprintf(stderr, "  %s endpoint id %d: nothing arrived (%zu of %zu bytes)\n",
				kind_name(e->kind), e->id, have, len);
			goto out;
		}
		/* MSG_TRUNC reports a datagram's real length; on a stream it would discard data. */
		ssize_t r = recv(e->rx, got + have, len + 1 - have,
				 MSG_DONTWAIT | (is_stream(e->kind) ? 0 : MSG_TRUNC));
		if (r < 0) {
			fprintf(stderr, "  %s endpoint id %d: recv: %s\n", kind_name(e->kind), e->id,
				strerror(errno));
			goto out;
		}
		if (!is_stream(e->kind)) {
			if ((size_t)r != len) {
				fprintf(stderr, "  %s endpoint id %d: datagram of %zd bytes, expected %zu\n",
					kind_name(e->kind), e->id, r, len);
				goto out;
			}
			have = len;
			break;
		}
		if (r == 0) {
			fprintf(stderr, "  %s endpoint id %d: stream closed\n", kind_name(e->kind), e->id);
			goto out;
		}
		have += (size_t)r;
	}
	if (have != len || memcmp(got, msg, len)) {
		fprintf(stderr, "  %s endpoint id %d: content differs\n", kind_name(e->kind), e->id);
		goto out;
	}
	ok = expect_none(e);
out:
	free(got);
	return ok;
}

bool expect_none(const struct endpoint *e)
{
	char c;
	ssize_t r = recv(e->rx, &c, 1, MSG_DONTWAIT | MSG_PEEK);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return true;
	fprintf(stderr, "  %s endpoint id %d: unexpected extra data (recv returned %zd)\n",
		kind_name(e->kind), e->id, r);
	return false;
}

long net_find(const struct net *nt, int id)
{
	for (size_t i = 0; i < nt->n; i++)
		if (nt->ep[i].id == id)
			return (long)i;
	return -1;
}

int net_run_child(void (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		fn();
		fflush(NULL);
		_exit(0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

enum ms_backend net_backend_arg(int argc, char **argv, struct ms_config cfg, char *line,
				size_t cap)
{
	int b = argc == 2 ? ms_backend_from_name(argv[1]) : -1;
	if (b <= 0) {
		fprintf(stderr, "usage: %s loop|sendmmsg|io_uring\n", argv[0]);
		exit(2);
	}
	cfg.size = sizeof(cfg);
	cfg.backend = (enum ms_backend)b;
	cfg.flags |= MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV;
	struct ms_ctx *probe;
	int err = ms_ctx_new(&probe, &cfg);
	if (err) {
		printf("backend %s unavailable here (%s): skipped\n", argv[1], ms_strerror(err));
		exit(77);
	}
	if (line)
		ms_ctx_describe(probe, line, cap);
	ms_ctx_free(probe);
	return (enum ms_backend)b;
}
