/* SPDX-License-Identifier: MIT */
/*
 * Descriptor 2: the report and the warnings go there only while it is still the file the
 * process had as stderr. A program started with 2>&-, or one that closed its stderr and then
 * opened a data file (which gets number 2), would otherwise find the report in its data.
 *
 * What 2 was is taken when the shim is loaded, by the shim's only constructor, which makes one
 * fstat(2) and stores its answer (no allocation, no getenv, no thread: see shim.h's rules).
 * The close, dup2 and dup3 wrappers (intercept.c) keep it up to date: a close of 2 forgets it
 * (whatever takes the number next is not stderr); a dup2 or dup3 onto 2 is the program's own
 * choice of a new stderr, and becomes the file compared against. Atomics and fstat only, so
 * a signal handler may close or dup onto 2 too.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "shim.h"

/* Writers: open = false, then the identity, then open = true (release). Two threads changing
 * descriptor 2 at once may leave a mixed identity: the file then matches nothing, and the
 * report goes nowhere rather than somewhere wrong. */
static _Atomic bool err_open;
static _Atomic uint64_t err_dev, err_ino;

static void remember(void)
{
	struct stat st;
	int saved = errno;

	atomic_store_explicit(&err_open, false, memory_order_release);
	if (fstat(2, &st) == 0) {
		atomic_store_explicit(&err_dev, (uint64_t)st.st_dev, memory_order_relaxed);
		atomic_store_explicit(&err_ino, (uint64_t)st.st_ino, memory_order_relaxed);
		atomic_store_explicit(&err_open, true, memory_order_release);
	}
	errno = saved;
}

__attribute__((constructor)) static void shim_stderr_start(void)
{
	remember();
}

void shim_stderr_closed(void)
{
	atomic_store_explicit(&err_open, false, memory_order_release);
}

void shim_stderr_replaced(void)
{
	remember();
}

bool shim_stderr_ok(void)
{
	struct stat st;

	if (!atomic_load_explicit(&err_open, memory_order_acquire))
		return false;
	uint64_t dev = atomic_load_explicit(&err_dev, memory_order_relaxed);
	uint64_t ino = atomic_load_explicit(&err_ino, memory_order_relaxed);
	int saved = errno;
	bool same = fstat(2, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
	errno = saved;
	return same && atomic_load_explicit(&err_open, memory_order_acquire);
}
