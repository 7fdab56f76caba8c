/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: ms_ctx_new with arbitrary configuration bytes (any size field, flags, backend,
 * queue depth, timestamp sampling, the xdp fields, and tail; the live-counter path, the CPU list
 * and the xdp interface name from small tables) and arbitrary MULTISEND_* environment values.
 * The call must either
 * fail with one of its documented errors or give a working context whose backend is real;
 * a working context must send to a real AF_UNIX pair.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "multisend.h"

#define CHECK(c)                                                                             \
	do {                                                                                 \
		if (!(c)) {                                                                  \
			fprintf(stderr, "fuzz-config: check failed: %s (line %d)\n", #c, __LINE__); \
			abort();                                                             \
		}                                                                            \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int sv[2] = { -1, -1 };
	if (sv[0] < 0 && socketpair(AF_UNIX, SOCK_DGRAM, 0, sv))
		abort();

	/* The first bytes pick environment values; the rest is the config, read in place from
	 * a buffer as large as the largest size the library accepts. */
	static const char *const env_names[] = { "MULTISEND_BACKEND", "MULTISEND_NO_LOOP",
						 "MULTISEND_NO_SENDMMSG", "MULTISEND_NO_IO_URING" };
	static const char *const env_values[] = { NULL, "", "0", "1", "loop", "sendmmsg",
						  "io_uring", "auto", "bogus" };
	size_t k = 0;
	for (size_t e = 0; e < 4; e++, k++) {
		const char *v = k < size ? env_values[data[k] % 9] : NULL;
		if (v)
			setenv(env_names[e], v, 1);
		else
			unsetenv(env_names[e]);
	}
	static unsigned char buf[8192];
	memset(buf, 0, sizeof(buf));
	size_t n = size - (k < size ? k : size);
	memcpy(buf, data + (size - n), n < sizeof(buf) ? n : sizeof(buf));
	struct ms_config *cfg = (struct ms_config *)buf;
	bool null_cfg = n == 0;
	if (cfg->size > sizeof(buf))
		cfg->size %= sizeof(buf); /* the library reads size bytes: stay inside the buffer */
	/* stats_shm is a pointer: its bytes choose one of these instead (a file that cannot be
	 * created leaves the context working, publishing nowhere). */
	static char too_long[5000];
	if (!too_long[0])
		memset(too_long, 'a', sizeof(too_long) - 1);
	const char *const shm_values[] = { "", too_long, "/proc/nonexistent/ms-%p" };
	uintptr_t raw = (uintptr_t)cfg->stats_shm;
	cfg->stats_shm = raw ? shm_values[raw % 3] : NULL;
	/* cpus is a pointer too: a list of CPUs that exist here, or one that does not. */
	static const int cpu_lists[][2] = { { 0, 0 }, { 0, 1 }, { 4095, 0 }, { -1, 0 } };
	uintptr_t rc = (uintptr_t)cfg->cpus;
	cfg->cpus = rc ? cpu_lists[rc % 4] : NULL;
	if (cfg->cpus && cfg->ncpus > 2)
		cfg->ncpus %= 3; /* the list has two entries */
	/* xdp_ifname is a pointer as well: a name the rules refuse (empty, too long, a '/'), or
	 * one they take that no usable interface has here (lo is not Ethernet). */
	const char *const if_values[] = { "", "0123456789abcdef", "a/b", "lo", "nosuch0" };
	uintptr_t ri = (uintptr_t)cfg->xdp_ifname;
	cfg->xdp_ifname = ri ? if_values[ri % 5] : NULL;
	unsetenv("MULTISEND_STATS_SHM");

	struct ms_ctx *ctx = NULL;
	int err = ms_ctx_new(&ctx, null_cfg ? NULL : cfg);
	if (err) {
		/* The xdp backend asked for by name, without fallback: its set-up's own error
		 * (no such interface, not Ethernet, down, its queue taken, locked memory). */
		const bool xdp_only = !null_cfg && cfg->backend == MS_BACKEND_XDP &&
				      (cfg->flags & MS_CFG_NO_FALLBACK);
		/* The kfanout backend likewise: pins it may not open, a kernel without bpf(2) or
		 * mmap-able maps. */
		const bool kf_only = !null_cfg && cfg->backend == MS_BACKEND_KFANOUT &&
				     (cfg->flags & MS_CFG_NO_FALLBACK);
		CHECK(err == -EINVAL || err == -ENOTSUP || err == -ENOMEM || err == -EPERM ||
		      (kf_only && (err == -EACCES || err == -ENOSYS)) ||
		      (xdp_only && (err == -ENODEV || err == -EPROTONOSUPPORT || err == -ENETDOWN ||
				    err == -EBUSY || err == -ENOBUFS)));
		CHECK(!null_cfg || err == -ENOTSUP); /* defaults fail only when all are disabled */
		return 0;
	}
	enum ms_backend b = ms_ctx_backend(ctx);
	CHECK(b >= MS_BACKEND_LOOP && b <= MS_BACKEND_KFANOUT);
	if (!null_cfg) {
		/* This layout or a newer one: never a size that cuts the struct short. */
		CHECK(cfg->size >= sizeof(struct ms_config) && cfg->size <= 4096);
		CHECK((cfg->flags & ~MS_CFG_ALL_FLAGS) == 0 && cfg->backend <= MS_BACKEND_KFANOUT);
		/* Kernel bypass: a queue only with its flag, frames a power of two in range, a
		 * name an interface can have. */
		CHECK(!cfg->xdp_queue || (cfg->flags & MS_CFG_XDP_QUEUE));
		CHECK(!cfg->xdp_frames || (cfg->xdp_frames >= 64 && cfg->xdp_frames <= 65536 &&
					   !(cfg->xdp_frames & (cfg->xdp_frames - 1))));
		CHECK(!cfg->xdp_ifname || (*cfg->xdp_ifname && strlen(cfg->xdp_ifname) < 16 &&
					   !strchr(cfg->xdp_ifname, '/')));
		CHECK(cfg->queue_depth <= 32768 && cfg->zc_min <= 65536);
		CHECK(cfg->ts_sample <= 1000000000u && (cfg->ts_flags & ~MS_TS_ALL_FLAGS) == 0);
		CHECK(!cfg->ts_flags || cfg->ts_sample);
		CHECK(!cfg->stats_shm || (*cfg->stats_shm && strlen(cfg->stats_shm) < 4096));
		bool offload = cfg->flags & MS_CFG_OFFLOAD;
		uint32_t threads = (cfg->workers ? cfg->workers : 1) - 1 + offload;
		CHECK(cfg->workers <= 64 && cfg->spin_us <= 1000000);
		CHECK(!cfg->offload_kib ||
		      (offload && cfg->offload_kib >= 64 && cfg->offload_kib <= 1048576));
		/* The library threads' fields only with library threads; cpus with ncpus. */
		CHECK(!cfg->spin_us || threads);
		CHECK(cfg->ncpus <= threads && !cfg->ncpus == !cfg->cpus);
	}
	bool offload = !null_cfg && (cfg->flags & MS_CFG_OFFLOAD);
	struct ms_group *g;
	CHECK(ms_group_new(ctx, &g) == 0);
	struct ms_dest d = { .fd = sv[1] };
	CHECK(ms_group_add(g, &d) == 0);
	struct ms_result res;
	/* ms_send is synchronous with its results whatever the flags; ms_post needs offload. */
	CHECK(ms_send(g, "x", 1, 0, &res) == 1 && res.status == 1);
	char c;
	CHECK(recv(sv[0], &c, 1, MSG_DONTWAIT) == 1 && c == 'x');
	uint64_t seq = 0;
	if (offload) { /* the count handed over and its number, then the counters */
		CHECK(ms_post(g, "y", 1, 0, &seq) == 1 && seq == 1);
		CHECK(ms_ctx_drain(ctx) == 0);
		struct ms_stats st = { .size = sizeof(st) };
		CHECK(ms_ctx_stats(ctx, &st) == 0 && st.dests_accepted == 2 && st.offload_msgs == 1);
		struct ms_post_error pe;
		CHECK(ms_ctx_post_errors(ctx, &pe, 1, NULL) == 0);
		CHECK(recv(sv[0], &c, 1, MSG_DONTWAIT) == 1 && c == 'y');
	} else {
		CHECK(ms_post(g, "y", 1, 0, &seq) == -ENOTSUP && seq == 0);
		CHECK(recv(sv[0], &c, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN);
	}
	ms_group_free(g);
	ms_ctx_free(ctx);
	return 0;
}
