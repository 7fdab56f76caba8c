/* SPDX-License-Identifier: MIT */
/* Contexts: configuration, backend choice, counters. No sockets are touched here. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CONFIG_SIZE_V0 sizeof(struct ms_config) /* the first released layout */
#define CONFIG_SIZE_MAX 4096u
#define QUEUE_DEPTH_DEFAULT 4096u
#define QUEUE_DEPTH_MAX 32768u /* the kernel's IORING_MAX_ENTRIES */

/*
 * Preference order, walked by MS_BACKEND_AUTO and by fallbacks. CPU ns per destination
 * (process CPU time, so kernel work counts), 64-byte datagrams, N = 256, medians of 15
 * interleaved runs, Linux 6.18 on 2 vCPUs, sent into a veth whose peer is down (the sender's
 * cost alone; the loopback sink gives the same order):
 *
 *                              loop        io_uring      sendmmsg
 *   one unconnected socket     1420 (1.00) 1518 (1.07)   1573 (1.11)
 *   256 connected sockets      1106 (1.00) 1115 (1.01)   1425 (1.29)
 *
 * A raw sendto loop, raw sendmmsg and raw sendmsg loop measured the same way give 1422, 1573
 * and 1632: the kernel's msghdr path costs more per datagram than the system call that
 * sendmmsg saves, and the library adds nothing measurable over the raw calls. So the plain
 * loop leads; io_uring (one io_uring_enter per fan-out, any number of sockets) comes next,
 * and sendmmsg last. Kernels with costlier system-call entry can reverse this: measure with
 * multisend-bench and choose a backend explicitly.
 */
static const struct ms__backend *const preference[] = {
	&ms__backend_loop,
#ifdef MS_HAVE_LIBURING
	&ms__backend_iouring,
#endif
	&ms__backend_sendmmsg,
};
#define NBACKENDS (sizeof(preference) / sizeof(preference[0]))

/* ---- probes, once per process --------------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_err[NBACKENDS];
static const char *probe_why[NBACKENDS];

static void probe_all(void)
{
	for (size_t k = 0; k < NBACKENDS; k++) {
		if (!preference[k]->probe)
			continue;
		const char *why = "probe failed";
		probe_err[k] = preference[k]->probe(&why);
		if (probe_err[k])
			probe_why[k] = why;
	}
}

/* ---- small public helpers ------------------------------------------------------------------- */

unsigned ms_version(void)
{
	return MS_VERSION_NUMBER;
}

const char *ms_version_string(void)
{
	return MS_VERSION_STRING;
}

const char *ms_backend_name(enum ms_backend b)
{
	switch (b) {
	case MS_BACKEND_AUTO:
		return "auto";
	case MS_BACKEND_LOOP:
		return "loop";
	case MS_BACKEND_SENDMMSG:
		return "sendmmsg";
	case MS_BACKEND_IO_URING:
		return "io_uring";
	}
	return NULL;
}

int ms_backend_from_name(const char *name)
{
	for (int b = MS_BACKEND_AUTO; name && b <= MS_BACKEND_IO_URING; b++)
		if (!strcmp(name, ms_backend_name((enum ms_backend)b)))
			return b;
	return -EINVAL;
}

const char *ms_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err == 0)
		return "Success";
	const char *s = strerrordesc_np(err);
	return s ? s : "Unknown error";
}

/* ---- environment ---------------------------------------------------------------------------- */

static bool env_true(const char *name)
{
	const char *v = secure_getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

static bool warned_env; /* the bad MULTISEND_BACKEND warning, once per process */

static const char *const no_env[] = {
	[MS_BACKEND_LOOP] = "MULTISEND_NO_LOOP",
	[MS_BACKEND_SENDMMSG] = "MULTISEND_NO_SENDMMSG",
	[MS_BACKEND_IO_URING] = "MULTISEND_NO_IO_URING",
};
static const char *const no_env_why[] = {
	[MS_BACKEND_LOOP] = "disabled by MULTISEND_NO_LOOP",
	[MS_BACKEND_SENDMMSG] = "disabled by MULTISEND_NO_SENDMMSG",
	[MS_BACKEND_IO_URING] = "disabled by MULTISEND_NO_IO_URING",
};

/* ---- contexts ------------------------------------------------------------------------------- */

static int copy_config(struct ms_config *c, const struct ms_config *cfg)
{
	memset(c, 0, sizeof(*c));
	if (!cfg)
		return 0;
	if (cfg->size < CONFIG_SIZE_V0 || cfg->size > CONFIG_SIZE_MAX)
		return -EINVAL;
	/* A newer caller's fields that this library does not know must be unused (zero). */
	const unsigned char *tail = (const unsigned char *)cfg;
	for (size_t k = sizeof(*c); k < cfg->size; k++)
		if (tail[k])
			return -EINVAL;
	memcpy(c, cfg, cfg->size < sizeof(*c) ? cfg->size : sizeof(*c));
	if (c->flags & ~MS_CFG_ALL_FLAGS)
		return -EINVAL;
	if (c->backend > MS_BACKEND_IO_URING)
		return -EINVAL;
	if (c->queue_depth > QUEUE_DEPTH_MAX)
		return -EINVAL;
	return 0;
}

struct choice {
	const char *skipped[MS_BACKEND_IO_URING + 1]; /* why each backend was not used */
	char init_why[MS_BACKEND_IO_URING + 1][96];
};

static int try_backend(struct ms_ctx *ctx, size_t k, struct choice *ch)
{
	const struct ms__backend *be = preference[k];
	if (ch->skipped[be->id])
		return -ENOTSUP;
	ctx->be = be;
	int err = be->ctx_init ? be->ctx_init(ctx) : 0;
	if (err) {
		ctx->be = NULL;
		snprintf(ch->init_why[be->id], sizeof(ch->init_why[be->id]), "setup failed: %s",
			 ms_strerror(err));
		ch->skipped[be->id] = ch->init_why[be->id];
	}
	return err;
}

int ms_ctx_describe(const struct ms_ctx *ctx, char *buf, size_t len)
{
	char desc[256] = "";
	if (!ctx || (!buf && len))
		return -EINVAL;
	if (ctx->be->describe)
		ctx->be->describe(ctx, desc, sizeof(desc));
	return snprintf(buf, len, "%s%s%s", ctx->be->name, *desc ? ": " : "", desc);
}

static void show(const struct ms_ctx *ctx, enum ms_backend asked, bool from_env,
		 const struct choice *ch)
{
	char desc[320];
	ms_ctx_describe(ctx, desc, sizeof(desc));
	fprintf(stderr, "libmultisend: backend %s (asked for %s%s)\n", desc,
		ms_backend_name(asked), from_env ? " by MULTISEND_BACKEND" : "");
	for (int b = MS_BACKEND_LOOP; b <= MS_BACKEND_IO_URING; b++)
		if (ch->skipped[b] && b != (int)ctx->be->id)
			fprintf(stderr, "libmultisend:   %s skipped: %s\n",
				ms_backend_name((enum ms_backend)b), ch->skipped[b]);
}

int ms_ctx_new(struct ms_ctx **out, const struct ms_config *cfg)
{
	struct ms_config c;
	int err;

	if (!out)
		return -EINVAL;
	if ((err = copy_config(&c, cfg)))
		return err;

	struct choice ch;
	memset(&ch, 0, sizeof(ch));
	bool use_env = !(c.flags & MS_CFG_IGNORE_ENV);
	enum ms_backend want = (enum ms_backend)c.backend;

#ifndef MS_HAVE_LIBURING
	ch.skipped[MS_BACKEND_IO_URING] = "not built (liburing was not found at build time)";
#endif
	pthread_once(&probe_once, probe_all);
	for (size_t k = 0; k < NBACKENDS; k++)
		if (probe_err[k])
			ch.skipped[preference[k]->id] = probe_why[k];

	if (use_env) {
		const char *v = secure_getenv("MULTISEND_BACKEND");
		if (v && *v) {
			int b = ms_backend_from_name(v);
			if (b >= 0)
				want = (enum ms_backend)b;
			else if (!__atomic_exchange_n(&warned_env, true, __ATOMIC_RELAXED))
				/* An operator's typo must not pass silently, nor flood stderr. */
				fprintf(stderr, "libmultisend: MULTISEND_BACKEND=%s is not one of "
						"auto, loop, sendmmsg, io_uring; ignored\n", v);
		}
		for (int b = MS_BACKEND_LOOP; b <= MS_BACKEND_IO_URING; b++)
			if (env_true(no_env[b]) && !ch.skipped[b])
				ch.skipped[b] = no_env_why[b];
	}

	struct ms_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->flags = c.flags;
	ctx->queue_depth = c.queue_depth ? c.queue_depth : QUEUE_DEPTH_DEFAULT;

	err = -ENOTSUP;
	if (want != MS_BACKEND_AUTO) {
		for (size_t k = 0; k < NBACKENDS; k++)
			if (preference[k]->id == want)
				err = try_backend(ctx, k, &ch);
		if (err && (c.flags & MS_CFG_NO_FALLBACK)) {
			free(ctx);
			return err == -ENOTSUP || err == -ENOSYS ? -ENOTSUP : err;
		}
	}
	for (size_t k = 0; err && k < NBACKENDS; k++)
		err = try_backend(ctx, k, &ch);
	if (err) {
		free(ctx);
		return -ENOTSUP;
	}
	if (use_env && env_true("MULTISEND_SHOW_BACKEND"))
		show(ctx, want, want != (enum ms_backend)c.backend, &ch);
	*out = ctx;
	return 0;
}

void ms_ctx_free(struct ms_ctx *ctx)
{
	if (!ctx)
		return;
	if (ctx->be->ctx_fini)
		ctx->be->ctx_fini(ctx);
	free(ctx);
}

enum ms_backend ms_ctx_backend(const struct ms_ctx *ctx)
{
	return ctx ? ctx->be->id : MS_BACKEND_AUTO;
}

int ms_ctx_stats(const struct ms_ctx *ctx, struct ms_stats *out)
{
	if (!ctx || !out || out->size < 8)
		return -EINVAL;
	struct ms_stats s;
	memset(&s, 0, sizeof(s));
	s.size = out->size;
	s.backend = ctx->be->id;
	s.fanouts = ctx->c.fanouts;
	s.dests_attempted = ctx->c.attempted;
	s.dests_accepted = ctx->c.accepted;
	s.dests_partial = ctx->c.partial;
	s.dests_failed = ctx->c.failed;
	s.bytes = ctx->c.bytes;
	s.syscalls = ctx->c.syscalls;
	s.err_again = ctx->c.err[MS__ERR_AGAIN];
	s.err_nobufs = ctx->c.err[MS__ERR_NOBUFS];
	s.err_msgsize = ctx->c.err[MS__ERR_MSGSIZE];
	s.err_unreach = ctx->c.err[MS__ERR_UNREACH];
	s.err_conn = ctx->c.err[MS__ERR_CONN];
	s.err_badf = ctx->c.err[MS__ERR_BADF];
	s.err_other = ctx->c.err[MS__ERR_OTHER];
	s.slow_queued = ctx->c.slow_queued;
	s.slow_dropped = ctx->c.slow_dropped;
	s.slow_removed = ctx->c.slow_removed;
	s.backlog_bytes = ctx->c.backlog_bytes;
	s.backlog_discarded = ctx->c.backlog_discarded;
	memcpy(out, &s, out->size < sizeof(s) ? out->size : sizeof(s));
	return 0;
}
