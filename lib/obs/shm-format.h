/* SPDX-License-Identifier: MIT */
/*
 * The live-counter file: what libmultisend (MULTISEND_STATS_SHM, ms_config.stats_shm) and the
 * LD_PRELOAD shim publish, and multisend-stat reads. One file per process, mapped shared by
 * the writer; readers map it read-only and may come and go at any time.
 *
 * Layout: a header, then `nslots` slots of `slot_size` bytes each. Every slot is self-describing
 * (named counters, named histograms), so a reader needs no knowledge of what wrote it.
 *
 * Consistency: each slot has a sequence word, odd while its writer is updating it. A reader
 * copies the slot, and keeps the copy only if the sequence was even and unchanged before and
 * after (a seqlock; the writer never waits). Names are written once, before the slot's state
 * becomes LIVE (with release order); they never change afterwards. The file is only a mirror:
 * a writer keeps its counters in its own memory, and writes the file (the sequence word
 * included, from its own count) without ever reading it back, so that a damaged file (an odd
 * sequence word, garbage values) changes nothing the writing process computes or reports.
 *
 * Ownership and liveness (version 2): the writer that creates the file takes an open file
 * description (OFD) write lock on its first byte (fcntl F_OFD_SETLK, F_WRLCK) before the file
 * has a name, and keeps it as long as its mapping: the descriptor is closed right after mmap
 * (the mapping keeps the open file description, and with it the lock, until munmap, exit or
 * exec; the mapping is MADV_DONTFORK, so a forked child never holds it). "The file has a live
 * owner" is "some open file description holds a write lock on it", which readers and writers
 * test with F_OFD_GETLK (l_type F_RDLCK: only a write lock conflicts). Only an opener with
 * write access (the owner, root) can take a write lock: a reader's read lock or flock never
 * makes a dead file look alive, and never stops a writer, because a writer never locks a file
 * that already has a name:
 *   - a path with no file: the writer creates a new one (O_TMPFILE, else an O_EXCL temporary
 *     name beside it), sizes it, locks it, maps it, fills the header (magic last) and links it
 *     under the path (link: never over a file that appeared meanwhile);
 *   - a path with a file that has no live owner: if it is a regular file of this user, not
 *     writable by group or others, and empty or a live-counter file, a new file made the same
 *     way replaces it: renameat2(RENAME_EXCHANGE) with its temporary name, then the file that
 *     was displaced is looked at; unless it is the stale file judged (another writer replaced
 *     it first), it gets its name back and the path is looked at again (without exchange: the
 *     path checked before a rename(2) and after it). Anything else is left alone. (Without
 *     /proc, an O_TMPFILE file cannot be linked: a temporary name from the start.) An existing file is never
 *     truncated, rewritten or resized in place, so a process still mapping an old file (one
 *     that lost its name) is never hurt by the replacement;
 *   - a path whose file has a live owner: taken only by another copy of this code in the same
 *     process (the LD_PRELOAD shim and the program's own libmultisend), recognised by pid and
 *     pid_start both equal to its own; it maps the file too, takes a write lock of its own
 *     on one byte past the end (if a reader's read lock prevents that, it publishes all the
 *     same) and takes a slot. A copy that holds a lock keeps its mapping while any slot of
 *     the file is still LIVE, so the file keeps its owner while any copy publishes there.
 * A child made without the atfork handlers (_Fork, syscall(SYS_fork), clone) still holds its
 * parent's pointers into mappings it does not have: a word in a MADV_WIPEONFORK page (zero in
 * any child) names the mappings valid in this process, and a writer checks it before every
 * store into the file (lib/internal.h, ms__shm_epoch).
 * pid and pid_start (the process's start time, field 22 of /proc/PID/stat) name the process
 * that created the file; a reader that finds a live owner can check that /proc/PID is that
 * process (same start time, same uid as the file's owner) before calling the file PID's. The
 * lock alone says the owner is alive: the process may be out of the reader's sight (another
 * PID namespace, /proc mounted hidepid).
 *
 * Truncation: a writer stores into its shared mapping of the file, so truncating the file
 * while a writer runs (which takes write access: the owner or root) makes the writer's next
 * store into a page cut off fault (SIGBUS). The writer's handler (lib/obs/shm.c, chained to
 * the program's) maps private memory in the file's place, which drops the writer's lock with
 * the old mapping; the writer's next publication makes a new file under the path the usual
 * way (the truncated one has no live owner: replaced), copies in its slots (names from a
 * private shadow kept since they were written, values from the private memory), moves it to
 * the old mapping's address (mremap) and writes all its values again. A second copy of this
 * code in the process does the same and joins the new file, its slots at their old places.
 * A truncation that keeps the pages a writer stores into is not noticed. Nothing here ever
 * truncates or shrinks a file that has a name; to get rid of a live file, unlink or rename
 * it. (Only a sealed memfd cannot be shrunk, and it has no name another process could open
 * and does not outlive its process; a copy that cannot fault takes a system call per
 * publication. Both break what the file promises: see README.)
 *
 * Compatibility: readers must check magic, version and the sizes, and refuse anything else.
 */
#ifndef MS_SHM_FORMAT_H
#define MS_SHM_FORMAT_H

#include <stdint.h>

#include "multisend.h"

#define MS_SHM_MAGIC UINT64_C(0x3174617473534d6c) /* "lMSstat1", little-endian */
#define MS_SHM_VERSION 4u
#define MS_SHM_SLOTS 64u
#define MS_SHM_COUNTERS 96u
#define MS_SHM_HISTS 4u
#define MS_SHM_NAME 32u

enum ms_shm_state {
	MS_SHM_FREE = 0,   /* never used */
	MS_SHM_LIVE = 1,   /* a writer owns it */
	MS_SHM_CLOSED = 2, /* its writer is done (context freed): the last values stay */
};

struct ms_shm_slot {
	uint64_t seq;      /* seqlock word (atomic): odd while the writer updates the values */
	uint32_t state;    /* enum ms_shm_state (atomic) */
	uint32_t ncounters; /* used entries of counter[] / counter_name[] */
	uint32_t nhists;    /* used entries of hist[] / hist_name[] */
	uint32_t backend;   /* a context's: the enum ms_backend it sends with now (AUTO's
	                       current choice; the loop in a forked child); 0 for the shim's
	                       slot (and in files of libraries before this field) */
	char name[MS_SHM_NAME];                      /* e.g. "ctx 1 io_uring", "shim" */
	char counter_name[MS_SHM_COUNTERS][MS_SHM_NAME]; /* e.g. "fanouts", "dests_failed" */
	char hist_name[MS_SHM_HISTS][MS_SHM_NAME];   /* e.g. "call_last_ns" */
	uint64_t updated_ns; /* CLOCK_REALTIME of the last histogram update (0: none yet) */
	uint64_t counter[MS_SHM_COUNTERS];
	struct ms_hist hist[MS_SHM_HISTS];
};

struct ms_shm_header {
	uint64_t magic;        /* MS_SHM_MAGIC */
	uint32_t version;      /* MS_SHM_VERSION */
	uint32_t header_size;  /* sizeof(struct ms_shm_header) */
	uint32_t slot_size;    /* sizeof(struct ms_shm_slot) */
	uint32_t nslots;       /* MS_SHM_SLOTS */
	uint32_t used;         /* slots handed out so far (atomic; only grows); a slot is
	                          readable once its state is LIVE or CLOSED. A reader must
	                          not trust it past nslots */
	int32_t pid;           /* the publishing process */
	uint64_t start_ns;     /* CLOCK_REALTIME when the file was set up */
	char program[64];      /* the publishing program's name (comm) */
	char lib_version[16];  /* libmultisend version string */
	uint64_t pid_start;    /* the publishing process's start time, in clock ticks after boot
	                          (/proc/PID/stat field 22); 0: unknown */
	uint8_t reserved[56];
};

/* The file's size. */
#define MS_SHM_FILE_SIZE (sizeof(struct ms_shm_header) + MS_SHM_SLOTS * sizeof(struct ms_shm_slot))

#endif
