/* SPDX-License-Identifier: MIT */
/*
 * Workers and offload (the contract is in include/multisend.h, "Workers and offload").
 *
 * One mechanism for both: library threads, each with a job slot it polls. A fan-out in K parts
 * (ms__pool_send) posts parts 1..K-1 to K-1 worker threads, sends part 0 itself and waits for
 * the others; the parts are contiguous runs of the send order, sent by the backend's send
 * over the plan, each with its own struct ms__batch whose counts are added up at the
 * end. Offload puts one more thread in front: ms_post copies the message into a byte ring
 * and returns; the offload thread takes messages off the ring in order and runs the ordinary
 * send path on each (ms__do_send), K parts included, with a result array of its own from
 * which the destinations that did not take the whole message go to the post log. ms_send on
 * such a context waits until the ring is empty and sends from the calling thread; only for
 * io_uring, whose ring accepts submissions from one thread (SINGLE_ISSUER, the offload
 * thread's once it has sent), it puts a reference entry in the ring (the caller's iovec and
 * result array, not copied) and waits for the offload thread to send it. That is the one
 * place here that knows a backend.
 *
 * Waiting: a waiter polls a 32-bit word for up to spin_us, then sleeps on it with futex(2)
 * after announcing itself in a sleeper count; a signaller changes the word and calls
 * futex_wake only when the count says someone sleeps. Both sides use sequentially consistent
 * operations on the word and the count, so one of them always sees the other (no lost
 * wake-up), and a hot path with busy threads makes no system call at all.
 *
 * The offload ring: a power-of-two byte array; `head` (bytes written, the caller's) and `tail`
 * (bytes consumed, the offload thread's) only grow. An entry is a header and the message,
 * padded to 64 bytes; one that would cross the end is preceded by a filler entry up to it.
 * The caller is the only writer of head, the offload thread the only writer of tail; the
 * group an entry names does not change until tail has passed it (ms__quiesce).
 *
 * The post log: MS_POST_LOG_ENTRIES entries, a ring with one writer (the offload thread, or
 * in a forked child the caller) and one reader (ms_ctx_post_errors); log_w and log_r only
 * grow; an entry that finds it full is counted in log_lost instead.
 */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define PART_MIN 8u          /* destinations per part at least: below, fewer parts */
#define SPIN_US_DEFAULT 50u
#define RING_KIB_DEFAULT 4096u
#define ENTRY_ALIGN 64u

/* ---- waiting ---------------------------------------------------------------------------------- */

struct waitword {
	uint32_t v;        /* the word waited on (futex) */
	uint32_t sleepers; /* threads asleep on it, or about to be */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Wait until w->v is no longer `seen`. */
static void wait_change(struct waitword *w, uint32_t seen, uint64_t spin_ns)
{
	uint64_t t0 = 0;
	for (unsigned k = 1;; k++) {
		if (__atomic_load_n(&w->v, __ATOMIC_ACQUIRE) != seen)
			return;
		if (!(k & 63)) {
			uint64_t now = mono_ns();
			if (!t0)
				t0 = now;
			else if (now - t0 >= spin_ns)
				break;
		}
		cpu_relax();
	}
	__atomic_fetch_add(&w->sleepers, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&w->v, __ATOMIC_SEQ_CST) == seen)
		syscall(SYS_futex, &w->v, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
	__atomic_fetch_sub(&w->sleepers, 1, __ATOMIC_RELAXED);
}

/* Move w->v on by one (its only writer) and wake whoever sleeps on it. */
static void signal_change(struct waitword *w)
{
	__atomic_store_n(&w->v, w->v + 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&w->sleepers, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &w->v, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* ---- the pool ------------------------------------------------------------------------------- */

struct worker {
	struct ms__pool *pool;
	unsigned idx;
	int cpu;           /* -1: not pinned */
	pthread_t th;
	bool started;
	void *be[MS__NEXEC]; /* each backend's state for this thread (part_init), as ctx->exec */
	int init_err;
	/* The job, written by the poster before `go` moves, read by the worker after. */
	struct ms__batch b;
	size_t first, count;
	uint8_t exec;      /* which backend (ctx->exec[exec]) */
	bool sample;       /* AUTO times the call: measure this part's cost */
	struct ms__cost cost; /* ... into here */
	int err;
	struct waitword go __attribute__((aligned(64)));   /* jobs posted */
	struct waitword done __attribute__((aligned(64))); /* jobs finished */
} __attribute__((aligned(64)));

struct entry {
	struct ms_group *g; /* NULL: a filler up to the end of the ring */
	uint64_t size;      /* bytes of ring this entry takes */
	uint64_t len;       /* the message's */
	uint64_t seq;       /* ms_post's number for it; 0: an ms_send by reference */
	const struct iovec *iov; /* an ms_send by reference: the caller's (else the message
	                            follows the entry) */
	struct ms_result *res;   /* ... and its result array */
	uint32_t flags;     /* ms_send flags */
	int iovcnt;
};
_Static_assert(sizeof(struct entry) <= ENTRY_ALIGN, "one entry header per alignment unit");

struct ms__pool {
	struct ms_ctx *ctx;
	unsigned gen;      /* fork generation the threads belong to */
	uint32_t parts;    /* workers = K */
	uint32_t nworkers; /* K - 1 */
	struct worker *w;
	uint64_t spin_ns;
	bool stop;
	struct waitword ready; /* threads that finished starting */
	/* offload */
	bool offload;
	struct worker disp; /* the offload thread (its job slot unused) */
	unsigned char *ring;
	uint64_t ring_size, max_msg;
	uint64_t head __attribute__((aligned(64))); /* bytes written: the caller's */
	struct waitword head_ev;                    /* moves with head */
	uint64_t msgs, waits, refused;              /* the caller's counts (read by any thread) */
	uint64_t tail __attribute__((aligned(64))); /* bytes consumed: the offload thread's */
	struct waitword tail_ev;                    /* moves with tail (room for the caller) */
	struct waitword empty_ev;                   /* moves when tail reaches head (drained) */
	/* the offload thread's */
	int sync_ret;              /* what the last ms_send by reference returned */
	struct ms_result *res;     /* results of the message being sent */
	size_t res_cap;
	/* the post log */
	struct ms_post_error *log;
	uint64_t log_w __attribute__((aligned(64))); /* entries written: the offload thread's */
	uint64_t log_lost;                            /* entries that found the log full */
	uint64_t log_r __attribute__((aligned(64))); /* entries read: ms_ctx_post_errors' */
};

static inline bool in_parent(const struct ms__pool *p)
{
	return p->gen == __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
}

static void worker_started(struct worker *w, int err)
{
	w->init_err = err;
	__atomic_fetch_add(&w->pool->ready.v, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&w->pool->ready.sleepers, __ATOMIC_SEQ_CST))
		syscall(SYS_futex, &w->pool->ready.v, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct ms__pool *p = w->pool;
	const struct ms_ctx *ctx = p->ctx;
	char name[16];

	snprintf(name, sizeof(name), "ms-worker-%u", w->idx);
	pthread_setname_np(pthread_self(), name);
	int err = 0;
	unsigned k;
	for (k = 0; k < ctx->nexec && !err; k++)
		if (ctx->exec[k].be->part_init)
			err = ctx->exec[k].be->part_init(p->ctx, &w->be[k]);
	if (err) {
		for (unsigned j = 0; j + 1 < k; j++)
			if (ctx->exec[j].be->part_fini)
				ctx->exec[j].be->part_fini(w->be[j]);
		memset(w->be, 0, sizeof(w->be));
	}
	worker_started(w, err);
	if (err)
		return NULL;
	uint32_t seen = 0;
	for (;;) {
		wait_change(&w->go, seen, p->spin_ns);
		seen = __atomic_load_n(&w->go.v, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
			break;
		struct ms__clocks clk;
		if (w->sample) {
			w->cost = (struct ms__cost){ 0 };
			ms__clocks_start(&clk);
		}
		w->err = ctx->exec[w->exec].be->send(w->be[w->exec], &w->b, w->first, w->count);
		if (w->sample)
			ms__cost_add(&w->cost, &clk);
		signal_change(&w->done);
	}
	for (k = 0; k < ctx->nexec; k++)
		if (ctx->exec[k].be->part_fini)
			ctx->exec[k].be->part_fini(w->be[k]);
	return NULL;
}

/* Put the destinations of a posted message that did not take all of it, or that the group's
 * slow-consumer policy acted on with flags, in the post log. res has the message's statuses in
 * group order; the policy's flags are in the group's record of this call (ascending pos). */
static void log_results(struct ms__pool *p, struct ms_group *g, uint64_t seq, size_t len,
			const struct ms_result *res, size_t n)
{
	uint64_t w = p->log_w, r = __atomic_load_n(&p->log_r, __ATOMIC_ACQUIRE), lost = 0;
	size_t k = 0; /* the next entry of the group's record (slowres may be NULL) */
	for (size_t i = 0; i < n; i++) {
		uint32_t flags = 0;
		if (k < g->nslowres && g->slowres[k].pos == i)
			flags = g->slowres[k++].flags;
		if (res[i].status == (int)len && !flags)
			continue;
		if (w - r == MS_POST_LOG_ENTRIES &&
		    w - (r = __atomic_load_n(&p->log_r, __ATOMIC_ACQUIRE)) == MS_POST_LOG_ENTRIES) {
			lost++;
			continue;
		}
		p->log[w++ & (MS_POST_LOG_ENTRIES - 1)] = (struct ms_post_error){
			.seq = seq, .g = g, .id = res[i].id, .status = res[i].status,
			.flags = flags,
		};
	}
	__atomic_store_n(&p->log_w, w, __ATOMIC_RELEASE);
	if (lost)
		__atomic_fetch_add(&p->log_lost, lost, __ATOMIC_RELAXED);
}

/* Send a posted message with a result array and log what did not go whole. own_res: use the
 * pool's array (the offload thread's); otherwise one of this call's own (a forked child's
 * caller: the array may have been the parent's thread's at the fork). Without memory for
 * the array, only how many destinations failed is known: they count as lost. */
static void send_logged(struct ms__pool *p, struct ms_group *g, const struct iovec *iov,
			int iovcnt, size_t len, unsigned flags, uint64_t seq, bool own_res)
{
	struct ms_ctx *ctx = p->ctx;
	const size_t n = g->size;
	/* The offload thread's array has room for every group (ms__offload_reserve). */
	struct ms_result *res = !own_res ? malloc(n * sizeof(*res)) : p->res_cap >= n ? p->res : NULL;
	if (!res) {
		uint64_t before = ctx->c.dests_failed + ctx->c.dests_partial;
		(void)ms__do_send(g, iov, iovcnt, len, flags, NULL);
		__atomic_fetch_add(&p->log_lost, ctx->c.dests_failed + ctx->c.dests_partial - before,
				   __ATOMIC_RELAXED);
		return;
	}
	(void)ms__do_send(g, iov, iovcnt, len, flags, res);
	log_results(p, g, seq, len, res, n);
	if (!own_res)
		free(res);
}

/* The offload thread: messages off the ring, in order, each through the ordinary send path. */
static void *offload_main(void *arg)
{
	struct worker *w = arg;
	struct ms__pool *p = w->pool;
	uint64_t tail = p->tail;

	pthread_setname_np(pthread_self(), "ms-offload");
	worker_started(w, 0);
	for (;;) {
		uint32_t ev = __atomic_load_n(&p->head_ev.v, __ATOMIC_ACQUIRE);
		uint64_t head = __atomic_load_n(&p->head, __ATOMIC_ACQUIRE);
		if (tail == head) {
			if (__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
				break; /* stopped only once drained: nothing is left behind */
			wait_change(&p->head_ev, ev, p->spin_ns);
			continue;
		}
		const struct entry *e = (const struct entry *)(p->ring + (tail & (p->ring_size - 1)));
		if (e->g && e->seq) {
			struct iovec iov = { .iov_base = (void *)(e + 1), .iov_len = e->len };
			send_logged(p, e->g, &iov, 1, e->len, e->flags, e->seq, true);
		} else if (e->g) {
			p->sync_ret = ms__do_send(e->g, e->iov, e->iovcnt, e->len, e->flags, e->res);
		}
		tail += e->size;
		__atomic_store_n(&p->tail, tail, __ATOMIC_RELEASE);
		signal_change(&p->tail_ev); /* a store; a system call only for a caller asleep */
		if (tail == __atomic_load_n(&p->head, __ATOMIC_ACQUIRE))
			signal_change(&p->empty_ev); /* one wake-up per drain, not per message */
	}
	return NULL;
}

static int start_thread(struct ms__pool *p, struct worker *w, void *(*fn)(void *))
{
	pthread_attr_t attr;
	sigset_t all, old;
	int err = pthread_attr_init(&attr);
	if (err)
		return -err;
	if (w->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(w->cpu, &set);
		err = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	/* The application's signals are for its own threads: ours block them all, except the
	 * ones a fault raises in the thread itself (blocked, such a fault kills the process
	 * without running any handler: the SIGBUS of a truncated live-counter file, lib/obs/shm.c,
	 * or the program's own handlers for its memory). */
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (!err)
		err = pthread_create(&w->th, &attr, fn, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err)
		return err == EINVAL ? -EINVAL : -err; /* EINVAL: a CPU we may not run on */
	w->started = true;
	(void)p;
	return 0;
}

static void join_all(struct ms__pool *p)
{
	__atomic_store_n(&p->stop, true, __ATOMIC_RELEASE);
	if (p->offload && p->disp.started) {
		signal_change(&p->head_ev);
		pthread_join(p->disp.th, NULL);
		p->disp.started = false;
	}
	for (uint32_t k = 0; k < p->nworkers; k++) {
		struct worker *w = &p->w[k];
		if (!w->started)
			continue;
		signal_change(&w->go);
		pthread_join(w->th, NULL);
		w->started = false;
	}
}

static void pool_free(struct ms__pool *p)
{
	free(p->res);
	free(p->log);
	free(p->ring);
	free(p->w);
	free(p);
}

int ms__pool_start(struct ms_ctx *ctx, const struct ms_config *c)
{
	uint32_t parts = c->workers ? c->workers : 1;
	bool offload = c->flags & MS_CFG_OFFLOAD;
	if (parts < 2 && !offload)
		return 0;
	for (uint32_t k = 0; k < c->ncpus; k++)
		if (c->cpus[k] < 0 || c->cpus[k] >= CPU_SETSIZE)
			return -EINVAL;

	int err;
	struct ms__pool *p = ms__zalloc_aligned(ctx, 64, sizeof(*p), &err);
	if (!p)
		return err;
	p->ctx = ctx;
	p->gen = __atomic_load_n(&ms__fork_gen, __ATOMIC_RELAXED);
	p->parts = parts;
	p->nworkers = parts - 1;
	p->offload = offload;
	p->spin_ns = (uint64_t)(c->spin_us ? c->spin_us : SPIN_US_DEFAULT) * 1000u;
	if (p->nworkers)
		p->w = ms__zalloc_aligned(ctx, 64, p->nworkers * sizeof(*p->w), &err);
	if (!err && offload) {
		uint64_t kib = c->offload_kib ? c->offload_kib : RING_KIB_DEFAULT, sz = 65536;
		while (sz < kib * 1024)
			sz <<= 1;
		p->ring_size = sz;
		p->max_msg = sz / 4;
		p->ring = ms__zalloc_aligned(ctx, ENTRY_ALIGN, sz, &err);
		if (p->ring)
			p->log = ms__zalloc(ctx, MS_POST_LOG_ENTRIES * sizeof(*p->log), &err);
	}
	if (err) {
		pool_free(p);
		return err;
	}

	/* Threads in order: the offload thread first, then the workers; cpus[i] pins the i-th. */
	uint32_t nthreads = p->nworkers + offload, started = 0;
	for (uint32_t t = 0; t < nthreads && !err; t++) {
		struct worker *w = offload && t == 0 ? &p->disp : &p->w[t - offload];
		w->pool = p;
		w->idx = t - offload + 1; /* part number */
		w->cpu = t < c->ncpus ? c->cpus[t] : -1;
		err = start_thread(p, w, offload && t == 0 ? offload_main : worker_main);
		started += !err;
	}
	/* Wait for the started ones to be set up (each reports its own error). */
	for (;;) {
		uint32_t r = __atomic_load_n(&p->ready.v, __ATOMIC_SEQ_CST);
		if (r == started)
			break;
		wait_change(&p->ready, r, 1000000);
	}
	for (uint32_t k = 0; !err && k < p->nworkers; k++)
		err = p->w[k].init_err;
	if (err) {
		join_all(p);
		pool_free(p);
		return err;
	}
	ctx->pool = p;
	return 0;
}

void ms__pool_stop(struct ms_ctx *ctx)
{
	struct ms__pool *p = ctx->pool;
	if (!p)
		return;
	if (in_parent(p)) {
		join_all(p); /* the offload thread drains the ring first */
	} else {
		/* A forked child has none of these threads: nothing to join, and the ring's
		 * messages are its parent's to send; their backend states are only copies of the
		 * parent's memory here (for io_uring, this process's mappings and descriptor of a
		 * ring the parent keeps), freed like any other copy. */
		for (uint32_t k = 0; k < p->nworkers; k++)
			for (unsigned x = 0; x < ctx->nexec; x++)
				if (ctx->exec[x].be->part_fini && p->w[k].be[x])
					ctx->exec[x].be->part_fini(p->w[k].be[x]);
	}
	ctx->pool = NULL;
	pool_free(p);
}

/* ---- fan-out in parts ------------------------------------------------------------------------ */

uint32_t ms__pool_parts(const struct ms_ctx *ctx, const struct ms__send *s)
{
	const struct ms__pool *p = ctx->pool;
	if (p->parts < 2 || s->managed || s->b.len > UINT32_MAX || (s->x->be->caps & MS__CAP_WHOLE) ||
	    (s->b.hdr && !(s->x->be->caps & MS__CAP_HDR)) || !in_parent(p))
		return 1;
	size_t k = s->g->size / PART_MIN;
	return k < 2 ? 1 : k < p->parts ? (uint32_t)k : p->parts;
}

int ms__pool_send(struct ms__send *s)
{
	struct ms_ctx *ctx = s->g->ctx;
	struct ms__pool *p = ctx->pool;
	const size_t n = s->b.n, first = s->first;
	size_t off, count;

	for (uint32_t k = 1; k < s->parts; k++) {
		struct worker *w = &p->w[k - 1];
		ms__part_range(n, s->parts, k, &off, &count);
		w->b = s->b; /* no counts yet: each part counts its own */
		w->first = (first + off) % n;
		w->count = count;
		w->exec = (uint8_t)(s->x - ctx->exec);
		w->sample = s->sampled;
		signal_change(&w->go);
	}
	ms__part_range(n, s->parts, 0, &off, &count);
	int err = s->x->be->send(s->x->state, &s->b, first, count);
	for (uint32_t k = 1; k < s->parts; k++) {
		struct worker *w = &p->w[k - 1];
		uint32_t want = w->go.v;
		uint32_t seen;
		while ((seen = __atomic_load_n(&w->done.v, __ATOMIC_ACQUIRE)) != want)
			wait_change(&w->done, seen, p->spin_ns);
		ms__tally_add(&s->b.t, &w->b.t);
		if (w->sample) {
			s->smp->parts.cpu_seen += w->cost.cpu_seen;
			s->smp->parts.oncpu_seen += w->cost.oncpu_seen;
			s->smp->parts.cpu_unseen += w->cost.cpu_unseen;
		}
		if (!err)
			err = w->err;
	}
	return err;
}

/* ---- offload -------------------------------------------------------------------------------- */

int ms__offload_reserve(struct ms_ctx *ctx, size_t n)
{
	struct ms__pool *p = ctx->pool;
	if (!p || !p->offload || n <= p->res_cap)
		return 0;
	int err = ms__grow(ctx, &p->res, n * sizeof(*p->res));
	if (!err)
		p->res_cap = n;
	return err;
}

bool ms__offloaded(const struct ms_ctx *ctx)
{
	const struct ms__pool *p = ctx->pool;
	return p && p->offload && in_parent(p);
}

/* Wait for room for an entry of `need` bytes at head (and a filler up to the end of the ring
 * before it, if it would cross the end). Returns where it goes, or -EAGAIN (dontwait). */
static int64_t reserve(struct ms__pool *p, uint64_t need, bool dontwait, bool *waited)
{
	const uint64_t size = p->ring_size, head = p->head;
	uint64_t off = head & (size - 1);
	const uint64_t fill = size - off < need ? size - off : 0;
	for (;;) {
		uint32_t ev = __atomic_load_n(&p->tail_ev.v, __ATOMIC_ACQUIRE);
		uint64_t tail = __atomic_load_n(&p->tail, __ATOMIC_ACQUIRE);
		if (size - (head - tail) >= fill + need)
			break;
		if (dontwait)
			return -EAGAIN;
		*waited = true;
		wait_change(&p->tail_ev, ev, p->spin_ns);
	}
	if (fill) {
		*(struct entry *)(p->ring + off) = (struct entry){ .g = NULL, .size = fill };
		off = 0;
	}
	return (int64_t)off;
}

/* Publish the entry just written (it and its filler end `to` bytes past the old head). */
static void publish(struct ms__pool *p, uint64_t to)
{
	__atomic_store_n(&p->head, to, __ATOMIC_RELEASE);
	signal_change(&p->head_ev);
}

/* The head once an entry of `need` bytes is put at off (after the filler before it, if any). */
static uint64_t entry_end(const struct ms__pool *p, uint64_t off, uint64_t need)
{
	const uint64_t mask = p->ring_size - 1;
	uint64_t skip = (off - (p->head & mask)) & mask; /* the filler's size, or 0 */
	return p->head + skip + need;
}

int ms__offload_post(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		     unsigned flags, uint64_t *seq)
{
	struct ms__pool *p = g->ctx->pool;
	if (flags & ~MS_SEND_ALL_FLAGS)
		return -EINVAL;
	if (!p || !p->offload)
		return -ENOTSUP;
	if (!g->size)
		return 0;
	if (len > p->max_msg)
		return -EMSGSIZE;
	const size_t n = g->size;
	const int ret = n > INT_MAX ? INT_MAX : (int)n;
	if (!in_parent(p)) {
		/* A forked child has no offload thread: the message goes now, from here. */
		uint64_t s = p->msgs + 1;
		__atomic_store_n(&p->msgs, s, __ATOMIC_RELAXED);
		if (seq)
			*seq = s;
		send_logged(p, g, iov, iovcnt, len, flags, s, false);
		return ret;
	}
	const uint64_t need = (sizeof(struct entry) + len + ENTRY_ALIGN - 1) & ~(uint64_t)(ENTRY_ALIGN - 1);
	bool waited = false;
	int64_t off = reserve(p, need, flags & MS_SEND_DONTWAIT, &waited);
	if (off < 0) {
		__atomic_store_n(&p->refused, p->refused + 1, __ATOMIC_RELAXED);
		return (int)off;
	}
	const uint64_t s = p->msgs + 1;
	struct entry *e = (struct entry *)(p->ring + off);
	*e = (struct entry){ .g = g, .size = need, .len = len, .seq = s, .flags = flags };
	unsigned char *to = (unsigned char *)(e + 1);
	for (int k = 0; k < iovcnt; k++) {
		if (iov[k].iov_len)
			memcpy(to, iov[k].iov_base, iov[k].iov_len);
		to += iov[k].iov_len;
	}
	__atomic_store_n(&p->msgs, s, __ATOMIC_RELAXED);
	if (waited)
		__atomic_store_n(&p->waits, p->waits + 1, __ATOMIC_RELAXED);
	if (seq)
		*seq = s;
	publish(p, entry_end(p, (uint64_t)off, need));
	return ret;
}

int ms__offload_send(struct ms_group *g, const struct iovec *iov, int iovcnt, size_t len,
		     unsigned flags, struct ms_result *res)
{
	struct ms__pool *p = g->ctx->pool;
	if (!(g->ctx->exec_caps & MS__CAP_ONE_THREAD)) {
		ms__quiesce(g->ctx);
		return ms__do_send(g, iov, iovcnt, len, flags, res);
	}
	/* io_uring: by reference, through the ring, behind what was posted. */
	bool waited = false;
	int64_t off = reserve(p, ENTRY_ALIGN, false, &waited);
	struct entry *e = (struct entry *)(p->ring + off);
	*e = (struct entry){ .g = g, .size = ENTRY_ALIGN, .len = len, .iov = iov, .res = res,
			     .flags = flags, .iovcnt = iovcnt };
	publish(p, entry_end(p, (uint64_t)off, ENTRY_ALIGN));
	ms__quiesce(g->ctx);
	return p->sync_ret; /* written before the offload thread moved tail past the entry */
}

int ms__post_errors(struct ms_ctx *ctx, struct ms_post_error *out, size_t n, uint64_t *lost)
{
	struct ms__pool *p = ctx->pool;
	if (!p || !p->offload) {
		if (lost)
			*lost = 0;
		return 0;
	}
	uint64_t r = p->log_r, w = __atomic_load_n(&p->log_w, __ATOMIC_ACQUIRE);
	size_t k = w - r < n ? (size_t)(w - r) : n;
	if (k > INT_MAX)
		k = INT_MAX;
	for (size_t i = 0; i < k; i++)
		out[i] = p->log[(r + i) & (MS_POST_LOG_ENTRIES - 1)];
	__atomic_store_n(&p->log_r, r + k, __ATOMIC_RELEASE);
	if (lost)
		*lost = __atomic_exchange_n(&p->log_lost, 0, __ATOMIC_RELAXED);
	return (int)k;
}

void ms__quiesce(const struct ms_ctx *ctx)
{
	struct ms__pool *p = ctx->pool;
	if (likely(!p) || !p->offload || !in_parent(p) || pthread_equal(p->disp.th, pthread_self()))
		return;
	/* The caller is the only writer of head, so it cannot move while we wait; the offload
	 * thread moves empty_ev once tail has reached it. */
	for (;;) {
		uint32_t ev = __atomic_load_n(&p->empty_ev.v, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&p->tail, __ATOMIC_ACQUIRE) == p->head)
			return;
		wait_change(&p->empty_ev, ev, p->spin_ns);
	}
}

void ms__offload_counts(const struct ms_ctx *ctx, uint64_t v[3])
{
	const struct ms__pool *p = ctx->pool;
	v[0] = p ? __atomic_load_n(&p->msgs, __ATOMIC_RELAXED) : 0;
	v[1] = p ? __atomic_load_n(&p->waits, __ATOMIC_RELAXED) : 0;
	v[2] = p ? __atomic_load_n(&p->refused, __ATOMIC_RELAXED) : 0;
}

void ms__pool_describe(const struct ms_ctx *ctx, char *buf, size_t len)
{
	const struct ms__pool *p = ctx->pool;
	char cpus[128] = "";
	uint32_t n = p->nworkers + p->offload;
	for (uint32_t t = 0; t < n; t++) {
		const struct worker *w = p->offload && t == 0 ? &p->disp : &p->w[t - p->offload];
		if (w->cpu >= 0 && strlen(cpus) + 12 < sizeof(cpus))
			snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d",
				 *cpus ? "," : "", w->cpu);
	}
	int k = 0;
	if (p->parts > 1)
		k = snprintf(buf, len, "; %u workers (the %s thread and %u library thread%s)",
			     p->parts, p->offload ? "calling or offload" : "calling", p->nworkers,
			     p->nworkers > 1 ? "s" : "");
	if (p->offload && (size_t)k < len)
		k += snprintf(buf + k, len - (size_t)k, "; offload ring %llu KiB",
			      (unsigned long long)(p->ring_size / 1024));
	if (*cpus && (size_t)k < len)
		snprintf(buf + k, len - (size_t)k, "; threads pinned to CPUs %s", cpus);
}
