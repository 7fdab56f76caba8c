/* SPDX-License-Identifier: MIT */
/* Contexts: configuration, backend choice, counters. No sockets are touched here. */
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "shm-format.h"

#define WORKERS_MAX 64u
#define OFFLOAD_KIB_MIN 64u
#define OFFLOAD_KIB_MAX 1048576u
#define SPIN_US_MAX 1000000u
#define CONFIG_SIZE_MAX 4096u
#define XDP_FRAMES_MIN 64u
#define XDP_FRAMES_MAX 65536u
#define XDP_FRAMES_DEFAULT 2048u /* 4 MiB at 2 KiB a frame: inside the usual 8 MiB RLIMIT_MEMLOCK */
#define QUEUE_DEPTH_DEFAULT 4096u
#define QUEUE_DEPTH_MAX 32768u /* the kernel's IORING_MAX_ENTRIES */
#define TS_SAMPLE_MAX 1000000000u
#define ZC_MIN_MAX 65536u /* one registered buffer */

/*
 * The fallback order for a backend asked for by name that is unavailable (unless
 * MS_CFG_NO_FALLBACK), and the order AUTO sets its backends up in (the first sends until AUTO
 * has measured them all: lib/modes/auto.c). It is no ranking: which backend costs least
 * depends on the host, the group's shape and size, and the load, which is why AUTO measures
 * (docs/performance.md has the figures of one machine).
 */
static const struct ms__backend *const preference[] = {
	&ms__backend_loop,
#ifdef MS_HAVE_LIBURING
	&ms__backend_iouring,
#endif
	&ms__backend_sendmmsg,
#ifdef MS_HAVE_KFANOUT
	/* Never a fallback either: it is set up only where an administrator attached the kernel
	 * fan-out and this process may open its pins (lib/be/kfanout/backend.c finds them). */
	&ms__backend_kfanout,
#endif
#ifdef MS_HAVE_XDP
	&ms__backend_xdp, /* last: never a fallback (it takes a NIC queue, and needs a name) */
#endif
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
	case MS_BACKEND_XDP:
		return "xdp";
	case MS_BACKEND_KFANOUT:
		return "kfanout";
	}
	return NULL;
}

int ms_backend_from_name(const char *name)
{
	for (int b = MS_BACKEND_AUTO; name && b <= MS__BACKEND_LAST; b++)
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

/*
 * s as a warning may print it: printable ASCII as it is, every other byte (control bytes, an
 * escape sequence's ESC, a newline that would forge a line of its own, bytes past 0x7e) and
 * the backslash itself as \xNN, so that what is printed reads back unambiguously; past max
 * bytes of s, the rest is left out and its length said. buf holds cap bytes, at least
 * MS__ESC_CAP(max). Returns buf.
 */
const char *ms__esc(char *buf, size_t cap, const char *s, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	size_t k = 0, i = 0;
	if (!cap)
		return buf;
	for (; s[i] && i < max && k + 5 < cap; i++) {
		const unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '\\') {
			buf[k++] = (char)c;
		} else {
			buf[k++] = '\\';
			buf[k++] = 'x';
			buf[k++] = hex[c >> 4];
			buf[k++] = hex[c & 15];
		}
	}
	buf[k] = '\0';
	if (s[i])
		snprintf(buf + k, cap - k, "... (%zu bytes)", i + strlen(s + i));
	return buf;
}

static bool env_true(const char *name)
{
	const char *v = secure_getenv(name);
	return v && *v && strcmp(v, "0") != 0;
}

static bool warned_env; /* the bad MULTISEND_BACKEND warning, once per process */
static bool warned_recheck; /* the same for MULTISEND_AUTO_RECHECK */

static const char *const no_env[] = {
	[MS_BACKEND_LOOP] = "MULTISEND_NO_LOOP",
	[MS_BACKEND_SENDMMSG] = "MULTISEND_NO_SENDMMSG",
	[MS_BACKEND_IO_URING] = "MULTISEND_NO_IO_URING",
	[MS_BACKEND_XDP] = "MULTISEND_NO_XDP",
	[MS_BACKEND_KFANOUT] = "MULTISEND_NO_KFANOUT",
};
static const char *const no_env_why[] = {
	[MS_BACKEND_LOOP] = "disabled by MULTISEND_NO_LOOP",
	[MS_BACKEND_SENDMMSG] = "disabled by MULTISEND_NO_SENDMMSG",
	[MS_BACKEND_IO_URING] = "disabled by MULTISEND_NO_IO_URING",
	[MS_BACKEND_XDP] = "disabled by MULTISEND_NO_XDP",
	[MS_BACKEND_KFANOUT] = "disabled by MULTISEND_NO_KFANOUT",
};

/* ---- published counters --------------------------------------------------------------------- */

/* The slot's counters, in the table's order (lib/core/counters.h); their names are what
 * multisend-stat shows. */
static const char *const counter_names[] = {
#define NAME(n, h) #n,
#define ERR_NAME(C, n, h) "err_" #n,
	MS__COUNTERS(NAME, ERR_NAME)
#undef NAME
#undef ERR_NAME
};
#define NCOUNTERS ((size_t)MS__NCOUNTERS)
_Static_assert(sizeof(counter_names) / sizeof(counter_names[0]) == MS__NCOUNTERS, "a name each");
static const char *const hist_names[MS__H_N] = {
	[MS__H_CALL_FIRST] = "call_first_ns",
	[MS__H_CALL_LAST] = "call_last_ns",
	[MS__H_FIRST_LAST] = "first_last_ns",
	[MS__H_DEST_LAG] = "dest_lag_ns",
};
_Static_assert(NCOUNTERS <= MS_SHM_COUNTERS && MS__H_N <= MS_SHM_HISTS, "fits a slot");

/* The values, in the table's order: the context's, and the pool's offload counts. */
static void counters_get(const struct ms_ctx *ctx, uint64_t v[NCOUNTERS])
{
	memcpy(v, ctx->c.v, sizeof(ctx->c.v));
	uint64_t o[3];
	ms__offload_counts(ctx, o);
	v[MS__K_offload_msgs] = o[0];
	v[MS__K_offload_waits] = o[1];
	v[MS__K_offload_refused] = o[2];
}

struct ms_shm_slot *ms__own_slot(struct ms_ctx *ctx)
{
	if (unlikely(ctx->pub &&
		     (ctx->slot_gen != __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED) ||
		      !ms__shm_here(ctx->pub_epoch))))
		/* A forked child using its parent's context: it never writes into its parent's
		 * file (which it does not even map: MADV_DONTFORK). fork(3) bumps ms__fork_gen;
		 * a child of _Fork(), syscall(SYS_fork) or clone() runs no atfork handler, and
		 * finds the epoch word wiped (lib/internal.h). */
		ctx->pub = NULL;
	return ctx->own;
}

/* The live-counter file's slot, written from the private slot (what is authoritative) and
 * never read: its sequence word comes from our own count, so a damaged file cannot make us
 * wait or report anything else. what: MIRROR_SENT (the five values ms__publish_sent changes),
 * MIRROR_SENT_KF (and the kernel fan-out's), MIRROR_COUNTERS, MIRROR_ALL (also the
 * histograms). */
enum { MIRROR_SENT, MIRROR_SENT_KF, MIRROR_COUNTERS, MIRROR_ALL };

/* The kernel fan-out's counters: what a clean call of a kfanout context changes beyond the
 * five (templates, clones, and destinations it sent by the kernel's path). */
static const unsigned kf_idx[] = {
#define MS__X_KIDX(n, h) MS__K_##n,
	MS__KF_COUNTERS(MS__X_KIDX)
#undef MS__X_KIDX
};

static __attribute__((noinline)) void mirror_to(struct ms_ctx *ctx, int what)
{
	struct ms_shm_slot *p = ctx->pub;
	const struct ms_shm_slot *o = ctx->own;

	/* The file was truncated under a store (private memory took its place), or made again
	 * since this context last wrote all its values: all of them, into the new file. */
	if (unlikely(ctx->pub_gen != ms__shm_gen()) && ms__shm_caught_up(&ctx->pub_gen))
		what = MIRROR_ALL;
	uint64_t seq = ctx->pub_seq | 1;
	__atomic_store_n(&p->seq, seq, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (what == MIRROR_SENT || what == MIRROR_SENT_KF) {
		static const unsigned idx[] = { MS__K_fanouts, MS__K_dests_attempted,
						MS__K_dests_accepted, MS__K_bytes, MS__K_syscalls };
		for (size_t k = 0; k < sizeof(idx) / sizeof(idx[0]); k++)
			__atomic_store_n(&p->counter[idx[k]], o->counter[idx[k]], __ATOMIC_RELAXED);
		for (size_t k = 0; what == MIRROR_SENT_KF && k < sizeof(kf_idx) / sizeof(kf_idx[0]);
		     k++)
			__atomic_store_n(&p->counter[kf_idx[k]], o->counter[kf_idx[k]],
					 __ATOMIC_RELAXED);
	} else {
		for (size_t k = 0; k < NCOUNTERS; k++)
			__atomic_store_n(&p->counter[k], o->counter[k], __ATOMIC_RELAXED);
		__atomic_store_n(&p->backend, o->backend, __ATOMIC_RELAXED);
	}
	if (what == MIRROR_ALL) {
		for (int h = 0; h < MS__H_N; h++) {
			const uint64_t *a = (const uint64_t *)&o->hist[h];
			uint64_t *b = (uint64_t *)&p->hist[h];
			for (size_t k = 0; k < sizeof(struct ms_hist) / 8; k++)
				__atomic_store_n(&b[k], a[k], __ATOMIC_RELAXED);
		}
		__atomic_store_n(&p->updated_ns, o->updated_ns, __ATOMIC_RELAXED);
	}
	ctx->pub_seq = seq + 1;
	__atomic_store_n(&p->seq, seq + 1, __ATOMIC_RELEASE);
}

/* (A test and a tail call when there is no file: the send path's usual case.) */
static inline void mirror(struct ms_ctx *ctx, int what)
{
	if (ctx->pub)
		mirror_to(ctx, what);
}

void ms__publish_counters(struct ms_ctx *ctx)
{
	struct ms_shm_slot *sl = ctx->own;
	uint64_t v[NCOUNTERS];

	counters_get(ctx, v);
	for (size_t k = 0; k < NCOUNTERS; k++)
		__atomic_store_n(&sl->counter[k], v[k], __ATOMIC_RELAXED);
	__atomic_store_n(&sl->backend, (uint32_t)ms_ctx_backend(ctx), __ATOMIC_RELAXED);
}

void ms__publish_sent(struct ms_ctx *ctx, bool kf)
{
	struct ms_shm_slot *sl = ms__own_slot(ctx);
	const struct ms__counters *c = &ctx->c;
	ms__shm_begin(&sl->seq);
	__atomic_store_n(&sl->counter[MS__K_fanouts], c->fanouts, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->counter[MS__K_dests_attempted], c->dests_attempted, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->counter[MS__K_dests_accepted], c->dests_accepted, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->counter[MS__K_bytes], c->bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->counter[MS__K_syscalls], c->syscalls, __ATOMIC_RELAXED);
	if (unlikely(kf))
		for (size_t k = 0; k < sizeof(kf_idx) / sizeof(kf_idx[0]); k++)
			__atomic_store_n(&sl->counter[kf_idx[k]], c->v[kf_idx[k]],
					 __ATOMIC_RELAXED);
	ms__shm_end(&sl->seq);
	mirror(ctx, kf ? MIRROR_SENT_KF : MIRROR_SENT);
}

void ms__publish(struct ms_ctx *ctx)
{
	struct ms_shm_slot *sl = ms__own_slot(ctx);
	ms__shm_begin(&sl->seq);
	ms__publish_counters(ctx);
	ms__shm_end(&sl->seq);
	mirror(ctx, MIRROR_COUNTERS);
}

void ms__publish_all(struct ms_ctx *ctx)
{
	ms__own_slot(ctx);
	mirror(ctx, MIRROR_ALL);
}

/* ms_ctx_snapshot's copies before it gives up on a writer that stays inside an update: with a
 * yield after the 64th, far longer than any update takes, and still a bounded time. */
#define SNAPSHOT_TRIES 100000u

static unsigned ctx_serial; /* names the slots: "ctx N backend" */
static bool warned_shm;     /* one warning per process for a file that cannot be used */

static int slot_setup(struct ms_ctx *ctx, const char *path)
{
	char name[MS_SHM_NAME];
	/* Always allocated: where this context publishes without a file, or after a fork. */
	int err;
	ctx->own = ms__zalloc(ctx, sizeof(*ctx->own), &err);
	if (!ctx->own)
		return err;
	ctx->own->ncounters = NCOUNTERS;
	ctx->own->nhists = MS__H_N;
	ctx->own->state = MS_SHM_LIVE;
	char expanded[4096];
	if (path && ms__shm_expand(expanded, sizeof(expanded), path)) {
		/* Only an environment value gets here (a bad cfg->stats_shm is -EINVAL): a
		 * program that knows nothing of the variable must not fail because of it. */
		if (!__atomic_exchange_n(&warned_shm, true, __ATOMIC_RELAXED))
			fprintf(stderr, "libmultisend: MULTISEND_STATS_SHM is empty or too long; "
					"live counters not published\n");
		path = NULL;
	}
	/* The name stays what it is for the context's life; the backend, which AUTO changes,
	 * is the slot's backend field. */
	snprintf(name, sizeof(name), "ctx %u", __atomic_add_fetch(&ctx_serial, 1, __ATOMIC_RELAXED));
	if (path) {
		err = 0;
		struct ms_shm_slot *sl = ms__shm_open(path, name, counter_names, NCOUNTERS,
						      hist_names, MS__H_N, &err);
		if (sl) {
			ctx->pub = sl;
			ctx->slot_gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
			ctx->pub_epoch = ms__shm_epoch();
			ctx->pub_gen = ms__shm_gen();
		} else if (!__atomic_exchange_n(&warned_shm, true, __ATOMIC_RELAXED)) {
			char e[MS__ESC_CAP(MS__ESC_MAX)];
			fprintf(stderr, "libmultisend: live counters not published in %s: %s\n",
				ms__esc(e, sizeof(e), path, MS__ESC_MAX),
				err == -EBUSY ? "another running process publishes there"
				: err == -EEXIST ? "the file exists and is not a live-counter file"
				: err == -EPERM ? "the file belongs to another user or others may "
						  "write it"
				: err == -ENOSPC ? "no slot left in the file"
						 : ms_strerror(err));
		}
	}
	return 0;
}

/* The counters and (when h is not NULL) the histograms as the context's own slot has them:
 * the reader's side of the seqlock, on the context's own memory (never on the file). Copy,
 * and keep the copy only if no update overlapped it. The writer never waits for us, and we do
 * not wait for ever either: a writer stopped half way through an update (descheduled for all
 * our tries) makes it -EBUSY. */
static int read_own(const struct ms_ctx *ctx, uint64_t v[NCOUNTERS], struct ms_hist *const h[MS__H_N])
{
	const struct ms_shm_slot *sl = ctx->own;
	for (unsigned tries = 0;; tries++) {
		if (tries >= SNAPSHOT_TRIES)
			return -EBUSY;
		uint64_t seq = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
		if (!(seq & 1)) {
			for (size_t k = 0; k < NCOUNTERS; k++)
				v[k] = __atomic_load_n(&sl->counter[k], __ATOMIC_RELAXED);
			for (int i = 0; h && i < MS__H_N; i++) {
				const uint64_t *a = (const uint64_t *)&sl->hist[i];
				uint64_t *b = (uint64_t *)h[i];
				for (size_t k = 0; k < sizeof(struct ms_hist) / 8; k++)
					b[k] = __atomic_load_n(&a[k], __ATOMIC_RELAXED);
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&sl->seq, __ATOMIC_RELAXED) == seq)
				return 0;
		}
		if (tries > 64)
			sched_yield();
	}
}

/* struct ms_stats from the slot's counters (counter_names' order); the offload counters are
 * the caller's own, current (under offload the slot has what the library thread last
 * published). */
static void stats_fill(const struct ms_ctx *ctx, struct ms_stats *s, const uint64_t v[NCOUNTERS])
{
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
#define COPY(n, h) s->n = v[MS__K_##n];
#define ERR_COPY(C, n, h) s->err_##n = v[MS__K_err_##n];
	MS__COUNTERS(COPY, ERR_COPY)
#undef COPY
#undef ERR_COPY
	_Static_assert(sizeof(struct ms_stats) == 8 + 8 * NCOUNTERS, "every counter, once");
	/* The public struct lists them in the table's order (so does the slot). */
#define AT(n, h)                                                                              \
	_Static_assert(offsetof(struct ms_stats, n) == 8 + 8 * MS__K_##n, #n);                \
	_Static_assert(sizeof(h) > 1, #n ": every counter says what it counts");
#define ERR_AT(C, n, h) AT(err_##n, h)
	MS__COUNTERS(AT, ERR_AT)
#undef AT
#undef ERR_AT
	uint64_t o[3];
	ms__offload_counts(ctx, o);
	s->offload_msgs = o[0];
	s->offload_waits = o[1];
	s->offload_refused = o[2];
}

int ms_ctx_snapshot(const struct ms_ctx *ctx, struct ms_snapshot *out)
{
	if (!ctx || !out || out->size < 16)
		return -EINVAL;
	struct ms_snapshot s;
	uint64_t v[NCOUNTERS];
	struct ms_hist *const h[MS__H_N] = {
		[MS__H_CALL_FIRST] = &s.call_first,
		[MS__H_CALL_LAST] = &s.call_last,
		[MS__H_FIRST_LAST] = &s.first_last,
		[MS__H_DEST_LAG] = &s.dest_lag,
	};
	int err = read_own(ctx, v, h);
	if (err)
		return err;
	s.size = out->size;
	s.backend = ms_ctx_backend(ctx);
	s.ts_sample = ctx->ts_sample;
	s.reserved = 0;
	s.taken_ns = ms__realtime_ns();
	stats_fill(ctx, &s.stats, v);
	const size_t at = offsetof(struct ms_snapshot, stats);
	if (out->size < sizeof(s))
		s.stats.size = out->size > at ? (uint32_t)(out->size - at) : 0;
	memcpy(out, &s, out->size < sizeof(s) ? out->size : sizeof(s));
	return 0;
}

/* ---- contexts ------------------------------------------------------------------------------- */

/* The header's -EINVAL rules for a config, one test each, in its order; tests/unit/test-config.c
 * has a case for every one. Fields of a feature that is off must be zero: nothing given is
 * silently ignored. */
static int copy_config(struct ms_config *c, const struct ms_config *cfg)
{
	memset(c, 0, sizeof(*c));
	if (!cfg)
		return 0;
	/* This layout or a newer one; a newer caller's fields that this library does not know
	 * must be unused (zero). */
	if (cfg->size < sizeof(*c) || cfg->size > CONFIG_SIZE_MAX)
		return -EINVAL;
	const unsigned char *tail = (const unsigned char *)cfg;
	for (size_t k = sizeof(*c); k < cfg->size; k++)
		if (tail[k])
			return -EINVAL;
	memcpy(c, cfg, sizeof(*c));
	if (c->flags & ~MS_CFG_ALL_FLAGS)
		return -EINVAL;
	if (c->backend > MS__BACKEND_LAST ||
	    ((c->flags & MS_CFG_AUTO_FREEZE) && c->backend != MS_BACKEND_AUTO))
		return -EINVAL;
	if (c->queue_depth > QUEUE_DEPTH_MAX || c->zc_min > ZC_MIN_MAX)
		return -EINVAL;
	/* Timestamps: ts_flags qualify a sampling that is on. */
	if (c->ts_sample > TS_SAMPLE_MAX || (c->ts_flags & ~MS_TS_ALL_FLAGS) ||
	    (c->ts_flags && !c->ts_sample))
		return -EINVAL;
	/* Library threads: the fields that shape them only where there are some. */
	bool offload = c->flags & MS_CFG_OFFLOAD;
	uint32_t threads = (c->workers ? c->workers : 1) - 1 + offload;
	if (c->workers > WORKERS_MAX)
		return -EINVAL;
	if (c->offload_kib && (!offload || c->offload_kib < OFFLOAD_KIB_MIN ||
			       c->offload_kib > OFFLOAD_KIB_MAX))
		return -EINVAL;
	if (c->spin_us && (!threads || c->spin_us > SPIN_US_MAX))
		return -EINVAL;
	if (c->ncpus > threads || !c->ncpus != !c->cpus)
		return -EINVAL;
	/* Kernel bypass: a queue only when asked for; a name that can be an interface's. */
	if (c->xdp_queue && !(c->flags & MS_CFG_XDP_QUEUE))
		return -EINVAL;
	if (c->xdp_frames && (c->xdp_frames < XDP_FRAMES_MIN || c->xdp_frames > XDP_FRAMES_MAX ||
			      (c->xdp_frames & (c->xdp_frames - 1))))
		return -EINVAL;
	if (c->xdp_ifname && (!*c->xdp_ifname || strlen(c->xdp_ifname) >= IF_NAMESIZE ||
			      strchr(c->xdp_ifname, '/') || strchr(c->xdp_ifname, ' ')))
		return -EINVAL;
	return 0;
}

struct choice {
	const char *skipped[MS__BACKEND_LAST + 1]; /* why each backend was not used */
	char init_why[MS__BACKEND_LAST + 1][256];
};

/* Set up be for ctx (unless it was skipped): one more entry of ctx->exec. */
static int try_backend(struct ms_ctx *ctx, const struct ms__backend *be, struct choice *ch)
{
	if (ch->skipped[be->id])
		return -ENOTSUP;
	void *state = NULL;
	ctx->init_why = NULL;
	int err = be->ctx_init ? be->ctx_init(ctx, &state) : 0;
	if (err) {
		if (ctx->init_why)
			snprintf(ch->init_why[be->id], sizeof(ch->init_why[be->id]), "%s",
				 ctx->init_why);
		else
			snprintf(ch->init_why[be->id], sizeof(ch->init_why[be->id]),
				 "setup failed: %s", ms_strerror(err));
		ch->skipped[be->id] = ch->init_why[be->id];
		return err;
	}
	ctx->exec[ctx->nexec++] = (struct ms__exec){ .be = be, .state = state };
	ctx->exec_caps |= be->caps;
	return 0;
}

static void backends_free(struct ms_ctx *ctx)
{
	for (unsigned k = 0; k < ctx->nexec; k++)
		if (ctx->exec[k].be->ctx_fini)
			ctx->exec[k].be->ctx_fini(ctx->exec[k].state);
	ctx->nexec = 0;
}

/* The executor AUTO or the configuration uses now (before a forked child's fallback). */
static const struct ms__exec *exec_now(const struct ms_ctx *ctx)
{
	const enum ms_backend b = ctx->autos ? ms__auto_now(ctx) : ctx->exec[0].be->id;
	for (unsigned k = 0; k < ctx->nexec; k++)
		if (ctx->exec[k].be->id == b)
			return &ctx->exec[k];
	return &ctx->exec[0];
}

/* Why the loop sends in a forked child, for the backend that cannot (ms__fork_loop). */
static int fork_why(const struct ms__backend *be, char *buf, size_t len)
{
	return snprintf(buf, len,
			"loop: in a process forked after the context was made, the %s backend's "
			"state (%s) is the parent's: the loop sends, counted in fork_fallback",
			be->name, be->id == MS_BACKEND_XDP ? "its AF_XDP socket and rings"
			: be->id == MS_BACKEND_IO_URING	   ? "its ring"
			: be->id == MS_BACKEND_KFANOUT	   ? "its slots in the attachment's maps"
							   : "its kernel objects");
}

void ms__fork_fallback(struct ms_ctx *ctx, const struct ms__backend *be, uint64_t n)
{
	ctx->c.fork_fallback += n;
	const unsigned gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	if (ctx->show && ctx->shown_gen != gen) {
		ctx->shown_gen = gen;
		char line[256];
		fork_why(be, line, sizeof(line));
		fprintf(stderr, "libmultisend: backend %s\n", line);
	}
}

int ms_ctx_describe(const struct ms_ctx *ctx, char *buf, size_t len)
{
	if (!ctx || (!buf && len))
		return -EINVAL;
	/* the backend in use, how it is set up; AUTO's figures; the library's threads */
	const struct ms__exec *x = exec_now(ctx);
	if (ms__fork_loop(ctx, x->be))
		return fork_why(x->be, buf, len); /* the parent's set-up is not this process's */
	char desc[256] = "", choice[512] = "", pool[256] = "";
	if (x->be->describe)
		x->be->describe(ctx, x->state, desc, sizeof(desc));
	if (ctx->autos)
		ms__auto_describe(ctx, choice, sizeof(choice));
	if (ctx->pool)
		ms__pool_describe(ctx, pool, sizeof(pool));
	return snprintf(buf, len, "%s%s%s%s%s%s", x->be->name, *desc ? ": " : "", desc,
			*choice ? "; " : "", choice, pool);
}

static void show(const struct ms_ctx *ctx, enum ms_backend asked, bool from_env,
		 const struct choice *ch)
{
	/* The lines may carry what the environment named (an interface's name, in a reason
	 * or a description): escaped. */
	char desc[1024], e[MS__ESC_CAP(sizeof(desc))];
	ms_ctx_describe(ctx, desc, sizeof(desc));
	fprintf(stderr, "libmultisend: backend %s (asked for %s%s)\n",
		ms__esc(e, sizeof(e), desc, sizeof(desc)), ms_backend_name(asked),
		from_env ? " by MULTISEND_BACKEND" : "");
	for (int b = MS_BACKEND_LOOP; b <= MS__BACKEND_LAST; b++)
		if (ch->skipped[b] && !(ctx->autos && ms__auto_has(ctx, (enum ms_backend)b)) &&
		    b != (int)ctx->exec[0].be->id)
			fprintf(stderr, "libmultisend:   %s skipped: %s\n",
				ms_backend_name((enum ms_backend)b),
				ms__esc(e, sizeof(e), ch->skipped[b], sizeof(desc)));
}

/* Which backends may be used (probes, MULTISEND_NO_*: ch->skipped says why not) and which is
 * asked for (cfg, or MULTISEND_BACKEND). */
static enum ms_backend backend_wanted(const struct ms_config *c, bool use_env, struct choice *ch)
{
	enum ms_backend want = (enum ms_backend)c->backend;
#ifndef MS_HAVE_LIBURING
	ch->skipped[MS_BACKEND_IO_URING] = "not built (liburing was not found at build time)";
#endif
#ifndef MS_HAVE_XDP
	ch->skipped[MS_BACKEND_XDP] = "not built (linux/if_xdp.h was not found at build time, or "
				      "-Dxdp=disabled)";
#endif
#ifndef MS_HAVE_KFANOUT
	ch->skipped[MS_BACKEND_KFANOUT] = "not built (-Dkfanout=disabled, or libbpf or clang's BPF "
					  "target was not found at build time)";
#endif
	pthread_once(&probe_once, probe_all);
	for (size_t k = 0; k < NBACKENDS; k++)
		if (probe_err[k])
			ch->skipped[preference[k]->id] = probe_why[k];
	if (!use_env)
		return want;
	const char *v = secure_getenv("MULTISEND_BACKEND");
	if (v && *v) {
		int b = ms_backend_from_name(v);
		if (b >= 0)
			want = (enum ms_backend)b;
		else if (!__atomic_exchange_n(&warned_env, true, __ATOMIC_RELAXED)) {
			/* An operator's typo must not pass silently, nor flood stderr; nor can a
			 * value write to the terminal (escaped). */
			char e[MS__ESC_CAP(MS__ESC_MAX)];
			fprintf(stderr, "libmultisend: MULTISEND_BACKEND=%s is not one of "
					"auto, loop, sendmmsg, io_uring, xdp, kfanout; ignored\n",
				ms__esc(e, sizeof(e), v, MS__ESC_MAX));
		}
	}
	for (int b = MS_BACKEND_LOOP; b <= MS__BACKEND_LAST; b++)
		if (env_true(no_env[b]) && !ch->skipped[b])
			ch->skipped[b] = no_env_why[b];
	return want;
}

/* Set up the backend asked for, or (unless MS_CFG_NO_FALLBACK) the first of the preference
 * order that works; for MS_BACKEND_AUTO, every backend that works, for AUTO to measure. 0, or
 * the error ms_ctx_new returns. */
static int backend_setup(struct ms_ctx *ctx, enum ms_backend want, struct choice *ch)
{
	int err = -ENOTSUP;
	if (want == MS_BACKEND_AUTO) {
		for (size_t k = 0; k < NBACKENDS; k++)
			(void)try_backend(ctx, preference[k], ch);
		err = ctx->nexec ? 0 : -ENOTSUP;
	} else {
		for (size_t k = 0; k < NBACKENDS; k++)
			if (preference[k]->id == want)
				err = try_backend(ctx, preference[k], ch);
		if (err && (ctx->flags & MS_CFG_NO_FALLBACK))
			return err == -ENOTSUP || err == -ENOSYS ? -ENOTSUP : err;
		for (size_t k = 0; err && k < NBACKENDS; k++)
			err = try_backend(ctx, preference[k], ch);
	}
	return err ? -ENOTSUP : 0;
}

/* The xdp backend's settings: the interface named by the config, else MULTISEND_XDP_IFACE
 * (an unusable name there is the backend's reason to be unavailable, lib/be/xdp.c). */
static void xdp_settings(struct ms_ctx *ctx, const struct ms_config *c, bool use_env)
{
	const char *name = c->xdp_ifname;
	if (!name && use_env)
		name = secure_getenv("MULTISEND_XDP_IFACE");
	if (name && *name)
		snprintf(ctx->xdp.ifname, sizeof(ctx->xdp.ifname), "%s", name);
	ctx->xdp.ifname_bad = name && *name && (strlen(name) >= IF_NAMESIZE || strchr(name, '/') ||
						strchr(name, ' '));
	ctx->xdp.queue = c->xdp_queue;
	ctx->xdp.queue_set = c->flags & MS_CFG_XDP_QUEUE;
	ctx->xdp.copy_only = c->flags & MS_CFG_XDP_COPY;
	const char *nf = use_env ? secure_getenv("MULTISEND_XDP_NETFILTER") : NULL;
	ctx->xdp.nf_skip = (c->flags & MS_CFG_XDP_NETFILTER) || (nf && !strcmp(nf, "skip"));
	ctx->xdp.frames = c->xdp_frames ? c->xdp_frames : XDP_FRAMES_DEFAULT;
}

/* MS_BACKEND_AUTO over ctx->nexec backends: its settings from the config and environment. */
static int auto_setup(struct ms_ctx *ctx, const struct ms_config *c, bool use_env)
{
	bool freeze = (c->flags & MS_CFG_AUTO_FREEZE) ||
		      (use_env && env_true("MULTISEND_AUTO_FREEZE"));
	unsigned long recheck = 0;
	const char *v = use_env ? secure_getenv("MULTISEND_AUTO_RECHECK") : NULL;
	if (v && *v) {
		char *end;
		errno = 0;
		recheck = strtoul(v, &end, 10);
		if (errno || *end || recheck < 16 || recheck > 100000000) {
			recheck = 0;
			char e[MS__ESC_CAP(MS__ESC_MAX)];
			if (!__atomic_exchange_n(&warned_recheck, true, __ATOMIC_RELAXED))
				fprintf(stderr, "libmultisend: MULTISEND_AUTO_RECHECK=%s is not a "
						"number of fan-outs 16..100000000; ignored\n",
					ms__esc(e, sizeof(e), v, MS__ESC_MAX));
		}
	}
	return ms__auto_new(ctx, freeze, (uint32_t)recheck);
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
	enum ms_backend want = backend_wanted(&c, use_env, &ch);
	if (c.ts_sample && ms__ts_probe())
		return -ENOTSUP;
	const char *shm = c.stats_shm;
	if (shm) {
		char path[4096];
		if (ms__shm_expand(path, sizeof(path), shm))
			return -EINVAL;
	} else if (use_env) {
		shm = secure_getenv("MULTISEND_STATS_SHM");
	}

	ms__fork_watch(); /* before any backend state exists */
	struct ms_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->flags = c.flags;
	ctx->gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	ctx->ts_sample = c.ts_sample;
	ctx->ts_flags = c.ts_flags;
	ctx->queue_depth = c.queue_depth ? c.queue_depth : QUEUE_DEPTH_DEFAULT;
	ctx->zc_min = c.zc_min; /* 0: never, in the backend too */
	xdp_settings(ctx, &c, use_env);
	if ((err = backend_setup(ctx, want, &ch))) {
		free(ctx);
		return err;
	}
	ctx->be_fork_unsafe = ctx->exec_caps & MS__CAP_FORK_UNSAFE;
	if ((err = ms__mlock(ctx, ctx, sizeof(*ctx))) ||
	    (ctx->nexec > 1 && (err = auto_setup(ctx, &c, use_env))) || (err = slot_setup(ctx, shm)) ||
	    (ctx->pub && (err = ms__mlock(ctx, ctx->pub, sizeof(*ctx->pub)))) ||
	    ((c.workers > 1 || (c.flags & MS_CFG_OFFLOAD)) && (err = ms__pool_start(ctx, &c)))) {
		if (ctx->pub)
			ms__shm_close(ctx->pub);
		free(ctx->own);
		ms__auto_free(ctx);
		backends_free(ctx);
		free(ctx);
		return err;
	}
	ctx->modes = ((c.flags & MS_CFG_ROTATE) ? MS__MODE_ROTATE : 0) |
		     (ctx->pool ? MS__MODE_POOL : 0) | (c.ts_sample ? MS__MODE_TS : 0) |
		     (ctx->autos ? MS__MODE_AUTO : 0);
	ms__publish(ctx);
	if (use_env && env_true("MULTISEND_SHOW_BACKEND")) {
		ctx->show = true;
		ctx->shown_gen = ctx->gen;
		show(ctx, want, want != (enum ms_backend)c.backend, &ch);
		if (ctx->autos)
			ms__auto_show(ctx); /* and each decision, when AUTO makes it */
	}
	*out = ctx;
	return 0;
}

void ms_ctx_free(struct ms_ctx *ctx)
{
	if (!ctx)
		return;
	ms__pool_stop(ctx); /* offload: what was handed over is sent first */
	ms__auto_free(ctx);
	backends_free(ctx);
	ms__ts_ctx_free(ctx);
	ms__own_slot(ctx);
	if (ctx->pub)
		ms__shm_close(ctx->pub);
	free(ctx->own);
	free(ctx);
}

enum ms_backend ms_ctx_backend(const struct ms_ctx *ctx)
{
	if (!ctx)
		return MS_BACKEND_AUTO;
	const struct ms__exec *x = exec_now(ctx);
	/* In a forked child, what sends: the loop, where the backend's state is the parent's. */
	return ms__fork_loop(ctx, x->be) ? MS_BACKEND_LOOP : x->be->id;
}

int ms_ctx_stats(const struct ms_ctx *ctx, struct ms_stats *out)
{
	if (!ctx || !out || out->size < 8)
		return -EINVAL;
	uint64_t v[NCOUNTERS];
	int err = read_own(ctx, v, NULL);
	if (err)
		return err;
	struct ms_stats s;
	stats_fill(ctx, &s, v);
	s.size = out->size;
	memcpy(out, &s, out->size < sizeof(s) ? out->size : sizeof(s));
	return 0;
}

int ms_ctx_drain(struct ms_ctx *ctx)
{
	if (!ctx)
		return -EINVAL;
	ms__quiesce(ctx);
	return 0;
}

int ms_ctx_post_errors(struct ms_ctx *ctx, struct ms_post_error *out, size_t n, uint64_t *lost)
{
	if (!ctx || (!out && n))
		return -EINVAL;
	return ms__post_errors(ctx, out, n, lost);
}
