/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netns.h"
#include "workload.h"

static const char *const names[V_COUNT] = {
	[V_RAW] = "raw-sendto",
	[V_LOOP] = "loop",
	[V_SENDMMSG] = "sendmmsg",
	[V_IO_URING] = "io_uring",
};

static const enum ms_backend lib_backend[V_COUNT] = {
	[V_LOOP] = MS_BACKEND_LOOP,
	[V_SENDMMSG] = MS_BACKEND_SENDMMSG,
	[V_IO_URING] = MS_BACKEND_IO_URING,
};

static const char *const plain_detail[V_COUNT] = {
	[V_LOOP] = "loop: the library's plain loop, one sendto(2) per destination",
	[V_SENDMMSG] = "sendmmsg: one sendmmsg(2) per socket per 1024 destinations",
	[V_IO_URING] = "io_uring",
};

const char *variant_name(enum variant_id v)
{
	return v < V_COUNT ? names[v] : "?";
}

int variant_from_name(const char *name)
{
	for (int v = 0; v < V_COUNT; v++)
		if (!strcmp(name, names[v]))
			return v;
	return -EINVAL;
}

/* The public API does not say why a backend is unavailable (MULTISEND_SHOW_BACKEND prints it
 * to stderr, but the bench ignores the environment so that labels stay true), so give the
 * causes we can see ourselves. */
static void why_unavailable(enum variant_id v, int err, char *buf, size_t len)
{
	if (v == V_IO_URING && err == -ENOTSUP) {
#ifndef BENCH_TREE_HAS_LIBURING
		snprintf(buf, len, "unavailable: libmultisend was built without liburing");
#else
		char dis[16] = "";

		if (!read_file("/proc/sys/kernel/io_uring_disabled", dis, sizeof(dis)) &&
		    strcmp(dis, "0"))
			snprintf(buf, len, "unavailable: kernel.io_uring_disabled=%s", dis);
		else
			snprintf(buf, len,
				 "unavailable: the kernel refuses io_uring (older than 5.6, or a "
				 "seccomp filter, as in container runtimes); "
				 "MULTISEND_SHOW_BACKEND=1 MULTISEND_BACKEND=io_uring on any "
				 "libmultisend program prints the library's reason");
#endif
		return;
	}
	snprintf(buf, len, "unavailable: ms_ctx_new failed: %s", ms_strerror(err));
}

int variants_open(struct session *s)
{
	int any = 0;

	for (int v = 0; v < V_COUNT; v++) {
		struct variant *x = &s->var[v];

		x->name = names[v];
		if (!x->wanted)
			continue;
		if (v == V_RAW) {
			x->available = true;
			snprintf(x->detail, sizeof(x->detail),
				 "the baseline: a plain loop of sendto(2), one per destination, no "
				 "library");
			any++;
			continue;
		}
		/* Exactly this backend, whatever MULTISEND_* says: the label must be true. */
		struct ms_config cfg = {
			.size = sizeof(cfg),
			.backend = lib_backend[v],
			.flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV,
		};
		int err = ms_ctx_new(&x->ctx, &cfg);

		if (err) {
			x->ctx = NULL;
			why_unavailable((enum variant_id)v, err, x->detail, sizeof(x->detail));
			continue;
		}
		if (ms_ctx_backend(x->ctx) != lib_backend[v]) {
			snprintf(x->detail, sizeof(x->detail), "unavailable: the library chose %s",
				 ms_backend_name(ms_ctx_backend(x->ctx)));
			ms_ctx_free(x->ctx);
			x->ctx = NULL;
			continue;
		}
		/* The library describes set-ups that have options (io_uring's ring); for the others
		 * say what multisend.h promises about their system calls. */
		if (ms_ctx_describe(x->ctx, x->detail, sizeof(x->detail)) < 0 ||
		    !strcmp(x->detail, names[v]))
			snprintf(x->detail, sizeof(x->detail), "%s", plain_detail[v]);
		x->available = true;
		any++;
	}
	return any ? 0 : -ENOTSUP;
}

void variants_close(struct session *s)
{
	for (int v = 0; v < V_COUNT; v++) {
		ms_ctx_free(s->var[v].ctx);
		s->var[v].ctx = NULL;
	}
}

bool variant_stats(const struct session *s, enum variant_id v, struct ms_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return s->var[v].ctx && !ms_ctx_stats(s->var[v].ctx, st);
}


uint64_t rig_fds_needed(const struct session *s, uint64_t n)
{
	uint64_t rx = s->o->sink == SINK_NETNS_DROP ? 0 : n;

	return rx + (s->o->connected ? n : 1) + 64;
}

static int sender_socket(struct session *s, char *err, size_t errlen)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(err, errlen, "sending socket: %s", strerror(errno));
		return -errno;
	}
	if (s->ns) {
		int e = netns_check_socket(s->ns, fd);

		if (e) {
			/* Never send from a socket outside the namespace: refuse the whole run. */
			snprintf(err, errlen, "sending socket is not in namespace %s (%s); refusing",
				 s->ns->name, strerror(-e));
			close(fd);
			return e;
		}
	}
	return fd;
}

/* The local port of a sending socket (network byte order), binding it to an ephemeral port
 * first if it has none yet: what the kernel would do at its first send. 0 on failure. */
static uint16_t sender_port(int fd, char *err, size_t errlen)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len))
		goto fail;
	if (a.sin_port)
		return a.sin_port;
	a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	len = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		goto fail;
	return a.sin_port;
fail:
	snprintf(err, errlen, "the sending socket's port: %s", strerror(errno));
	return 0;
}

void rig_close(struct rig *r)
{
	for (int v = 0; v < V_COUNT; v++)
		ms_group_free(r->g[v]);
	if (r->conn)
		for (uint64_t i = 0; i < r->n; i++)
			if (r->conn[i] >= 0)
				close(r->conn[i]);
	free(r->conn);
	if (r->shared >= 0)
		close(r->shared);
	sink_close(r->sink);
	free(r->msg);
	memset(r, 0, sizeof(*r));
	r->shared = -1;
}

int rig_open(struct session *s, struct rig *r, uint64_t n, uint64_t size, char *err,
	     size_t errlen)
{
	int ret;

	memset(r, 0, sizeof(*r));
	r->shared = -1;
	r->n = n;
	r->size = size;
	r->connected = s->o->connected;
	if (rig_fds_needed(s, n) > s->env.nofile) {
		snprintf(err, errlen,
			 "needs about %llu file descriptors, RLIMIT_NOFILE allows %llu (raise the "
			 "hard limit, e.g. ulimit -Hn)",
			 (unsigned long long)rig_fds_needed(s, n), (unsigned long long)s->env.nofile);
		return -EMFILE;
	}
	ret = sink_open(&r->sink, s->o->sink, n, size, s->o->cpu, s->o->verify_payload, err,
			errlen);
	if (ret)
		goto fail;
	r->dests = sink_dests(r->sink);
	r->msg = malloc(size);
	if (!r->msg) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	msg_fill(r->msg, size);

	if (!r->connected) {
		r->shared = sender_socket(s, err, errlen);
		if (r->shared < 0) {
			ret = r->shared;
			goto fail;
		}
	} else {
		r->conn = malloc(n * sizeof(*r->conn));
		if (!r->conn) {
			ret = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		for (uint64_t i = 0; i < n; i++)
			r->conn[i] = -1;
		for (uint64_t i = 0; i < n; i++) {
			r->conn[i] = sender_socket(s, err, errlen);
			if (r->conn[i] < 0) {
				ret = r->conn[i];
				goto fail;
			}
			if (connect(r->conn[i], (const struct sockaddr *)&r->dests[i],
				    sizeof(r->dests[i]))) {
				ret = -errno;
				snprintf(err, errlen, "connect: %s", strerror(errno));
				goto fail;
			}
		}
	}

	/* Deliver: tell the receivers which socket each destination's datagrams come from, so
	 * they can tell ours from what other programs send to the same ports. */
	for (uint64_t i = 0; s->o->sink == SINK_DELIVER && i < n; i++) {
		uint16_t port = sender_port(r->connected ? r->conn[i] : r->shared, err, errlen);

		if (!port) {
			ret = -EADDRNOTAVAIL;
			goto fail;
		}
		sink_expect_source(r->sink, i, port);
	}

	for (int v = V_LOOP; v < V_COUNT; v++) {
		if (!s->var[v].available)
			continue;
		if ((ret = ms_group_new(s->var[v].ctx, &r->g[v]))) {
			snprintf(err, errlen, "ms_group_new: %s", ms_strerror(ret));
			goto fail;
		}
		for (uint64_t i = 0; i < n; i++) {
			struct ms_dest d = { .fd = r->shared, .addrlen = sizeof(r->dests[i]),
					     .addr = (const struct sockaddr *)&r->dests[i] };

			if (r->connected)
				d = (struct ms_dest){ .fd = r->conn[i], .addrlen = 0, .addr = NULL };
			ret = ms_group_add(r->g[v], &d);
			if (ret < 0) {
				snprintf(err, errlen, "ms_group_add (%s): %s", variant_name(v),
					 ms_strerror(ret));
				goto fail;
			}
		}
	}
	return 0;
fail:
	rig_close(r);
	return ret;
}

static inline void stamp(struct rig *r)
{
	r->seq++;
	if (r->size >= sizeof(struct msg_head))
		memcpy(r->msg, &r->seq, sizeof(r->seq));
}

/* The baseline, as a user would write it: nothing hoisted, nothing batched. */
static uint64_t send_raw(struct rig *r, uint64_t count)
{
	const size_t len = r->size;
	uint64_t failed = 0;

	for (uint64_t k = 0; k < count; k++) {
		stamp(r);
		if (r->connected) {
			for (uint64_t i = 0; i < r->n; i++)
				if (sendto(r->conn[i], r->msg, len, 0, NULL, 0) != (ssize_t)len)
					failed++;
		} else {
			for (uint64_t i = 0; i < r->n; i++)
				if (sendto(r->shared, r->msg, len, 0,
					   (const struct sockaddr *)&r->dests[i],
					   sizeof(r->dests[i])) != (ssize_t)len)
					failed++;
		}
	}
	return failed;
}

static uint64_t send_lib(struct rig *r, struct ms_group *g, uint64_t count)
{
	uint64_t failed = 0;

	for (uint64_t k = 0; k < count; k++) {
		stamp(r);
		int ok = ms_send(g, r->msg, r->size, 0, NULL);

		failed += ok < 0 ? r->n : r->n - (uint64_t)ok;
	}
	return failed;
}

uint64_t rig_send(struct rig *r, enum variant_id v, uint64_t count)
{
	uint64_t failed = v == V_RAW ? send_raw(r, count) : send_lib(r, r->g[v], count);

	r->pending += count;
	r->accepted += count * r->n - failed;
	return failed;
}
