/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kfanout.h"
#include "netns.h"
#include "raw.h"
#include "workload.h"

static const char *const names[V_COUNT] = {
	[V_RAW] = "raw-sendto",
	[V_RAW_SENDMMSG] = "raw-sendmmsg",
	[V_RAW_IO_URING] = "raw-io_uring",
	[V_LOOP] = "loop",
	[V_SENDMMSG] = "sendmmsg",
	[V_IO_URING] = "io_uring",
	[V_RAW_DW] = "raw-sendto+dontwait",
	[V_RAW_SENDMMSG_DW] = "raw-sendmmsg+dontwait",
	[V_RAW_IO_URING_DW] = "raw-io_uring+dontwait",
	[V_LOOP_DW] = "loop+dontwait",
	[V_SENDMMSG_DW] = "sendmmsg+dontwait",
	[V_IO_URING_DW] = "io_uring+dontwait",
	[V_LOOP_ROT] = "loop+rotate",
	[V_SENDMMSG_ROT] = "sendmmsg+rotate",
	[V_IO_URING_ROT] = "io_uring+rotate",
	[V_LOOP_CONN] = "loop+connect",
	[V_SENDMMSG_CONN] = "sendmmsg+connect",
	[V_IO_URING_CONN] = "io_uring+connect",
	[V_LOOP_OFF] = "loop+offload",
	[V_SENDMMSG_OFF] = "sendmmsg+offload",
	[V_IO_URING_OFF] = "io_uring+offload",
	[V_IO_URING_ZC] = "io_uring+zc",
	[V_AUTO] = "auto",
	[V_RAW_XDP] = "raw-xdp",
	[V_XDP] = "xdp",
	[V_RAW_KFANOUT] = "raw-kfanout",
	[V_KFANOUT] = "kfanout",
	[V_RAW_HOOK] = "raw-sendto+hook",
	[V_AUTO_KF] = "auto+kfanout",
};

/* "loop+ts/64", "loop+w2", "loop+w2+ts/64": the interval and the workers are part of the name,
 * so that every output says what ran. */
static char dyn_names[V_COUNT][40];

static const enum ms_backend lib_backend[V_COUNT] = {
	[V_LOOP] = MS_BACKEND_LOOP,
	[V_SENDMMSG] = MS_BACKEND_SENDMMSG,
	[V_IO_URING] = MS_BACKEND_IO_URING,
	[V_LOOP_TS] = MS_BACKEND_LOOP,
	[V_SENDMMSG_TS] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_TS] = MS_BACKEND_IO_URING,
	[V_LOOP_DW] = MS_BACKEND_LOOP,
	[V_SENDMMSG_DW] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_DW] = MS_BACKEND_IO_URING,
	[V_LOOP_ROT] = MS_BACKEND_LOOP,
	[V_SENDMMSG_ROT] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_ROT] = MS_BACKEND_IO_URING,
	[V_LOOP_CONN] = MS_BACKEND_LOOP,
	[V_SENDMMSG_CONN] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_CONN] = MS_BACKEND_IO_URING,
	[V_LOOP_OFF] = MS_BACKEND_LOOP,
	[V_SENDMMSG_OFF] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_OFF] = MS_BACKEND_IO_URING,
	[V_LOOP_ZC] = MS_BACKEND_LOOP,
	[V_SENDMMSG_ZC] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_ZC] = MS_BACKEND_IO_URING,
	[V_LOOP_W] = MS_BACKEND_LOOP,
	[V_SENDMMSG_W] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_W] = MS_BACKEND_IO_URING,
	[V_LOOP_W_TS] = MS_BACKEND_LOOP,
	[V_SENDMMSG_W_TS] = MS_BACKEND_SENDMMSG,
	[V_IO_URING_W_TS] = MS_BACKEND_IO_URING,
	[V_AUTO] = MS_BACKEND_AUTO,
	[V_XDP] = MS_BACKEND_XDP,
	[V_KFANOUT] = MS_BACKEND_KFANOUT,
	[V_AUTO_KF] = MS_BACKEND_AUTO,
};

static const char *const plain_detail[V_COUNT] = {
	[V_LOOP] = "loop: the library's plain loop, one sendto(2) per destination",
	[V_SENDMMSG] = "sendmmsg: one sendmmsg(2) per socket per 1024 destinations",
	[V_IO_URING] = "io_uring",
	[V_XDP] = "xdp: the library's AF_XDP backend on " NETNS_DEV " queue 0, copy mode, 4096 "
		  "frames (rings of 2048)",
	[V_KFANOUT] = "kfanout: the library's kernel fan-out through the program attached to "
		      NETNS_DEV,
};

const char *variant_name(enum variant_id v)
{
	if (v < V_COUNT && (variant_is_ts(v) || variant_is_w(v)))
		return dyn_names[v][0] ? dyn_names[v] : "?";
	return v < V_COUNT ? names[v] : "?";
}

void variants_name(const struct opts *o)
{
	for (int v = V_LOOP; v < V_COUNT; v++) {
		const char *base = names[variant_base((enum variant_id)v)];

		if (variant_is_ts((enum variant_id)v))
			snprintf(dyn_names[v], sizeof(dyn_names[v]), "%s+ts/%u", base, o->ts_sample);
		else if (variant_is_w_ts((enum variant_id)v))
			snprintf(dyn_names[v], sizeof(dyn_names[v]), "%s+w%u+ts/%u", base,
				 o->compare_workers, o->ts_sample);
		else if (variant_is_w((enum variant_id)v))
			snprintf(dyn_names[v], sizeof(dyn_names[v]), "%s+w%u", base,
				 o->compare_workers);
	}
}

int variant_from_name(const char *name)
{
	for (int v = 0; v < V_FIRST_TS; v++)
		if (!strcmp(name, names[v]))
			return v;
	if (!strcmp(name, names[V_AUTO]))
		return V_AUTO;
	if (!strcmp(name, names[V_RAW_XDP]))
		return V_RAW_XDP;
	if (!strcmp(name, names[V_XDP]))
		return V_XDP;
	for (int v = V_RAW_KFANOUT; v <= V_AUTO_KF; v++)
		if (!strcmp(name, names[v]))
			return v;
	return -EINVAL;
}

/* The public API does not say why a backend is unavailable (MULTISEND_SHOW_BACKEND prints it
 * to stderr, but the bench ignores the environment so that labels stay true), so give the
 * causes we can see ourselves. */
static void why_unavailable(enum variant_id v, int err, char *buf, size_t len)
{
	if (v == V_XDP && err == -ENOTSUP) {
		snprintf(buf, len,
			 "unavailable: ms_ctx_new(MS_BACKEND_XDP on %s, MS_CFG_NO_FALLBACK): %s "
			 "(a library built without the xdp backend, a kernel without AF_XDP, or "
			 "the interface refused)",
			 NETNS_DEV, ms_strerror(err));
		return;
	}
	if (v == V_KFANOUT && err == -ENOTSUP) {
		snprintf(buf, len,
			 "unavailable: ms_ctx_new(MS_BACKEND_KFANOUT, MS_CFG_NO_FALLBACK): %s (a "
			 "library built without kfanout, or no attachment of this namespace it can "
			 "use; MULTISEND_SHOW_BACKEND=1 on any libmultisend program prints the "
			 "library's reason)",
			 ms_strerror(err));
		return;
	}
	if (v == V_IO_URING && err == -ENOTSUP) {
#ifndef BENCH_TREE_HAS_LIBURING
		snprintf(buf, len, "unavailable: libmultisend was built without liburing");
#else
		char dis[16] = "";

		if (!read_file("/proc/sys/kernel/io_uring_disabled", dis, sizeof(dis)) &&
		    strcmp(dis, "0"))
			snprintf(buf, len, "unavailable: kernel.io_uring_disabled=%s", dis);
		else
			snprintf(buf, len,
				 "unavailable: the kernel refuses io_uring (older than 5.6, or a "
				 "seccomp filter, as in container runtimes); "
				 "MULTISEND_SHOW_BACKEND=1 MULTISEND_BACKEND=io_uring on any "
				 "libmultisend program prints the library's reason");
#endif
		return;
	}
	snprintf(buf, len, "unavailable: ms_ctx_new failed: %s", ms_strerror(err));
}

/* Why a stamped variant's context could not be made: the timestamps, or the backend (with its
 * threads) itself. */
static void why_unavailable_ts(enum variant_id v, int err, const struct ms_config *cfg,
			       char *buf, size_t len)
{
	struct ms_config plain = *cfg;
	struct ms_ctx *ctx = NULL;

	plain.ts_sample = 0;
	plain.ts_flags = 0;
	if (err == -ENOTSUP && !ms_ctx_new(&ctx, &plain)) {
		ms_ctx_free(ctx);
		snprintf(buf, len,
			 "unavailable: this kernel cannot key transmit timestamps per datagram "
			 "(SCM_TS_OPT_ID, Linux 6.13 or later)");
		return;
	}
	why_unavailable(variant_base(v), err, buf, len);
}

/* What a variant's sends do differently, after its description (none for the plain ones
 * without --dontwait / --rotate, which the header states once for all). */
static void detail_variant(const struct opts *o, struct variant *x, enum variant_id v)
{
	size_t l = strlen(x->detail);

	if (variant_is_dw(v))
		snprintf(x->detail + l, sizeof(x->detail) - l, "; %s on every send",
			 variant_is_raw(v) ? "MSG_DONTWAIT" : "ms_send with MS_SEND_DONTWAIT");
	else if (variant_is_rot(v))
		snprintf(x->detail + l, sizeof(x->detail) - l,
			 "; context with MS_CFG_ROTATE (each fan-out starts one destination later)");
	else if (variant_is_conn(v))
		snprintf(x->detail + l, sizeof(x->detail) - l,
			 "; context with MS_CFG_CONNECT (a connected socket of the library's own "
			 "per destination, bound to the plain socket's port)");
	else if (variant_is_off(v))
		snprintf(x->detail + l, sizeof(x->detail) - l,
			 "; context with MS_CFG_OFFLOAD (ms_post hands the message to a library "
			 "thread; each timed batch ends with ms_ctx_drain)");
	else if (variant_is_w(v))
		snprintf(x->detail + l, sizeof(x->detail) - l,
			 "; context with workers = %u (each fan-out in %u parts at once)",
			 o->compare_workers, o->compare_workers);
	else if (variant_is_zc(v))
		snprintf(x->detail + l, sizeof(x->detail) - l,
			 "; context with zc_min = %u (SEND_ZC from that size, until the kernel "
			 "reports a copy)",
			 variant_zc_min(o, v));
	else if (variant_base(v) == V_IO_URING && (o->compare_zc || o->zc_never))
		snprintf(x->detail + l, sizeof(x->detail) - l, "; zc_min = never (no zero copy)");
}

bool variant_offloads(const struct opts *o, enum variant_id v)
{
	return !variant_is_raw(v) && (o->offload || variant_is_off(v));
}

uint32_t variant_zc_min(const struct opts *o, enum variant_id v)
{
	if (variant_is_zc(v))
		return o->zc_min ? o->zc_min : 1;
	return o->compare_zc ? 0 : o->zc_min;
}

uint32_t variant_workers(const struct opts *o, enum variant_id v)
{
	if (variant_is_raw(v))
		return 0;
	return variant_is_w(v) ? o->compare_workers : o->workers;
}

/* Whether v's group is built with MS_CFG_CONNECT on the unconnected socket, so the library
 * makes a connected socket of its own per destination. */
static bool variant_connects(const struct opts *o, enum variant_id v)
{
	return !o->connected && !variant_is_raw(v) && (o->lib_connect || variant_is_conn(v));
}

/* Any such group in this run: the unconnected sending socket is then bound (with SO_REUSEADDR)
 * so that the library's sockets share its port. */
static bool any_connects(const struct session *s)
{
	for (int v = 0; v < V_COUNT; v++)
		if (s->var[v].wanted && variant_connects(s->o, (enum variant_id)v))
			return true;
	return false;
}

/* The configuration of a library variant's context. */
static struct ms_config variant_config(const struct session *s, enum variant_id v)
{
	const struct opts *o = s->o;
	const bool ts = variant_stamped(v);

	/* Exactly this backend, whatever MULTISEND_* says: the label must be true. */
	const bool rot = o->rotate || variant_is_rot(v);
	const bool off = variant_offloads(s->o, v);
	const uint32_t workers = variant_workers(s->o, v);
	/* The library's threads: K - 1 beside the caller, or with offload K (the caller
	 * sends nothing). --cpus pins as many as there are, --spin-us needs one. */
	const uint32_t threads = (workers ? workers : 1) - (off ? 0 : 1);
	struct ms_config cfg = {
		.size = sizeof(cfg),
		.backend = lib_backend[v],
		.flags = MS_CFG_NO_FALLBACK | MS_CFG_IGNORE_ENV |
			 (rot ? MS_CFG_ROTATE : 0) |
			 (variant_connects(s->o, v) ? MS_CFG_CONNECT : 0) |
			 (off ? MS_CFG_OFFLOAD : 0),
		.ts_sample = ts ? o->ts_sample : 0,
		.ts_flags = ts && o->ts_all ? MS_TS_ALL_DESTS : 0,
		.workers = workers,
		.offload_kib = off ? o->offload_kib : 0,
		.cpus = threads && o->ncpus ? o->cpus : NULL,
		.ncpus = threads < o->ncpus ? threads : o->ncpus,
		.spin_us = threads ? o->spin_us : 0,
		.zc_min = variant_zc_min(s->o, v),
	};

	/* AUTO: the library's choice, which may fall back (no MS_CFG_NO_FALLBACK). */
	if (variant_is_auto(v))
		cfg.flags &= ~(uint32_t)MS_CFG_NO_FALLBACK;
	/* xdp: what raw-xdp does by hand: the namespace's veth (named here, not by
	 * MULTISEND_XDP_IFACE, which MS_CFG_IGNORE_ENV ignores), its queue 0, copy mode (a veth
	 * has no zero copy), 4096 frames and so rings of 2048. auto+kfanout names the same, so
	 * that what keeps xdp out of its candidates is the missing capabilities alone ("auto"
	 * names no interface: xdp is never among its candidates). */
	if (v == V_XDP || v == V_AUTO_KF) {
		cfg.flags |= MS_CFG_XDP_QUEUE | MS_CFG_XDP_COPY;
		cfg.xdp_ifname = NETNS_DEV;
		cfg.xdp_queue = 0;
		cfg.xdp_frames = 4096;
	}
	return cfg;
}

int variants_open(struct session *s)
{
	int any = 0;

	for (int v = 0; v < V_COUNT; v++) {
		struct variant *x = &s->var[v];
		const bool ts = variant_stamped((enum variant_id)v);
		const enum variant_id base = variant_base((enum variant_id)v);

		x->name = variant_name((enum variant_id)v);
		if (!x->wanted)
			continue;
		if (base == V_RAW) {
			x->available = true;
			snprintf(x->detail, sizeof(x->detail),
				 "the baseline: a plain loop of sendto(2), one per destination, no "
				 "library");
			detail_variant(s->o, x, (enum variant_id)v);
			any++;
			continue;
		}
		if (base == V_RAW_SENDMMSG) {
			x->available = true;
			snprintf(x->detail, sizeof(x->detail),
				 "hand-written sendmmsg(2), no library: one call per socket per 1024 "
				 "destinations on headers prepared once");
			detail_variant(s->o, x, (enum variant_id)v);
			any++;
			continue;
		}
		if (base == V_RAW_IO_URING) {
			x->available = raw_uring_probe(x->detail, sizeof(x->detail));
			if (x->available)
				detail_variant(s->o, x, (enum variant_id)v);
			any += x->available;
			continue;
		}
		if (v == V_RAW_XDP) {
			x->available = raw_xdp_probe(s->o->sink, x->detail, sizeof(x->detail));
			any += x->available;
			continue;
		}
		/* The kernel fan-out: the program main attached to the namespace's veth. */
		if (variant_is_kfanout((enum variant_id)v) && s->o->sink != SINK_NETNS_XDP) {
			snprintf(x->detail, sizeof(x->detail),
				 "skipped: needs --sink netns-xdp (the bench attaches the kernel "
				 "fan-out's program to the namespace's veth)");
			continue;
		}
		if (variant_is_kfanout((enum variant_id)v) && !s->kf.attached) {
			snprintf(x->detail, sizeof(x->detail), "%s",
				 s->kf.why[0] ? s->kf.why : "unavailable: not attached");
			continue;
		}
		if (variant_is_kfanout((enum variant_id)v) && !kf_hook_open(s) &&
		    v == V_RAW_HOOK) {
			snprintf(x->detail, sizeof(x->detail), "unavailable: %s", s->kf.hook_why);
			continue;
		}
		if (v == V_RAW_HOOK) {
			x->available = true;
			snprintf(x->detail, sizeof(x->detail),
				 "raw-sendto with the kernel fan-out's program on " NETNS_DEV
				 "'s egress (tcx), which the bench takes off for the other backends: "
				 "what the hook costs a datagram that is not a template");
			any++;
			continue;
		}
		if (v == V_RAW_KFANOUT) {
			x->available = raw_kfanout_probe(s, x->detail, sizeof(x->detail));
			any += x->available;
			continue;
		}
		/* AF_XDP needs the veth with its peer up: the other sinks have no such device. */
		if (v == V_XDP && s->o->sink != SINK_NETNS_XDP) {
			snprintf(x->detail, sizeof(x->detail),
				 "skipped: needs --sink netns-xdp (the library's AF_XDP socket needs "
				 "the namespace's veth, with its peer up)");
			continue;
		}
		struct ms_config cfg = variant_config(s, (enum variant_id)v);
		/* auto+kfanout: made with no capabilities in effect, as rig_open makes it again. */
		int err = v == V_AUTO_KF ? kf_unpriv(&s->kf, true) : 0;

		if (err) {
			snprintf(x->detail, sizeof(x->detail),
				 "unavailable: clearing the sending thread's capabilities: %s",
				 strerror(-err));
			continue;
		}
		err = ms_ctx_new(&x->ctx, &cfg);
		if (v == V_AUTO_KF) {
			int e = kf_unpriv(&s->kf, false);

			if (e && !err) {
				ms_ctx_free(x->ctx);
				err = e;
			}
		}
		if (err) {
			x->ctx = NULL;
			if (ts)
				why_unavailable_ts((enum variant_id)v, err, &cfg, x->detail,
						   sizeof(x->detail));
			else
				why_unavailable(base, err, x->detail, sizeof(x->detail));
			continue;
		}
		if (!variant_is_auto((enum variant_id)v) && ms_ctx_backend(x->ctx) != lib_backend[v]) {
			snprintf(x->detail, sizeof(x->detail), "unavailable: the library chose %s",
				 ms_backend_name(ms_ctx_backend(x->ctx)));
			ms_ctx_free(x->ctx);
			x->ctx = NULL;
			continue;
		}
		/* The library describes set-ups that have options (io_uring's ring); for the others
		 * say what multisend.h promises about their system calls. */
		if (v == V_AUTO && s->o->timeline > 0)
			snprintf(x->detail, sizeof(x->detail),
				 "auto: the library's own choice (MS_BACKEND_AUTO), a new context "
				 "per configuration, kept across all its slices from its first "
				 "send; its ms_ctx_describe is printed after the run");
		else if (v == V_AUTO)
			snprintf(x->detail, sizeof(x->detail),
				 "auto: the library's own choice (MS_BACKEND_AUTO), a new context "
				 "per configuration, kept across its rounds after a %.3g s warm-up; "
				 "its ms_ctx_describe is printed after the run",
				 s->o->auto_warmup);
		else if (v == V_AUTO_KF)
			snprintf(x->detail, sizeof(x->detail),
				 "auto+kfanout: a context made as auto's (%s), with the kernel "
				 "fan-out's program on " NETNS_DEV " and no capabilities in effect on "
				 "the sending thread while it is made and while it sends (xdp named, "
				 "so refused for want of them alone)",
				 s->o->timeline > 0 ? "kept from its first send"
						    : "its warm-up too");
		else if (ms_ctx_describe(x->ctx, x->detail, sizeof(x->detail)) < 0 ||
			 !strcmp(x->detail, names[base]))
			snprintf(x->detail, sizeof(x->detail), "%s", plain_detail[base]);
		detail_variant(s->o, x, (enum variant_id)v);
		if (ts) {
			size_t l = strlen(x->detail);

			snprintf(x->detail + l, sizeof(x->detail) - l,
				 "; kernel transmit timestamps on one fan-out in %u (%s), own "
				 "sending socket%s",
				 s->o->ts_sample,
				 s->o->ts_all ? "every destination" : "first and last destination",
				 s->o->connected ? "s" : "");
		}
		x->available = true;
		any++;
	}
	return any ? 0 : -ENOTSUP;
}

int variant_renew(struct session *s, enum variant_id v)
{
	struct variant *x = &s->var[v];
	struct ms_config cfg = variant_config(s, v);
	int err;

	ms_ctx_free(x->ctx);
	x->ctx = NULL;
	err = ms_ctx_new(&x->ctx, &cfg);
	if (err) {
		x->ctx = NULL;
		x->available = false;
		why_unavailable(v, err, x->detail, sizeof(x->detail));
	}
	return err;
}

void variants_close(struct session *s)
{
	kf_hook_close(s);
	for (int v = 0; v < V_COUNT; v++) {
		ms_ctx_free(s->var[v].ctx);
		s->var[v].ctx = NULL;
	}
}

bool variant_stats(const struct session *s, enum variant_id v, struct ms_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return s->var[v].ctx && !ms_ctx_stats(s->var[v].ctx, st);
}


uint64_t rig_fds_needed(const struct session *s, uint64_t n)
{
	uint64_t rx = sink_netns(s->o->sink) ? 0 : n, sets = 1, own = 0;

	for (int v = V_FIRST_TS; v < V_COUNT; v++)
		sets += s->var[v].wanted && variant_stamped((enum variant_id)v);
	/* MS_CFG_CONNECT: the library's own socket per destination, in each such group. */
	for (int v = V_LOOP; v < V_COUNT; v++)
		own += s->var[v].wanted && variant_connects(s->o, (enum variant_id)v) ? n : 0;
	return rx + sets * (s->o->connected ? n : 1) + own + 64;
}

static int sender_socket(struct session *s, char *err, size_t errlen)
{
	const bool tcp = s->o->sink == SINK_TCP;
	int fd = socket(AF_INET, (tcp ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0) {
		snprintf(err, errlen, "sending socket: %s", strerror(errno));
		return -errno;
	}
	/* Each message leaves at once, as a datagram would: no coalescing into later sends. */
	if (tcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))) {
		int e = errno;

		snprintf(err, errlen, "TCP_NODELAY: %s", strerror(e));
		close(fd);
		return -e;
	}
	if (s->ns) {
		int e = netns_check_socket(s->ns, fd);

		if (e) {
			/* Never send from a socket outside the namespace: refuse the whole run. */
			snprintf(err, errlen, "sending socket is not in namespace %s (%s); refusing",
				 s->ns->name, strerror(-e));
			close(fd);
			return e;
		}
	}
	return fd;
}

/* The local port of a sending socket (network byte order), binding it to an ephemeral port
 * first if it has none yet: what the kernel would do at its first send. 0 on failure. */
static uint16_t sender_port(int fd, char *err, size_t errlen)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len))
		goto fail;
	if (a.sin_port)
		return a.sin_port;
	a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	len = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(fd, (struct sockaddr *)&a, &len))
		goto fail;
	return a.sin_port;
fail:
	snprintf(err, errlen, "the sending socket's port: %s", strerror(errno));
	return 0;
}

/* Let the library's MS_CFG_CONNECT sockets share the unconnected sending socket's port: bind
 * it (an ephemeral port, as its first send would) with SO_REUSEADDR, which MS_CFG_CONNECT
 * needs to bind its own sockets to that same port. So every datagram of the run, plain or
 * "+connect", leaves from one source port: the deliver receivers, which count datagrams from
 * any other port as foreign, accept them all. */
static int share_port(int fd, char *err, size_t errlen)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		int e = errno;

		snprintf(err, errlen, "binding the sending socket for MS_CFG_CONNECT: %s",
			 strerror(e));
		return -e;
	}
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/* The process's open sockets, sorted (*fds allocated). 0 or -errno. */
static int socket_fds(int **fds, size_t *n)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	size_t cap = 0;
	int err = 0;

	*fds = NULL;
	*n = 0;
	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		struct stat st;

		if (*end || end == e->d_name || fd == dirfd(d) || fstat((int)fd, &st) ||
		    !S_ISSOCK(st.st_mode))
			continue;
		if (*n == cap) {
			int *g = realloc(*fds, (cap ? cap * 2 : 256) * sizeof(*g));

			if (!g) {
				err = -ENOMEM;
				break;
			}
			*fds = g;
			cap = cap ? cap * 2 : 256;
		}
		(*fds)[(*n)++] = (int)fd;
	}
	closedir(d);
	if (err) {
		free(*fds);
		*fds = NULL;
		*n = 0;
		return err;
	}
	if (*n)
		qsort(*fds, *n, sizeof(**fds), cmp_int);
	return 0;
}

/* After an MS_CFG_CONNECT group of n destinations was built: the sockets that appeared since
 * `before` (socket_fds) are the library's own. There must be n of them (else the "+connect"
 * label would not be true), and with netns-drop every one must live in the namespace, like
 * the bench's own sending sockets (the library made them on this thread, which entered the
 * namespace before opening anything, but this proves it). */
static int check_own_sockets(struct session *s, enum variant_id v, uint64_t n, const int *before,
			     size_t nbefore, char *err, size_t errlen)
{
	int *after;
	size_t nafter;
	uint64_t own = 0;
	int ret = socket_fds(&after, &nafter);

	if (ret) {
		snprintf(err, errlen, "listing /proc/self/fd: %s", strerror(-ret));
		return ret;
	}
	for (size_t i = 0; i < nafter && !ret; i++) {
		if (nbefore && bsearch(&after[i], before, nbefore, sizeof(*before), cmp_int))
			continue;
		own++;
		if (s->ns && (ret = netns_check_socket(s->ns, after[i])))
			snprintf(err, errlen,
				 "%s: a socket the library made (MS_CFG_CONNECT) is not in "
				 "namespace %s (%s); refusing",
				 variant_name(v), s->ns->name, strerror(-ret));
	}
	free(after);
	if (!ret && own != n) {
		snprintf(err, errlen,
			 "%s: MS_CFG_CONNECT made %llu sockets for %llu destinations, expected one "
			 "each",
			 variant_name(v), (unsigned long long)own, (unsigned long long)n);
		ret = -EPROTO;
	}
	return ret;
}

static void close_senders(uint64_t n, int shared, int *conn)
{
	if (conn)
		for (uint64_t i = 0; i < n; i++)
			if (conn[i] >= 0)
				close(conn[i]);
	free(conn);
	if (shared >= 0)
		close(shared);
}

void rig_close(struct rig *r)
{
	if (r->kf)
		(void)kf_unpriv(r->kf, false); /* the bench's own again (said on stderr if not) */
	raw_close(r);
	for (int v = 0; v < V_COUNT; v++)
		ms_group_free(r->g[v]);
	close_senders(r->n, r->shared, r->conn);
	for (int v = 0; v < V_COUNT; v++)
		close_senders(r->n, r->ts_shared[v], r->ts_conn[v]);
	sink_close(r->sink);
	free(r->msg);
	memset(r, 0, sizeof(*r));
	r->shared = -1;
	for (int v = 0; v < V_COUNT; v++)
		r->ts_shared[v] = -1;
}

/* One set of sending sockets in the rig's shape: one unconnected socket (*shared), or n
 * connected ones (*conn); for deliver, the receivers learn their ports. On failure what was
 * made is left in *shared / *conn for rig_close. */
static int open_senders(struct session *s, struct rig *r, int *shared, int **conn, char *err,
			size_t errlen)
{
	const uint64_t n = r->n;

	if (!r->connected) {
		int ret;

		*shared = sender_socket(s, err, errlen);
		if (*shared < 0)
			return *shared;
		if (any_connects(s) && (ret = share_port(*shared, err, errlen)))
			return ret;
	} else {
		*conn = malloc(n * sizeof(**conn));
		if (!*conn) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		for (uint64_t i = 0; i < n; i++)
			(*conn)[i] = -1;
		for (uint64_t i = 0; i < n; i++) {
			(*conn)[i] = sender_socket(s, err, errlen);
			if ((*conn)[i] < 0)
				return (*conn)[i];
			if (connect((*conn)[i], (const struct sockaddr *)&r->dests[i],
				    sizeof(r->dests[i]))) {
				int e = errno;

				snprintf(err, errlen, "connect: %s", strerror(e));
				return -e;
			}
		}
	}
	/* Deliver: tell the receivers which socket each destination's datagrams come from, so
	 * they can tell ours from what other programs send to the same ports. */
	for (uint64_t i = 0; s->o->sink == SINK_DELIVER && i < n; i++) {
		uint16_t port = sender_port(r->connected ? (*conn)[i] : *shared, err, errlen);

		if (!port)
			return -EADDRNOTAVAIL;
		sink_expect_source(r->sink, i, port);
	}
	return 0;
}

int rig_open(struct session *s, struct rig *r, uint64_t n, uint64_t size, char *err,
	     size_t errlen)
{
	int ret;

	memset(r, 0, sizeof(*r));
	r->shared = -1;
	for (int v = 0; v < V_COUNT; v++)
		r->ts_shared[v] = -1;
	r->n = n;
	r->size = size;
	r->connected = s->o->connected;
	r->dontwait = s->o->dontwait;
	r->kf = &s->kf;
	/* The bench's own capabilities (auto+kfanout's sends may have left them cleared). */
	if ((ret = kf_unpriv(r->kf, false))) {
		snprintf(err, errlen, "restoring the sending thread's capabilities: %s",
			 strerror(-ret));
		return ret;
	}
	if (rig_fds_needed(s, n) > s->env.nofile) {
		snprintf(err, errlen,
			 "needs about %llu file descriptors, RLIMIT_NOFILE allows %llu (raise the "
			 "hard limit, e.g. ulimit -Hn)",
			 (unsigned long long)rig_fds_needed(s, n), (unsigned long long)s->env.nofile);
		return -EMFILE;
	}
	ret = sink_open(&r->sink, s->o->sink, n, size, s->o->cpu, s->o->verify_payload, err,
			errlen);
	if (ret)
		goto fail;
	r->dests = sink_dests(r->sink);
	r->msg = malloc(size);
	if (!r->msg) {
		ret = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	msg_fill(r->msg, size);
	if ((ret = open_senders(s, r, &r->shared, &r->conn, err, errlen)))
		goto fail;
	if ((ret = raw_open(s, r, err, errlen)))
		goto fail;

	for (int v = V_LOOP; v < V_COUNT; v++) {
		int shared = r->shared, *conn = r->conn;

		if (!s->var[v].available || variant_is_raw((enum variant_id)v))
			continue;
		/* auto+kfanout: its context and group made by a thread with no capabilities in
		 * effect, as an unprivileged publisher makes them (restored below, and by
		 * rig_close on failure). */
		if (v == V_AUTO_KF && (ret = kf_unpriv(r->kf, true))) {
			snprintf(err, errlen, "auto+kfanout: clearing the sending thread's "
					      "capabilities: %s", strerror(-ret));
			goto fail;
		}
		/* AUTO starts afresh in each configuration: a new context, kept for its rounds. */
		if (variant_is_auto((enum variant_id)v) &&
		    (ret = variant_renew(s, (enum variant_id)v))) {
			snprintf(err, errlen, "%s: ms_ctx_new: %s", variant_name((enum variant_id)v),
				 ms_strerror(ret));
			goto fail;
		}
		if (v == V_AUTO_KF) {
			struct ms_config cfg = variant_config(s, V_AUTO_KF);

			kf_unpriv_check(r->kf, &cfg);
		}
		if (variant_stamped((enum variant_id)v)) {
			ret = open_senders(s, r, &r->ts_shared[v], &r->ts_conn[v], err, errlen);
			if (ret)
				goto fail;
			shared = r->ts_shared[v];
			conn = r->ts_conn[v];
		}
		if ((ret = ms_group_new(s->var[v].ctx, &r->g[v]))) {
			snprintf(err, errlen, "ms_group_new: %s", ms_strerror(ret));
			goto fail;
		}
		int *before = NULL;
		size_t nbefore = 0;

		if (variant_connects(s->o, (enum variant_id)v) &&
		    (ret = socket_fds(&before, &nbefore))) {
			snprintf(err, errlen, "listing /proc/self/fd: %s", strerror(-ret));
			goto fail;
		}
		for (uint64_t i = 0; i < n; i++) {
			struct ms_dest d = { .fd = shared, .addrlen = sizeof(r->dests[i]),
					     .addr = (const struct sockaddr *)&r->dests[i] };

			if (r->connected)
				d = (struct ms_dest){ .fd = conn[i], .addrlen = 0, .addr = NULL };
			ret = ms_group_add(r->g[v], &d);
			if (ret < 0) {
				snprintf(err, errlen, "ms_group_add (%s): %s",
					 variant_name((enum variant_id)v), ms_strerror(ret));
				free(before);
				goto fail;
			}
		}
		if (variant_connects(s->o, (enum variant_id)v)) {
			ret = check_own_sockets(s, (enum variant_id)v, n, before, nbefore, err,
						errlen);
			free(before);
			if (ret)
				goto fail;
		}
		if (variant_offloads(s->o, (enum variant_id)v)) {
			struct ms_stats st = { .size = sizeof(st) };

			if ((ret = ms_ctx_stats(s->var[v].ctx, &st))) {
				snprintf(err, errlen, "ms_ctx_stats: %s", ms_strerror(ret));
				goto fail;
			}
			r->off_ctx[v] = s->var[v].ctx;
			r->off_failed[v] = st.dests_failed;
		}
		if (v == V_AUTO_KF && (ret = kf_unpriv(r->kf, false))) {
			snprintf(err, errlen, "auto+kfanout: restoring the sending thread's "
					      "capabilities: %s", strerror(-ret));
			goto fail;
		}
	}
	return 0;
fail:
	rig_close(r);
	return ret;
}

int rig_open_or_skip(struct session *s, struct rig *r, uint64_t n, uint64_t size,
		     const char *label, double units)
{
	char why[256], what[96];
	int err = rig_open(s, r, n, size, why, sizeof(why));

	if (!err)
		return 0;
	snprintf(what, sizeof(what), "%sfan-out %llu, %llu B", label, (unsigned long long)n,
		 (unsigned long long)size);
	report_skip(s, what, why);
	progress_step(s, units, "skipped %s", what);
	return err == -EXDEV ? err : 1;
}

static inline void stamp(struct rig *r)
{
	r->seq++;
	if (r->size >= sizeof(struct msg_head))
		memcpy(r->msg, &r->seq, sizeof(r->seq));
}

/* The hand-written baselines (raw.c): one call per fan-out, as ms_send is for the library. */
static uint64_t send_raw(struct rig *r, uint64_t (*fanout)(struct rig *), uint64_t count)
{
	uint64_t failed = 0;

	for (uint64_t k = 0; k < count; k++) {
		stamp(r);
		failed += fanout(r);
	}
	return failed;
}

/* No result array: the counts are all the bench needs. post (an offload context): ms_post,
 * whose ok is the destinations the message will be attempted on (the whole group, so nothing
 * counts as failed here: rig_sync takes the failures from the counters once sent); a refusal
 * (-EAGAIN: the ring full under MS_SEND_DONTWAIT) sent nothing. */
static uint64_t send_lib(struct rig *r, struct ms_group *g, unsigned flags, uint64_t count,
			 bool post)
{
	uint64_t failed = 0;

	for (uint64_t k = 0; k < count; k++) {
		stamp(r);
		int ok = post ? ms_post(g, r->msg, r->size, flags, NULL)
			      : ms_send(g, r->msg, r->size, flags, NULL);

		failed += ok < 0 ? r->n : r->n - (uint64_t)ok;
	}
	return failed;
}

uint64_t rig_send(struct rig *r, enum variant_id v, uint64_t count)
{
	const bool dontwait = r->dontwait || variant_is_dw(v);
	uint64_t failed;

	/* A send refused for want of room (EAGAIN, only without waiting) counts as failed like
	 * any other refusal: not sent, so not expected at the sink either. */
	r->raw_flags = dontwait ? MSG_DONTWAIT : 0;
	switch (variant_base(v)) {
	case V_RAW:
	case V_RAW_HOOK: /* the same loop, with the kernel fan-out's program on the device */
		failed = send_raw(r, bench_raw_sendto_fanout, count);
		break;
	case V_RAW_SENDMMSG:
		failed = send_raw(r, bench_raw_sendmmsg_fanout, count);
		break;
	case V_RAW_IO_URING:
		failed = send_raw(r, bench_raw_uring_fanout, count);
		break;
	case V_RAW_XDP:
		failed = send_raw(r, bench_raw_xdp_fanout, count);
		break;
	case V_RAW_KFANOUT:
		failed = send_raw(r, bench_raw_kfanout_fanout, count);
		break;
	default:
		failed = send_lib(r, r->g[v], dontwait ? MS_SEND_DONTWAIT : 0, count,
				  rig_offloads(r, v));
		break;
	}

	r->pending += count;
	r->accepted += count * r->n - failed;
	return failed;
}

uint64_t rig_sync(struct rig *r, enum variant_id v)
{
	struct ms_stats st = { .size = sizeof(st) };
	uint64_t failed;

	if (!r->off_ctx[v])
		return 0;
	/* ms_ctx_drain returns once the library thread has sent (and counted) every message:
	 * the counters read after it hold their outcomes. */
	if (ms_ctx_drain(r->off_ctx[v]) || ms_ctx_stats(r->off_ctx[v], &st))
		return 0;
	failed = st.dests_failed - r->off_failed[v];
	r->off_failed[v] = st.dests_failed;
	r->accepted -= failed;
	return failed;
}
