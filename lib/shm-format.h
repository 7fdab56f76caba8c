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
 * becomes LIVE (with release order); they never change afterwards.
 *
 * Compatibility: readers must check magic, version and the sizes, and refuse anything else.
 */
#ifndef MS_SHM_FORMAT_H
#define MS_SHM_FORMAT_H

#include <stdint.h>

#include "multisend.h"

#define MS_SHM_MAGIC UINT64_C(0x3174617473534d6c) /* "lMSstat1", little-endian */
#define MS_SHM_VERSION 1u
#define MS_SHM_SLOTS 64u
#define MS_SHM_COUNTERS 48u
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
	uint32_t pad;
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
	                          readable once its state is LIVE or CLOSED */
	int32_t pid;           /* the publishing process */
	uint64_t start_ns;     /* CLOCK_REALTIME when the file was set up */
	char program[64];      /* the publishing program's name (comm) */
	char lib_version[16];  /* libmultisend version string */
	uint8_t reserved[64];
};

/* The file's size. */
#define MS_SHM_FILE_SIZE (sizeof(struct ms_shm_header) + MS_SHM_SLOTS * sizeof(struct ms_shm_slot))

#endif
