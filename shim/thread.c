/* SPDX-License-Identifier: MIT */
/*
 * Per-thread state and the process's life around it: creation on a thread's first send,
 * thread exit (a pthread key destructor), fork (atfork handlers), exec and process exit.
 *
 * States are mmap'd, never malloc'd (a send may come from a signal handler that interrupted
 * malloc), kept in one registry list, and reused after their thread exits, so thread churn
 * does not grow memory. Counters of exited threads are folded into `retired` first.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim.h"

pthread_mutex_t shim_registry_lock = PTHREAD_MUTEX_INITIALIZER;
struct shim_thread *shim_registry;
SHIM_TLS struct shim_thread *shim_self;
_Atomic bool shim_exiting;

static pthread_key_t key;
static bool key_ok;
static struct shim_thread *retired; /* counters and rows of exited threads */
static _Atomic bool reported;


static void *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static size_t rows_size(void)
{
	return (SHIM_SOCK_SLOTS + 1) * sizeof(struct shim_sockrow);
}

/* A zeroed state with its rows and payload copy. */
static struct shim_thread *state_new(void)
{
	struct shim_thread *t = map(sizeof(*t));
	if (!t)
		return NULL;
	t->rows = map(rows_size());
	t->lastbuf = map(SHIM_LAST_MAX);
	if (!t->rows || !t->lastbuf)
		return NULL; /* leaks a page or two, once, when memory is gone anyway */
	t->last_len = SIZE_MAX;
	return t;
}

static void counters_reset(struct shim_thread *t)
{
	memset(t->calls_by, 0, sizeof(t->calls_by));
	memset(t->errs, 0, sizeof(t->errs));
	memset(t->flushes, 0, sizeof(t->flushes));
	memset(&t->fc, 0, sizeof(t->fc));
	memset(t->rows, 0, rows_size());
	t->last_len = SIZE_MAX;
	t->run_len = 0;
	t->run_row = NULL;
	shim_plan_reset(&t->est);
	t->counted = false;
	t->live_tick = t->live_every = 0;
	t->live_check_ns = t->live_pub_ns = 0;
	t->rows_hi = 0;
	memset(&t->live_gone, 0, sizeof(t->live_gone));
	for (int k = 0; k < SHIM_LIVE_THREAD_N; k++)
		atomic_store_explicit(&t->live_pub[k], 0, memory_order_relaxed);
}

static void thread_gone(void *p);

/* Called once from shim_init (resolve.c), after the configuration is read. */
void shim_thread_setup(void)
{
	key_ok = pthread_key_create(&key, thread_gone) == 0;
	pthread_atfork(shim_before_fork, shim_after_fork_parent, shim_after_fork_child);
	pthread_mutex_lock(&shim_registry_lock);
	retired = state_new();
	pthread_mutex_unlock(&shim_registry_lock);
}

struct shim_thread *shim_thread_new(void)
{
	struct shim_thread *t;

	pthread_mutex_lock(&shim_registry_lock);
	for (t = shim_registry; t; t = t->next)
		if (!t->in_use)
			break;
	if (t) {
		counters_reset(t);
	} else if ((t = state_new())) {
		t->next = shim_registry;
		/* live.c walks the list without the lock: t is complete before it is seen. */
		__atomic_store_n(&shim_registry, t, __ATOMIC_RELEASE);
	}
	if (t)
		t->in_use = true;
	/* A second thread the shim sees: the program is threaded, however it made the thread. */
	for (struct shim_thread *o = shim_registry; t && o; o = o->next)
		if (o != t && o->in_use)
			atomic_store(&shim_program_threaded, true);
	pthread_mutex_unlock(&shim_registry_lock);
	if (!t)
		return NULL;
	shim_self = t;
	if (key_ok)
		pthread_setspecific(key, t);
	return t;
}

bool shim_thread_batch(struct shim_thread *t)
{
	if (likely(t->b))
		return true;
	/* The header alone is wiped in a forked child; the arrays it indexes need not be. */
	struct shim_batch *b = map(4096);
	if (!b)
		return false;
	if (madvise(b, 4096, MADV_WIPEONFORK) < 0) {
		munmap(b, 4096);
		return false; /* without it a child could send its parent's batch: never batch */
	}
	t->msgs = map(SHIM_BATCH_MAX_LIMIT * sizeof(*t->msgs));
	t->arena = map(SHIM_ARENA);
	t->mm = map(SHIM_BATCH_MAX_LIMIT * sizeof(*t->mm));
	t->iov = map(SHIM_BATCH_MAX_LIMIT * sizeof(*t->iov));
	t->sigq = map(SHIM_SIGQ * sizeof(*t->sigq));
	if (!t->msgs || !t->arena || !t->mm || !t->iov || !t->sigq)
		return false;
	_Static_assert(sizeof(struct shim_batch) <= 4096, "the batch header is one page");
	t->b = b; /* all-zero is a valid unlocked mutex and an empty batch */
	return true;
}

struct shim_thread *shim_retired(void)
{
	return retired;
}

/* Fold t's counters into `retired` (under the registry lock). */
static void retire(struct shim_thread *t)
{
	if (!retired || !t->counted)
		return;
	for (int k = 0; k < CALL_N; k++)
		retired->calls_by[k] += t->calls_by[k];
	for (int k = 0; k < SHIM_ERRNO_MAX; k++)
		retired->errs[k] += t->errs[k];
	for (int k = 0; k < FLUSH_N; k++)
		retired->flushes[k] += t->flushes[k];
	shim_fcounts_add(&retired->fc, &t->fc);
	retired->counted = true;
	shim_report_retire_rows(t);
}

/* pthread key destructor: the thread is exiting. */
static void thread_gone(void *p)
{
	struct shim_thread *t = p;
	int g = shim_guard;

	shim_guard = 1;
	if (t->b)
		shim_flush_thread(t, FLUSH_THREAD_EXIT);
	shim_count_thread_end(t);
	shim_live_retire(t);
	pthread_mutex_lock(&shim_registry_lock);
	retire(t);
	t->in_use = false;
	pthread_mutex_unlock(&shim_registry_lock);
	shim_self = NULL;
	shim_guard = g;
}

void shim_flush_all(enum shim_reason why)
{
	pthread_mutex_lock(&shim_registry_lock);
	for (struct shim_thread *t = shim_registry; t; t = t->next)
		if (t->in_use && t->b)
			shim_flush_thread(t, why);
	pthread_mutex_unlock(&shim_registry_lock);
}

void shim_exit_hook(void)
{
	if (atomic_exchange(&reported, true))
		return;
	int g = shim_guard;
	shim_guard = 1;
	/* From here on everything passes through: a send made after the last flush (another
	 * thread, a later destructor) must not be left in a batch nobody will flush. */
	atomic_store(&shim_exiting, true);
	if (!g) {
		shim_flush_all(FLUSH_EXIT);
	} else if (pthread_mutex_trylock(&shim_registry_lock) == 0) {
		/* exit() from a signal handler that interrupted the shim: this thread's batch
		 * may be mid-update, so only the others are flushed. */
		for (struct shim_thread *t = shim_registry; t; t = t->next)
			if (t->in_use && t->b && t != shim_self)
				shim_flush_thread(t, FLUSH_EXIT);
		pthread_mutex_unlock(&shim_registry_lock);
	}
	shim_live_final(!g, false);
	shim_report_write();
	shim_guard = g;
}

/* ---- fork ----------------------------------------------------------------------------------- */

void shim_before_fork(void)
{
	int g = shim_guard;
	shim_guard = 1;
	if (!g)
		shim_flush_own(FLUSH_FORK);
	pthread_mutex_lock(&shim_registry_lock);
	shim_guard = g;
}

void shim_after_fork_parent(void)
{
	pthread_mutex_unlock(&shim_registry_lock);
}

void shim_after_fork_child(void)
{
	/* Only this thread exists here. The batches are already empty (their headers are
	 * MADV_WIPEONFORK pages); the counters are the parent's and are dropped, so the child
	 * reports only what it sends itself. */
	pthread_mutex_init(&shim_registry_lock, NULL);
	for (struct shim_thread *t = shim_registry; t; t = t->next) {
		if (t != shim_self)
			t->in_use = false;
		counters_reset(t);
	}
	if (retired) {
		counters_reset(retired);
		shim_report_retire_rows(NULL); /* forget the parent's retired rows */
	}
	shim_reentry_reset();
	atomic_store(&reported, false);
	shim_batch_after_fork_child();
	shim_live_after_fork_child();
	shim_xport_after_fork_child();
}
