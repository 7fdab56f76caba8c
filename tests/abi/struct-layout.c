/* SPDX-License-Identifier: MIT */
/* Sizes and member offsets of the public structs, against the values of the first release's
 * ABI (LIBMULTISEND_0.1) written below. Nothing is released yet; once it is, a change here
 * breaks programs built against an older header: new members go at the END of a
 * size-versioned struct (ms_config, ms_stats, whose end is also ms_snapshot's), and ms_dest
 * and ms_result, which callers pass as arrays, never change. If a change is meant after the
 * release, it needs a new version node in lib/libmultisend.map, and then new values here. */
#include <multisend.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Pointers: 4 bytes on ILP32, 8 on LP64 (ms_dest, ms_post_error and ms_config hold some).
 * ms_config's first pointer follows eleven uint32_t. */
#define PTR ((unsigned)sizeof(void *))
#define CFG_PTRS ((44 + PTR - 1) / PTR * PTR)
struct align64 {
	char c;
	uint64_t x;
};
#define A64 ((unsigned)offsetof(struct align64, x))

struct row {
	const char *what;
	size_t got;
	size_t want;
};

#define SIZE(type, want) { "sizeof(" #type ")", sizeof(type), want }
#define OFF(type, member, want) { "  " #member, offsetof(type, member), want }

static const struct row rows[] = {
	SIZE(enum ms_backend, 4),

	/* Eleven uint32_t, then the two pointers (aligned). */
	SIZE(struct ms_config, CFG_PTRS + 3 * PTR + (8 + PTR - 1) / PTR * PTR),
	OFF(struct ms_config, size, 0),
	OFF(struct ms_config, backend, 4),
	OFF(struct ms_config, flags, 8),
	OFF(struct ms_config, queue_depth, 12),
	OFF(struct ms_config, zc_min, 16),
	OFF(struct ms_config, ts_sample, 20),
	OFF(struct ms_config, ts_flags, 24),
	OFF(struct ms_config, workers, 28),
	OFF(struct ms_config, offload_kib, 32),
	OFF(struct ms_config, spin_us, 36),
	OFF(struct ms_config, ncpus, 40),
	OFF(struct ms_config, cpus, CFG_PTRS),
	OFF(struct ms_config, stats_shm, CFG_PTRS + PTR),
	OFF(struct ms_config, xdp_ifname, CFG_PTRS + 2 * PTR),
	OFF(struct ms_config, xdp_queue, CFG_PTRS + 3 * PTR),
	OFF(struct ms_config, xdp_frames, CFG_PTRS + 3 * PTR + 4),

	SIZE(struct ms_stats, 8 + 8 * 69),
	OFF(struct ms_stats, size, 0),
	OFF(struct ms_stats, reserved, 4),
	OFF(struct ms_stats, fanouts, 8),
	OFF(struct ms_stats, dests_attempted, 16),
	OFF(struct ms_stats, dests_accepted, 24),
	OFF(struct ms_stats, dests_partial, 32),
	OFF(struct ms_stats, dests_failed, 40),
	OFF(struct ms_stats, bytes, 48),
	OFF(struct ms_stats, syscalls, 56),
	OFF(struct ms_stats, err_again, 64),
	OFF(struct ms_stats, err_nobufs, 72),
	OFF(struct ms_stats, err_msgsize, 80),
	OFF(struct ms_stats, err_unreach, 88),
	OFF(struct ms_stats, err_conn, 96),
	OFF(struct ms_stats, err_badf, 104),
	OFF(struct ms_stats, err_other, 112),
	OFF(struct ms_stats, slow_queued, 120),
	OFF(struct ms_stats, slow_dropped, 128),
	OFF(struct ms_stats, slow_removed, 136),
	OFF(struct ms_stats, backlog_bytes, 144),
	OFF(struct ms_stats, backlog_discarded, 152),
	OFF(struct ms_stats, offload_msgs, 160),
	OFF(struct ms_stats, offload_waits, 168),
	OFF(struct ms_stats, offload_refused, 176),
	OFF(struct ms_stats, zc_sends, 184),
	OFF(struct ms_stats, zc_copied, 192),
	OFF(struct ms_stats, ts_sampled, 200),
	OFF(struct ms_stats, ts_requested, 208),
	OFF(struct ms_stats, ts_stamped, 216),
	OFF(struct ms_stats, ts_missing, 224),
	OFF(struct ms_stats, ts_unsupported, 232),
	OFF(struct ms_stats, ts_foreign, 240),
	OFF(struct ms_stats, ts_late, 248),
	OFF(struct ms_stats, auto_sampled, 256),
	OFF(struct ms_stats, auto_explored, 264),
	OFF(struct ms_stats, auto_decisions, 272),
	OFF(struct ms_stats, auto_switches, 280),
	OFF(struct ms_stats, auto_backend, 288),
	OFF(struct ms_stats, auto_ns_loop, 296),
	OFF(struct ms_stats, auto_ns_sendmmsg, 304),
	OFF(struct ms_stats, auto_ns_io_uring, 312),
	OFF(struct ms_stats, xdp_frames, 320),
	OFF(struct ms_stats, xdp_kicks, 328),
	OFF(struct ms_stats, xdp_fallback_local, 336),
	OFF(struct ms_stats, xdp_fallback_iface, 344),
	OFF(struct ms_stats, xdp_fallback_mtu, 352),
	OFF(struct ms_stats, xdp_fallback_route, 360),
	OFF(struct ms_stats, xdp_fallback_neigh, 368),
	OFF(struct ms_stats, xdp_fallback_other, 376),
	OFF(struct ms_stats, auto_ns_xdp, 384),
	OFF(struct ms_stats, ts_hw_stamped, 392),
	OFF(struct ms_stats, ts_hw_unavailable, 400),
	OFF(struct ms_stats, fork_fallback, 408),
	OFF(struct ms_stats, kfanout_templates, 416),
	OFF(struct ms_stats, kfanout_clones, 424),
	OFF(struct ms_stats, kfanout_refused, 432),
	OFF(struct ms_stats, kfanout_clone_err, 440),
	OFF(struct ms_stats, kfanout_reclaimed, 448),
	OFF(struct ms_stats, kfanout_fallback_local, 456),
	OFF(struct ms_stats, kfanout_fallback_iface, 464),
	OFF(struct ms_stats, kfanout_fallback_mtu, 472),
	OFF(struct ms_stats, kfanout_fallback_route, 480),
	OFF(struct ms_stats, kfanout_fallback_neigh, 488),
	OFF(struct ms_stats, kfanout_fallback_other, 496),
	OFF(struct ms_stats, auto_ns_kfanout, 504),
	OFF(struct ms_stats, auto_clock_low, 512),
	OFF(struct ms_stats, auto_cpu_ns_loop, 520),
	OFF(struct ms_stats, auto_cpu_ns_sendmmsg, 528),
	OFF(struct ms_stats, auto_cpu_ns_io_uring, 536),
	OFF(struct ms_stats, auto_cpu_ns_xdp, 544),
	OFF(struct ms_stats, auto_cpu_ns_kfanout, 552),

	SIZE(struct ms_slow_config, 16),
	OFF(struct ms_slow_config, size, 0),
	OFF(struct ms_slow_config, policy, 4),
	OFF(struct ms_slow_config, overflow, 8),
	OFF(struct ms_slow_config, queue_limit, 12),

	SIZE(struct ms_result, 8),
	OFF(struct ms_result, id, 0),
	OFF(struct ms_result, status, 4),

	SIZE(struct ms_slow_result, 24),
	OFF(struct ms_slow_result, id, 0),
	OFF(struct ms_slow_result, status, 4),
	OFF(struct ms_slow_result, flags, 8),
	OFF(struct ms_slow_result, pos, 12),
	OFF(struct ms_slow_result, backlog, 16),

	SIZE(struct ms_hist, 32 + 8 * MS_HIST_BUCKETS),
	OFF(struct ms_hist, count, 0),
	OFF(struct ms_hist, sum_ns, 8),
	OFF(struct ms_hist, min_ns, 16),
	OFF(struct ms_hist, max_ns, 24),
	OFF(struct ms_hist, bucket, 32),

	/* A snapshot's own fields never move: struct ms_stats, which grows, is last. */
	SIZE(struct ms_snapshot, 24 + 4 * (32 + 8 * MS_HIST_BUCKETS) + 8 + 8 * 69),
	OFF(struct ms_snapshot, size, 0),
	OFF(struct ms_snapshot, backend, 4),
	OFF(struct ms_snapshot, ts_sample, 8),
	OFF(struct ms_snapshot, reserved, 12),
	OFF(struct ms_snapshot, taken_ns, 16),
	OFF(struct ms_snapshot, call_first, 24),
	OFF(struct ms_snapshot, call_last, 24 + (32 + 8 * MS_HIST_BUCKETS)),
	OFF(struct ms_snapshot, first_last, 24 + 2 * (32 + 8 * MS_HIST_BUCKETS)),
	OFF(struct ms_snapshot, dest_lag, 24 + 3 * (32 + 8 * MS_HIST_BUCKETS)),
	OFF(struct ms_snapshot, stats, 24 + 4 * (32 + 8 * MS_HIST_BUCKETS)),

	SIZE(struct ms_ts_dest, 32),
	OFF(struct ms_ts_dest, id, 0),
	OFF(struct ms_ts_dest, flags, 4),
	OFF(struct ms_ts_dest, pos, 8),
	OFF(struct ms_ts_dest, ifindex, 12),
	OFF(struct ms_ts_dest, sched_ns, 16),
	OFF(struct ms_ts_dest, snd_ns, 24),

	SIZE(struct ms_post_error, (24 + PTR + A64 - 1) / A64 * A64),
	OFF(struct ms_post_error, seq, 0),
	OFF(struct ms_post_error, id, 8),
	OFF(struct ms_post_error, status, 12),
	OFF(struct ms_post_error, flags, 16),
	OFF(struct ms_post_error, pad, 20),
	OFF(struct ms_post_error, g, 24),

	SIZE(struct ms_dest, 8 + PTR),
	OFF(struct ms_dest, fd, 0),
	OFF(struct ms_dest, addrlen, 4),
	OFF(struct ms_dest, addr, 8),
};

int main(void)
{
	unsigned i, bad = 0;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		int ok = r->got == r->want;

		printf("%-28s %4zu%s", r->what, r->got, ok ? "\n" : "");
		if (!ok)
			printf("   WRONG: the released ABI has %zu\n", r->want);
		bad += !ok;
	}
	if (bad)
		printf("FAIL: %u size(s)/offset(s) differ from the released ABI\n", bad);
	else
		printf("OK: layout matches the released ABI\n");
	return bad ? 1 : 0;
}
