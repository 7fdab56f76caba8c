/* SPDX-License-Identifier: MIT */
/* Timed runs on a rig, shared by the throughput, latency and capacity modes. */
#ifndef BENCH_RUN_H
#define BENCH_RUN_H

#include "workload.h"

/*
 * Before sending up to want fan-outs: if the sink's queues could overflow, drain them and
 * send one untimed fan-out of v so the next timed call does not pay for the drain's cold
 * caches. Returns how many fan-outs may be sent now (1..want), or -errno. Under offload the
 * caller has synced (rig_sync) what it handed over before: a message still in the ring would
 * arrive after the drain and could overflow a queue.
 */
int64_t rig_room(struct rig *r, enum variant_id v, uint64_t want);

/*
 * One timed run: iterations fan-outs of v in bursts of at most max_burst, with the clocks,
 * library counters and (deliver) receiver CPU read around each burst only. Kernel counters
 * are read around the whole run and, for deliver, after the receivers have caught up.
 * Returns 0, -EINTR when stopped, or -errno.
 */
int timed_run(struct session *s, struct rig *r, enum variant_id v, uint64_t iterations,
	      uint64_t max_burst, struct sample *out);

/* Send with v until at least min_ns of timed sending has passed (a warm-up that also
 * measures). Adds its runs' counts to *acc unless acc is NULL (sample_add). Returns wall ns per
 * fan-out, or a negative errno. */
double rig_calibrate(struct session *s, struct rig *r, enum variant_id v, uint64_t min_ns,
		     struct sample *acc);

/* AUTO's first --auto-warmup seconds of real sends on r, in timed batches doubling up to
 * about 50 ms, summed into *acc unless acc is NULL. 0 or -errno (-EINTR when stopped). */
int auto_warmup_send(struct session *s, struct rig *r, enum variant_id v, struct sample *acc);

/* Add x's counts (sends, deliver counts, drops, library and kernel counters, times) to acc. */
void sample_add(struct sample *acc, const struct sample *x);

/* Drops over a run: the sink's own receivers' counters since sink0 (= sink_drops at the start),
 * or for netns-drop, from the namespace's UDP counters dk, what was lost of the accepted
 * datagrams (destination-sends the sender was told were taken over the run). */
uint64_t run_drops(const struct session *s, const struct rig *r, const struct kstat *dk,
		   uint64_t sink0, uint64_t accepted);

/* The "+wK+ts" variants' skew over their "+ts" variant's (ts_result.skew_ratio), where both
 * ran in the same rounds: ts[i] (may be NULL) belongs to act[i]. */
void ts_relate(const enum variant_id *act, struct ts_result *const *ts, unsigned n);

/* The variants that will run, in interleaving order. */
unsigned active_variants(const struct session *s, enum variant_id out[V_COUNT]);

/* The device whose drops kstat reads (netns-drop), else NULL. */
const char *kstat_dev(const struct session *s);

#endif
