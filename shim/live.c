/* SPDX-License-Identifier: MIT */
/*
 * Live counters: with MULTISEND_STATS_SHM set, the shim publishes its totals (those of the
 * report at exit) in a slot named "shim" of that live-counter file (lib/obs/shm-format.h, written
 * through the core's shm.c), which multisend-stat reads while the program runs.
 *
 * The sending threads keep counting as before, in their own rows, and pay this for
 * publishing: an increment and a compare per send call and, every live_every calls, a read
 * of the coarse clock (the vDSO: no system call). live_every adapts so that the clock is read
 * every 1 to 10 ms whatever the call rate. A thread that finds PERIOD_NS gone since its last
 * publication adds up its own rows into its live_pub (atomics, the only part of a thread's
 * state other threads read); if the slot is due too, the first thread to claim it (one
 * compare-and-exchange, never a wait) writes the sum of every thread's live_pub and of the
 * exited threads' into the slot, under the slot's seqlock. In batch mode a thread also
 * try-locks its own batch while adding up (flushes run by other threads write some of its
 * counters); a busy batch means "next time", never a wait.
 *
 * The file itself is created by the first publication (the only system calls on a sending
 * thread, once per process), never before: nothing happens before the first send. The totals
 * are the shim's own (its threads' rows): the slot is written, never read back, its sequence
 * word included, so a damaged file changes nothing the shim counts or reports. The slot
 * is marked closed with the final totals at process exit and exec. A thread's totals move to
 * the retired ones when it exits; a forked child starts from zero, as its report does, and
 * needs a file of its own (a path with %p).
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "shm-format.h"
#include "shim.h"

extern _Atomic uint64_t shim_reentered, shim_sigqueued; /* intercept.c */

#define PERIOD_NS 100000000u /* publish at most this often */
#define EVERY_MAX 4096u      /* at most this many calls between two looks at the clock */

/* The counters, in slot order: the per-thread ones (SHIM_LIVE_THREAD_N), then the
 * process-wide ones. Names as in the report's JSON. */
enum {
	L_CALLS, L_DATAGRAMS, L_BYTES, L_BATCHED, L_PASSED, L_ERRORS, L_FLUSH_ERRORS, L_SYSCALLS,
	L_SYSCALLS_EST, L_RUNS, L_RUN_DESTS, L_SENDMMSG, L_SINGLE,
	L_CALLS_BY,
	L_FLUSHES = L_CALLS_BY + CALL_N,
	L_XDP_FRAMES = L_FLUSHES + FLUSH_N, L_XDP_KICKS,
	L_XDP_FALLBACK, /* SHIM_XR_N - 1 of them, by reason (from 1) */
	L_THREAD_N = L_XDP_FALLBACK + SHIM_XR_N - 1,
	L_REENTERED = L_THREAD_N, L_REQUEUED, L_REOVERFLOW, L_REUNORDERED,
	L_N
};
_Static_assert(L_THREAD_N == SHIM_LIVE_THREAD_N, "shim.h counts the per-thread counters");
_Static_assert(L_N <= MS_SHM_COUNTERS, "the slot holds every counter");

static const char *const fixed_names[L_CALLS_BY] = {
	"calls", "datagrams", "bytes", "batched", "passed_through", "errors", "errors_at_flush",
	"syscalls", "syscalls_if_batched", "fanout_runs", "fanout_destinations", "sendmmsg",
	"single_sends_at_flush",
};

bool shim_live_enabled;

enum { LIVE_OFF, LIVE_ON, LIVE_CLOSED };
static int live_state;             /* under `busy` */
static struct ms_shm_slot *slot;   /* under `busy`; NULL until the first publication */
static uint64_t slot_seq;          /* under `busy`: the slot's sequence word as we last wrote
                                      it (the file's is never read back: lib/obs/shm-format.h) */
static uint64_t slot_epoch;        /* under `busy`: ms__shm_epoch() when slot was opened */
static unsigned slot_gen;           /* under `busy`: ms__shm_gen() when last written in full */
static bool forked, warned;
static _Atomic bool sent;          /* this process made a send: a file is worth making */
static _Atomic bool busy;          /* someone is writing the slot, or retiring a thread */
static _Atomic uint64_t slot_ns;   /* coarse clock of the last claim to publish */
static uint64_t retired[L_THREAD_N]; /* exited threads' totals (under `busy`) */

static uint64_t coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void shim_live_setup(void)
{
	if (shim_cfg.stats_shm[0] && shim_cfg.mode != SHIM_OFF) {
		live_state = LIVE_ON;
		__atomic_store_n(&shim_live_enabled, true, __ATOMIC_RELAXED);
	}
}

/* ---- adding up ---------------------------------------------------------------------------- */

/* t's totals as the report would count them now. The caller owns t, or t's thread is gone
 * or stopped sending (exit). */
static void thread_sum(const struct shim_thread *t, uint64_t *v)
{
	struct shim_counts c = t->live_gone;

	for (uint32_t i = 0; i < t->rows_hi && i < SHIM_SOCK_SLOTS; i++)
		shim_counts_add(&c, &t->rows[i].c);
	shim_counts_add(&c, &t->rows[SHIM_SOCK_SLOTS].c);
	if (shim_cfg.mode == SHIM_METRICS) /* as report.c fills them in */
		c.passed = c.syscalls = c.calls;
	/* A run in progress counts as the run it is so far, as in the report: it only grows. */
	if (t->run_len >= 2) {
		c.runs++;
		c.run_dests += t->run_len;
	}
	if (shim_cfg.mode == SHIM_METRICS)
		c.syscalls_est += t->est.nfds;

	v[L_CALLS] = c.calls;
	v[L_DATAGRAMS] = c.datagrams;
	v[L_BYTES] = c.bytes;
	v[L_BATCHED] = c.batched;
	v[L_PASSED] = c.passed;
	v[L_ERRORS] = c.errors;
	v[L_FLUSH_ERRORS] = c.flush_errors;
	v[L_SYSCALLS] = c.syscalls + c.fsyscalls;
	v[L_SYSCALLS_EST] = c.syscalls_est;
	v[L_RUNS] = c.runs;
	v[L_RUN_DESTS] = c.run_dests;
	v[L_SENDMMSG] = t->fc.sendmmsg_calls;
	v[L_SINGLE] = t->fc.single_sends;
	for (int k = 0; k < CALL_N; k++)
		v[L_CALLS_BY + k] = t->calls_by[k];
	for (int k = 0; k < FLUSH_N; k++)
		v[L_FLUSHES + k] = t->flushes[k];
	v[L_XDP_FRAMES] = t->fc.xdp_frames;
	v[L_XDP_KICKS] = t->fc.xdp_kicks;
	for (int k = 1; k < SHIM_XR_N; k++)
		v[L_XDP_FALLBACK + k - 1] = t->fc.xdp_fallback[k];
}

/* Make t's live_pub current. False when its batch is busy (try again later). */
static bool thread_publish(struct shim_thread *t, bool locked)
{
	uint64_t v[L_THREAD_N];

	if (!locked && t->b && pthread_mutex_trylock(&t->b->lock))
		return false;
	thread_sum(t, v);
	if (!locked && t->b)
		pthread_mutex_unlock(&t->b->lock);
	for (int k = 0; k < L_THREAD_N; k++)
		atomic_store_explicit(&t->live_pub[k], v[k], memory_order_relaxed);
	return true;
}

/* ---- the slot ------------------------------------------------------------------------------ */

/* Claim the right to write the slot. Publications give up at once when someone else has
 * it; thread exit and process exit wait a little for it (the holder never blocks). */
static bool claim(bool wait)
{
	for (unsigned tries = 0;; tries++) {
		if (!atomic_exchange_explicit(&busy, true, memory_order_acquire))
			return true;
		if (!wait || tries >= 10000)
			return false;
		sched_yield();
	}
}

static void release(void)
{
	atomic_store_explicit(&busy, false, memory_order_release);
}

/* The file and the slot, on the first publication (under `busy`). */
static void open_slot(void)
{
	static char names_buf[L_N][MS_SHM_NAME];
	const char *names[L_N];
	int err = 0;

	for (int k = 0; k < L_N; k++) {
		if (k < L_CALLS_BY)
			snprintf(names_buf[k], MS_SHM_NAME, "%s", fixed_names[k]);
		else if (k < L_FLUSHES)
			snprintf(names_buf[k], MS_SHM_NAME, "calls_%s", shim_call_name[k - L_CALLS_BY]);
		else if (k < L_XDP_FRAMES)
			snprintf(names_buf[k], MS_SHM_NAME, "flush_%s", shim_reason_name[k - L_FLUSHES]);
		else if (k >= L_XDP_FALLBACK && k < L_THREAD_N)
			snprintf(names_buf[k], MS_SHM_NAME, "xdp_fallback_%s",
				 shim_xreason_name[k - L_XDP_FALLBACK + 1]);
		names[k] = names_buf[k];
	}
	names[L_XDP_FRAMES] = "xdp_frames";
	names[L_XDP_KICKS] = "xdp_kicks";
	names[L_REENTERED] = "reentered_calls";
	names[L_REQUEUED] = "reentered_queued";
	names[L_REOVERFLOW] = "reentered_overflow";
	names[L_REUNORDERED] = "reentered_unordered";

	slot = ms__shm_open(shim_cfg.stats_shm, "shim", names, L_N, NULL, 0, &err);
	slot_seq = 0; /* a new slot's word starts at zero */
	slot_epoch = ms__shm_epoch();
	slot_gen = ms__shm_gen();
	if (slot)
		return;
	live_state = LIVE_OFF;
	__atomic_store_n(&shim_live_enabled, false, __ATOMIC_RELAXED);
	/* A forked child of a program whose path has no %p finds its parent's file: one
	 * warning from the parent's side is enough (the README says to use %p). */
	if (warned || (forked && err == -EBUSY))
		return;
	warned = true;
	shim_warn("no live counters: MULTISEND_STATS_SHM '%.200s': %s", shim_cfg.stats_shm,
		  err == -EBUSY ? "another running process publishes there (use %p in the path)"
		  : err == -EEXIST ? "the file exists and is not a live-counter file"
				   : ms_strerror(err));
}

/* Write the sum of every thread's published totals into the slot (under `busy`). */
static void write_slot(void)
{
	uint64_t v[L_N];

	if (slot && !ms__shm_here(slot_epoch)) {
		/* A child made without the atfork handlers (_Fork, syscall(SYS_fork), clone):
		 * the slot is in its parent's mapping, which it does not have (MADV_DONTFORK).
		 * Never touch it; and the totals it would publish are its parent's: none. */
		slot = NULL;
		live_state = LIVE_OFF;
		__atomic_store_n(&shim_live_enabled, false, __ATOMIC_RELAXED);
		return;
	}
	if (live_state != LIVE_ON)
		return;
	if (!slot)
		open_slot();
	if (!slot)
		return;
	/* The file was truncated under a store (lib/internal.h): every value is written below
	 * anyway, into the new file once there is one. */
	if (slot_gen != ms__shm_gen())
		ms__shm_caught_up(&slot_gen);
	memcpy(v, retired, sizeof(retired));
	/* The registry only grows and its states are never unmapped; a state not in use has
	 * a zero live_pub, so no lock is needed to walk it. */
	for (struct shim_thread *t = __atomic_load_n(&shim_registry, __ATOMIC_ACQUIRE); t;
	     t = t->next)
		for (int k = 0; k < L_THREAD_N; k++)
			v[k] += atomic_load_explicit(&t->live_pub[k], memory_order_relaxed);
	v[L_REENTERED] = atomic_load_explicit(&shim_reentered, memory_order_relaxed);
	v[L_REQUEUED] = atomic_load_explicit(&shim_sigqueued, memory_order_relaxed);
	v[L_REOVERFLOW] = atomic_load_explicit(&shim_sigoverflow, memory_order_relaxed);
	v[L_REUNORDERED] = atomic_load_explicit(&shim_sigunordered, memory_order_relaxed);

	uint64_t seq = slot_seq | 1;
	__atomic_store_n(&slot->seq, seq, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (int k = 0; k < L_N; k++)
		__atomic_store_n(&slot->counter[k], v[k], __ATOMIC_RELAXED);
	__atomic_store_n(&slot->updated_ns, ms__realtime_ns(), __ATOMIC_RELAXED);
	slot_seq = seq + 1;
	__atomic_store_n(&slot->seq, slot_seq, __ATOMIC_RELEASE);
}

/* ---- when ---------------------------------------------------------------------------------- */

void shim_live_tick(struct shim_thread *t)
{
	int saved = errno;
	uint64_t now = coarse_ns();
	uint64_t dt = now - t->live_check_ns;

	t->live_tick = 0;
	t->live_check_ns = now;
	atomic_store_explicit(&sent, true, memory_order_relaxed);
	if (!t->live_every)
		t->live_every = 1;
	else if (dt < 1000000 && t->live_every < EVERY_MAX)
		t->live_every *= 2;
	else if (dt > 10000000 && t->live_every > 1)
		t->live_every /= 2;

	if (now - t->live_pub_ns >= PERIOD_NS && thread_publish(t, false)) {
		t->live_pub_ns = now;
		uint64_t last = atomic_load_explicit(&slot_ns, memory_order_relaxed);
		if ((!last || now - last >= PERIOD_NS) &&
		    atomic_compare_exchange_strong_explicit(&slot_ns, &last, now,
							    memory_order_relaxed,
							    memory_order_relaxed) &&
		    claim(false)) {
			write_slot();
			release();
		}
	}
	errno = saved;
}

void shim_live_idle(struct shim_thread *t)
{
	if (coarse_ns() - t->live_pub_ns >= PERIOD_NS)
		shim_live_tick(t);
}

void shim_live_retire(struct shim_thread *t)
{
	uint64_t v[L_THREAD_N];

	if (!__atomic_load_n(&shim_live_enabled, __ATOMIC_RELAXED) || !t->counted)
		return;
	thread_sum(t, v);
	bool mine = claim(true);
	for (int k = 0; k < L_THREAD_N; k++) {
		retired[k] += v[k];
		atomic_store_explicit(&t->live_pub[k], 0, memory_order_relaxed);
	}
	if (mine)
		release();
}

void shim_live_final(bool may_wait, bool reopen)
{
	struct shim_thread *t = shim_self;

	if (!__atomic_load_n(&shim_live_enabled, __ATOMIC_RELAXED) ||
	    !atomic_load_explicit(&sent, memory_order_relaxed))
		return; /* a process that sent nothing makes no file (nor a report) */
	int saved = errno;
	/* Everything this thread sent, exactly (its batch is flushed, nothing is pending);
	 * other running threads as of their last publication. */
	if (t && t->counted && may_wait)
		thread_publish(t, true);
	if (!claim(may_wait)) {
		errno = saved;
		return;
	}
	write_slot();
	if (slot) {
		ms__shm_close(slot);
		slot = NULL;
	}
	if (live_state == LIVE_ON && !reopen) {
		live_state = LIVE_CLOSED;
		__atomic_store_n(&shim_live_enabled, false, __ATOMIC_RELAXED);
	}
	release();
	errno = saved;
}

void shim_live_after_fork_child(void)
{
	/* The parent's mapping is inherited; shm.c drops it at the child's first open. */
	slot = NULL;
	forked = true;
	atomic_store_explicit(&sent, false, memory_order_relaxed);
	memset(retired, 0, sizeof(retired));
	atomic_store(&slot_ns, 0);
	atomic_store(&busy, false);
	live_state = LIVE_OFF;
	__atomic_store_n(&shim_live_enabled, false, __ATOMIC_RELAXED);
	shim_live_setup();
}
