/* SPDX-License-Identifier: MIT */
/*
 * kfanout: the kernel replicates. One send of the message (sendmsg(2) naming the interface),
 * on the caller's own socket, to a template address per slice of up to ctl.slice UDP
 * destinations; the BPF program an administrator attached to the egress of the interface
 * (lib/be/kfanout/kfanout.bpf.c, loaded by tools/multisend-kfanout) clones it to each
 * destination of the slice before the send returns, and writes each clone's result where this file reads it. The contract between the
 * three is lib/be/kfanout/abi.h (read its top comment first); the user's is multisend.h's
 * "Kernel fan-out".
 *
 * Why the raw bpf(2) system call and not libbpf: a publisher needs four commands of it
 * (BPF_OBJ_GET on the pins, BPF_OBJ_GET_INFO_BY_FD to check what it opened,
 * BPF_MAP_LOOKUP_ELEM for kf_ctl once, and nothing on the send path: the slots, the
 * destinations and the statuses are mmap'ed array maps). libbpf would add a shared-library
 * dependency to libmultisend and to the preload shim (which links the core statically) for
 * that, and its object and program machinery is the administrator's tool's business, not a
 * publisher's. So the library needs linux/bpf.h and nothing more; no capability either (the
 * pins' group and mode say who may publish).
 *
 * - Attachments: ctx_init opens every attachment under KF_PIN_ROOT whose interface is in
 *   this network namespace (the directory's name is the interface's; kf_ctl.ifindex must be
 *   its index here), and maps its slots, destinations and statuses. A destination is sent by
 *   the attachment of the interface its route leaves by: no interface is named anywhere.
 * - Per group (prepare, as the xdp backend keeps its frames' headers): one record per plan
 *   position, made when the plan changes, when the kernel reports a change of link, address,
 *   route, rule or neighbour (rtnetlink notifications, read at most every CHECK_NS), and when
 *   a socket option read for it changed (up to REVAL_BUCKETS sockets re-read every REVAL_NS):
 *   the route and next hop from lib/os/route.c, or the reason the destination goes by the
 *   kernel's path. The destinations of one socket that one attachment carries, in group
 *   order, are cut into slices; each slice holds a slot of the attachment (claimed by
 *   compare-and-swap on kf_slots[k].owner, kept across plans, released when the group or the
 *   context is freed), whose cookie and destination table are written then, never on the send
 *   path.
 * - Per call and slice: count, arm (a release store of the state), one sendmsg to the slot's
 *   template address out of the attachment's interface (oif_cmsg), then the state: DONE with this call's sequence number, the statuses are
 *   the results; still ARMED (the program did not run: detached, the template routed
 *   elsewhere, the send refused), compare-and-swap to IDLE and the slice goes by the kernel's
 *   path; lost that race, the program is running: wait for DONE.
 * - Positions it does not carry go by the kernel's path (the sendmmsg executor, runs of
 *   consecutive positions), in the call, in order with the slices, counted by reason.
 * - A forked child never touches the parent's slots: MS__CAP_FORK_UNSAFE (the loop sends
 *   there), the mappings are MADV_DONTFORK, and nothing is released but by the process that
 *   claimed it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/bpf.h>
#include <linux/net_tstamp.h>

#include "internal.h"
#include "route.h"
#include "sys.h"
#include "abi.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif
#ifndef SO_BINDTOIFINDEX
#define SO_BINDTOIFINDEX 62
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define ATT_MAX 8u                        /* attachments a context uses */
#define CHECK_NS (5ull * 1000 * 1000)     /* rtnetlink notifications read at most this often */
#define REVAL_NS (1000ull * 1000 * 1000)  /* socket options read again this often */
#define REVAL_BUCKETS 256u                /* ... for at most this many sockets at a time */
#define WAIT_DONE_NS (1000ull * 1000 * 1000) /* a running program finishes well within this */
#define ROUTES_MAX 65536u

/* Why a destination goes by the kernel's path (struct kdest.why; 0: by a template). */
enum { BY_TEMPLATE, FB_LOCAL, FB_IFACE, FB_MTU, FB_ROUTE, FB_NEIGH, FB_OTHER };

/* One attachment: its pins, opened and mapped. */
struct att {
	char ifname[IF_NAMESIZE];
	int ifindex;
	int fd[3];              /* kf_slots, kf_dests, kf_status */
	struct kf_ctl ctl;
	uint32_t slice;         /* destinations per template */
	unsigned char *map[3];  /* the mmap'ed arrays */
	size_t maplen[3];
	uint32_t stride[3];     /* bytes per element (array maps round values up to 8) */
	uint32_t nslots;
	uint32_t next_scan;     /* where the next claim starts looking */
	uint8_t *mine;          /* nslots: claimed by this context */
};
enum { M_SLOTS, M_DESTS, M_STATUS };

/* A route asked of the kernel (see lib/be/xdp.c's route_for: the same key, the same rules). */
struct rentry {
	bool used;
	struct ms__flow fl;
	unsigned char dst[24], src[24];
	struct ms__route rt;
};

struct kstate {
	const struct ms_ctx *ctx;
	struct att att[ATT_MAX];
	unsigned natt;
	pid_t pid;              /* the process that claimed the slots */
	uint64_t owner;         /* its claim: (pid << 32) | start time's low 32 bits */
	struct ms__nl *nl;
	uint32_t net_gen;
	uint64_t next_check;
	uint64_t sys;           /* system calls made outside send (prepare), added by send */
	struct rentry *routes;
	uint32_t nroutes, caproutes, routes_gen;
	unsigned deps[2];
	bool deps_known;
};

/* What of a socket the records depend on. */
struct sockinfo {
	int family;
	bool usable;            /* an unconnected UDP socket whose options clones can honour */
	bool v6only;
	struct sockaddr_storage local;
	struct ms__flow fl4, fl6; /* the flow of an IPv4 and an IPv6 destination */
	uint64_t cookie;
	uint64_t sig;
};

/* One plan position. */
struct kdest {
	struct kf_dest rec;     /* what the slot's table gets */
	uint32_t slice;         /* by template: its slice */
	uint32_t lim;           /* 1 + the largest message one datagram carries to it */
	uint8_t why;            /* BY_TEMPLATE, or FB_*: the kernel's path, and why */
	uint8_t att;
	uint8_t v6;             /* the template's family (a v4-mapped destination is IPv4) */
};

_Static_assert(offsetof(struct sockaddr_in, sin_port) == offsetof(struct sockaddr_in6, sin6_port),
	       "a template's port is set through either");

/* A template's outgoing interface, as a control message (oif_cmsg). */
union oif_cmsg {
	struct cmsghdr h;
	char b[CMSG_SPACE(sizeof(struct in6_pktinfo))];
};

struct kslice {
	uint8_t att, v6;
	uint16_t seq;           /* the last call's sequence number */
	int fd, sfamily;        /* the socket, and its family (the template's address form) */
	int xflags;
	uint32_t slot;
	uint32_t count;
	uint32_t lim;           /* the smallest of its destinations' */
	uint32_t pos_off;       /* its positions: x->pos[pos_off .. pos_off + count) */
	/* Its template send, made with its slot: the address (the port, the call's sequence
	 * number, set per call) and the control naming the interface. */
	union {
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} to;
	socklen_t tolen, ctllen;
	union oif_cmsg oc;
	uint64_t call;          /* the call that sent it last (sent once per call) */
};

struct kgroup {
	uint32_t plan_gen, net_gen;
	bool lost;              /* a slot was found taken by another: make it all again */
	uint64_t reval_at;
	uint32_t reval_next;
	uint64_t calls;
	struct kdest *d;
	size_t capd;
	struct kslice *s;
	uint32_t ns, caps;
	uint32_t *pos;
	size_t cappos;
	uint64_t *sigs;         /* per bucket at the last build: its socket's signature, 0 not UDP */
	uint32_t capsigs;
	/* Every position goes by a template and the slices' first positions rise with their
	 * index: a whole call is then the slices in order, with no walk of the positions. */
	bool direct;
};

static __thread char why_buf[200]; /* ctx_init's reason (ctx->init_why), copied at once */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define FNV_SEED 1469598103934665603ull
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t k = 0; k < n; k++)
		h = (h ^ c[k]) * 1099511628211ull;
	return h;
}

/* ---- bpf(2) --------------------------------------------------------------------------------- */

static int sys_bpf(int cmd, union bpf_attr *a)
{
	long r = syscall(__NR_bpf, cmd, a, sizeof(*a));
	return r < 0 ? -errno : (int)r;
}

static int obj_get(const char *path, bool rdonly)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.pathname = (uintptr_t)path;
	a.file_flags = rdonly ? BPF_F_RDONLY : 0;
	int fd = sys_bpf(BPF_OBJ_GET, &a);
	if (fd >= 0)
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* bpf(2) makes them close-on-exec; to be sure */
	return fd;
}

static int map_info(int fd, struct bpf_map_info *info)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	memset(info, 0, sizeof(*info));
	a.info.bpf_fd = (uint32_t)fd;
	a.info.info_len = sizeof(*info);
	a.info.info = (uintptr_t)info;
	return sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a);
}

static int map_lookup(int fd, uint32_t key, void *val)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)fd;
	a.key = (uintptr_t)&key;
	a.value = (uintptr_t)val;
	return sys_bpf(BPF_MAP_LOOKUP_ELEM, &a);
}

/* ---- claims ----------------------------------------------------------------------------------- */

/* A process's start time in clock ticks (/proc/PID/stat field 22), low 32 bits; 0 when it
 * cannot be read. */
static uint32_t start_time(pid_t pid, bool *gone)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	*gone = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*gone = errno == ENOENT;
		return 0;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
	if (!p)
		return 0;
	/* Fields from the state (field 3) on; the start time is field 22. */
	int field = 2;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	return (uint32_t)strtoull(p, NULL, 10);
}

/* A claim left by a process that is gone (or whose pid is another process's now). */
static bool claim_stale(uint64_t owner)
{
	if (owner == 0 || owner == KF_OWNER_GROUP)
		return false;
	const pid_t pid = (pid_t)(owner >> 32);
	if (pid <= 0)
		return false;
	if (kill(pid, 0) && errno == ESRCH)
		return true;
	bool gone;
	const uint32_t t = start_time(pid, &gone);
	return gone || (t && t != (uint32_t)owner);
}

static inline struct kf_slot *slot_at(const struct att *a, uint32_t k)
{
	return (struct kf_slot *)(a->map[M_SLOTS] + (size_t)k * a->stride[M_SLOTS]);
}

/* Claim a slot of a: a free one, else one whose claimer is gone. Its index, or -EBUSY. */
static int slot_claim(struct kstate *st, struct att *a)
{
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t n = 0; n < a->nslots; n++) {
			const uint32_t k = (a->next_scan + n) % a->nslots;
			if (a->mine[k])
				continue;
			struct kf_slot *sl = slot_at(a, k);
			__u64 cur = __atomic_load_n(&sl->owner, __ATOMIC_ACQUIRE);
			if (cur && (!pass || (st->sys += 3, !claim_stale(cur))))
				continue;
			if (!__atomic_compare_exchange_n(&sl->owner, &cur, st->owner, false,
							 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				continue;
			__atomic_store_n(&sl->state, KF_STATE(0, KF_IDLE), __ATOMIC_RELEASE);
			a->mine[k] = 1;
			a->next_scan = (k + 1) % a->nslots;
			return (int)k;
		}
	}
	return -EBUSY;
}

static void slot_release(struct kstate *st, struct att *a, uint32_t k)
{
	if (!a->mine[k])
		return;
	a->mine[k] = 0;
	struct kf_slot *sl = slot_at(a, k);
	__atomic_store_n(&sl->count, 0, __ATOMIC_RELAXED);
	__u64 cur = st->owner;
	/* Only our own claim: one taken over meanwhile is the new owner's. */
	(void)__atomic_compare_exchange_n(&sl->owner, &cur, 0, false, __ATOMIC_ACQ_REL,
					  __ATOMIC_RELAXED);
}

/* ---- the context ------------------------------------------------------------------------------ */

static void att_close(struct att *a, bool mapped)
{
	for (int m = 0; m < 3; m++) {
		if (a->map[m] && mapped)
			munmap(a->map[m], a->maplen[m]);
		a->map[m] = NULL;
		if (a->fd[m] >= 0)
			close(a->fd[m]);
		a->fd[m] = -1;
	}
	free(a->mine);
	a->mine = NULL;
}

static void kf_ctx_fini(void *state)
{
	struct kstate *st = state;
	if (!st)
		return;
	/* In a forked child the mappings are not there (MADV_DONTFORK) and the claims are the
	 * parent's: only the descriptors, which are the child's own copies, are closed. */
	const bool here = getpid() == st->pid;
	for (unsigned i = 0; i < st->natt; i++) {
		struct att *a = &st->att[i];
		for (uint32_t k = 0; here && a->mine && k < a->nslots; k++)
			slot_release(st, a, k);
		att_close(a, here);
	}
	if (st->nl)
		ms__nl_close(st->nl);
	free(st->routes);
	free(st);
}

/* Open and map one of an attachment's arrays; checks that it is what abi.h says. */
static int att_map(struct att *a, const char *dir, const char *name, int m, uint32_t entries,
		   uint32_t vsize)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = obj_get(path, false);
	if (fd < 0) {
		snprintf(why_buf, sizeof(why_buf), "pin %s/%s: %s", a->ifname, name, ms_strerror(fd));
		return fd;
	}
	a->fd[m] = fd;
	struct bpf_map_info info;
	int err = map_info(fd, &info);
	if (err) {
		snprintf(why_buf, sizeof(why_buf), "pin %s/%s: BPF_OBJ_GET_INFO_BY_FD: %s",
			 a->ifname, name, ms_strerror(err));
		return err;
	}
	if (info.type != BPF_MAP_TYPE_ARRAY || !(info.map_flags & BPF_F_MMAPABLE) ||
	    info.value_size != vsize || info.max_entries < entries) {
		snprintf(why_buf, sizeof(why_buf),
			 "pin %s/%s: not the map of ABI %u (type %u, flags %#x, value %u B, "
			 "%u entries)",
			 a->ifname, name, KF_ABI_VERSION, info.type, info.map_flags, info.value_size, info.max_entries);
		return -EPROTO;
	}
	a->stride[m] = (vsize + 7u) & ~7u;
	const long page = sysconf(_SC_PAGESIZE);
	a->maplen[m] = ((size_t)a->stride[m] * info.max_entries + (size_t)page - 1) &
		       ~((size_t)page - 1);
	void *p = mmap(NULL, a->maplen[m], PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		err = -errno;
		snprintf(why_buf, sizeof(why_buf),
			 "mmap of pin %s/%s: %s (mmap-able BPF maps need Linux 5.5)", a->ifname,
			 name, ms_strerror(err));
		return err;
	}
	(void)madvise(p, a->maplen[m], MADV_DONTFORK);
	a->map[m] = p;
	if (m == M_SLOTS)
		a->nslots = info.max_entries < KF_SLOTS ? info.max_entries : KF_SLOTS;
	return 0;
}

/* Open the attachment in KF_PIN_ROOT/name. 0; 1 when it is not one of this namespace's
 * (skipped quietly); or -errno with why_buf saying why. */
static int att_open(struct att *a, const char *name)
{
	char dir[64];
	memset(a, 0, sizeof(*a));
	a->fd[0] = a->fd[1] = a->fd[2] = -1;
	if (strlen(name) >= IF_NAMESIZE)
		return 1;
	snprintf(a->ifname, sizeof(a->ifname), "%s", name);
	a->ifindex = (int)if_nametoindex(name);
	if (!a->ifindex)
		return 1; /* an interface of another namespace, or gone */
	snprintf(dir, sizeof(dir), "%s/%s", KF_PIN_ROOT, name);
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, KF_MAP_CTL);
	int fd = obj_get(path, true);
	if (fd < 0) {
		if (fd == -ENOENT)
			return 1;
		snprintf(why_buf, sizeof(why_buf), "pin %s/%s: %s", a->ifname, KF_MAP_CTL,
			 fd == -EACCES ? "permission denied (only the pins' group may publish "
					 "through it)"
			 : fd == -EPERM ? "bpf(2) refused: a kernel before 6.5 with "
					  "kernel.unprivileged_bpf_disabled refuses it without "
					  "CAP_BPF"
			 : fd == -ENOSYS ? "this kernel has no bpf(2)"
					 : ms_strerror(fd));
		return fd;
	}
	int err = map_lookup(fd, 0, &a->ctl);
	close(fd);
	if (err) {
		snprintf(why_buf, sizeof(why_buf), "pin %s/%s: %s", a->ifname, KF_MAP_CTL,
			 ms_strerror(err));
		return err;
	}
	if (a->ctl.abi != KF_ABI_VERSION) {
		snprintf(why_buf, sizeof(why_buf),
			 "the attachment on %s speaks ABI %u, this library %u", a->ifname, a->ctl.abi,
			 KF_ABI_VERSION);
		return -EPROTO;
	}
	if ((int)a->ctl.ifindex != a->ifindex)
		return 1; /* the name of an interface of another namespace */
	if (!(a->ctl.flags & (KF_CTL_V4 | KF_CTL_V6)) || !a->ctl.slice) {
		snprintf(why_buf, sizeof(why_buf), "the attachment on %s has no template route",
			 a->ifname);
		return -ENOTSUP;
	}
	a->slice = a->ctl.slice < KF_SLICE_MAX ? a->ctl.slice : KF_SLICE_MAX;
	if ((err = att_map(a, dir, KF_MAP_SLOTS, M_SLOTS, KF_SLOTS, sizeof(struct kf_slot))) ||
	    (err = att_map(a, dir, KF_MAP_DESTS, M_DESTS, KF_SLOTS * KF_SLICE_MAX,
			   sizeof(struct kf_dest))) ||
	    (err = att_map(a, dir, KF_MAP_STATUS, M_STATUS, KF_SLOTS * KF_SLICE_MAX,
			   sizeof(__s64))))
		return err;
	a->mine = calloc(a->nslots, 1);
	return a->mine ? 0 : -ENOMEM;
}

static int kf_ctx_init(struct ms_ctx *ctx, void **state)
{
	*state = NULL;
	why_buf[0] = '\0';
	DIR *d = opendir(KF_PIN_ROOT);
	if (!d) {
		int err = -errno;
		snprintf(why_buf, sizeof(why_buf), "%s: %s", KF_PIN_ROOT,
			 err == -ENOENT ? "no kernel fan-out attached on this host "
					  "(multisend-kfanout attach IFACE)"
					: ms_strerror(err));
		ctx->init_why = why_buf;
		return err == -ENOENT ? -ENOTSUP : err;
	}
	struct kstate *st = calloc(1, sizeof(*st));
	if (!st) {
		closedir(d);
		return -ENOMEM;
	}
	st->ctx = ctx;
	int first_err = 0;
	char first_why[sizeof(why_buf)] = "";
	struct dirent *e;
	while ((e = readdir(d)) && st->natt < ATT_MAX) {
		if (e->d_name[0] == '.')
			continue;
		why_buf[0] = '\0';
		struct att *a = &st->att[st->natt];
		int r = att_open(a, e->d_name);
		if (r == 0) {
			st->natt++;
			continue;
		}
		att_close(a, true);
		if (r < 0 && !first_err) {
			first_err = r;
			snprintf(first_why, sizeof(first_why), "%s", why_buf);
		}
	}
	closedir(d);
	int err = 0;
	if (!st->natt) {
		err = first_err ? first_err : -ENOTSUP;
		if (first_err)
			snprintf(why_buf, sizeof(why_buf), "%s", first_why);
		else
			snprintf(why_buf, sizeof(why_buf),
				 "no kernel fan-out attached to an interface of this network "
				 "namespace (%s)", KF_PIN_ROOT);
		if (err == -EPROTO)
			err = -ENOTSUP;
		goto fail;
	}
	if ((err = ms__nl_open(&st->nl))) {
		snprintf(why_buf, sizeof(why_buf), "rtnetlink: %s", ms_strerror(err));
		goto fail;
	}
	/* Changes then cost no system call until one comes (without io_uring: a recv(2) at
	 * most every CHECK_NS, as before). */
	(void)ms__nl_watch(st->nl, MS__NL_BACKSTOP_NS);
	st->pid = getpid();
	bool gone;
	st->owner = (uint64_t)(uint32_t)st->pid << 32 | start_time(st->pid, &gone);
	if (st->owner == KF_OWNER_GROUP || st->owner == 0)
		st->owner |= 2; /* never the group owner's value (pid 0 cannot happen) */
	for (unsigned i = 0; i < st->natt; i++)
		st->att[i].next_scan = (uint32_t)st->pid % st->att[i].nslots;
	st->next_check = now_ns() + CHECK_NS;
	*state = st;
	return 0;
fail:
	ctx->init_why = why_buf;
	kf_ctx_fini(st);
	return err;
}

static void kf_describe(const struct ms_ctx *ctx, const void *state, char *buf, size_t len)
{
	const struct kstate *st = state;
	(void)ctx;
	size_t k = 0;
	for (unsigned i = 0; i < st->natt && k < len; i++) {
		const struct att *a = &st->att[i];
		uint32_t held = 0;
		for (uint32_t s = 0; s < a->nslots; s++)
			held += a->mine[s];
		int w = snprintf(buf + k, len - k, "%skernel fan-out on %s (slice %u, %s%s%s, %u slots held)",
				 i ? "; " : "", a->ifname, a->slice,
				 (a->ctl.flags & KF_CTL_V4) ? "IPv4" : "",
				 (a->ctl.flags & KF_CTL_V4) && (a->ctl.flags & KF_CTL_V6) ? "+" : "",
				 (a->ctl.flags & KF_CTL_V6) ? "IPv6" : "", held);
		if (w < 0)
			break;
		k += (size_t)w;
	}
}

/* ---- the group's records, made by prepare ----------------------------------------------------- */

static int opt(int fd, int level, int name, int dflt, uint64_t *sys)
{
	int v = dflt;
	socklen_t l = sizeof(v);
	(*sys)++;
	if (getsockopt(fd, level, name, &v, &l))
		return dflt;
	if (l == 1)
		v = *(unsigned char *)&v;
	return v;
}

static bool port_zero(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_port == 0;
	if (a->ss_family == AF_INET6)
		return ((const struct sockaddr_in6 *)a)->sin6_port == 0;
	return true;
}

/* Read what the records need of socket fd. An unbound UDP socket is bound first (as the
 * template's sendto would bind it) so that the route is asked with its port. */
static void sock_read(int fd, struct sockinfo *si, uint64_t *sys)
{
	memset(si, 0, sizeof(*si));
	si->family = opt(fd, SOL_SOCKET, SO_DOMAIN, -1, sys);
	if ((si->family != AF_INET && si->family != AF_INET6) ||
	    opt(fd, SOL_SOCKET, SO_TYPE, -1, sys) != SOCK_DGRAM ||
	    opt(fd, SOL_SOCKET, SO_PROTOCOL, -1, sys) != IPPROTO_UDP)
		return;
	struct sockaddr_storage peer;
	socklen_t l = sizeof(peer);
	(*sys)++;
	if (!getpeername(fd, (struct sockaddr *)&peer, &l))
		return; /* connected: the kernel's path (multisend.h) */
	l = sizeof(si->local);
	(*sys)++;
	if (getsockname(fd, (struct sockaddr *)&si->local, &l))
		return;
	if (port_zero(&si->local)) {
		struct sockaddr_storage any;
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)si->family;
		(*sys) += 2;
		if (bind(fd, (struct sockaddr *)&any,
			 si->family == AF_INET ? sizeof(struct sockaddr_in)
					       : sizeof(struct sockaddr_in6)) &&
		    errno != EINVAL)
			return;
		l = sizeof(si->local);
		if (getsockname(fd, (struct sockaddr *)&si->local, &l) || port_zero(&si->local))
			return;
	}
	socklen_t cl = sizeof(si->cookie);
	(*sys)++;
	if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &si->cookie, &cl) || !si->cookie)
		return;
	const int tos = opt(fd, IPPROTO_IP, IP_TOS, 0, sys);
	const int recverr = opt(fd, IPPROTO_IP, IP_RECVERR, 0, sys);
	int tclass = 0, recverr6 = 0;
	if (si->family == AF_INET6) {
		tclass = opt(fd, IPPROTO_IPV6, IPV6_TCLASS, 0, sys);
		recverr6 = opt(fd, IPPROTO_IPV6, IPV6_RECVERR, 0, sys);
		si->v6only = opt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0, sys);
	}
	const int oif = opt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, 0, sys);
	const uint32_t mark = (uint32_t)opt(fd, SOL_SOCKET, SO_MARK, 0, sys);
	struct stat sb;
	bool has_uid = false;
	(*sys)++;
	if (!fstat(fd, &sb))
		has_uid = true;
	si->fl4 = (struct ms__flow){ .oif = oif, .mark = mark, .uid = (uint32_t)sb.st_uid,
				     .has_uid = has_uid, .tos = (uint8_t)tos };
	si->fl6 = si->fl4;
	si->fl6.tos = (uint8_t)tclass;
	/* Options whose datagrams are not one template the clones copy: corked (appended to),
	 * split into segments, IP options (the program rewrites a plain header), transmit
	 * timestamps and queued errors (the clones are not the socket's). */
	unsigned char ipopts[40];
	l = sizeof(ipopts);
	(*sys)++;
	const bool has_opts = !getsockopt(fd, IPPROTO_IP, IP_OPTIONS, ipopts, &l) && l > 0;
	const int tsflags = opt(fd, SOL_SOCKET, SO_TIMESTAMPING, 0, sys);
	const bool unsup = recverr || recverr6 || has_opts || opt(fd, IPPROTO_UDP, UDP_CORK, 0, sys) ||
			   opt(fd, IPPROTO_UDP, UDP_SEGMENT, 0, sys) ||
			   (tsflags & (SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_TX_SOFTWARE |
				       SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_ACK));
	si->usable = !unsup;
	const int v[] = { tos, recverr, tclass, recverr6, si->v6only, oif, (int)mark,
			  (int)sb.st_uid, has_uid, unsup };
	si->sig = fnv(fnv(fnv(FNV_SEED, v, sizeof(v)), &si->local, sizeof(si->local)),
		      &si->cookie, sizeof(si->cookie)) | 1; /* never 0: "not usable" */
}

/* A destination's identity: family, port, address, scope. false: not IPv4 or IPv6. */
static bool addr_key(const struct sockaddr *to, unsigned char key[24])
{
	memset(key, 0, 24);
	if (to->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)to;
		key[0] = AF_INET;
		memcpy(key + 2, &a->sin_port, 2);
		memcpy(key + 4, &a->sin_addr, 4);
		return true;
	}
	if (to->sa_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)to;
		key[0] = AF_INET6;
		memcpy(key + 2, &a->sin6_port, 2);
		memcpy(key + 4, &a->sin6_addr, 16);
		memcpy(key + 20, &a->sin6_scope_id, 4);
		return true;
	}
	return false;
}

static bool is_v4mapped(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

static bool flow_eq(const struct ms__flow *a, const struct ms__flow *b)
{
	return a->oif == b->oif && a->mark == b->mark && a->has_uid == b->has_uid &&
	       (!a->has_uid || a->uid == b->uid) && a->tos == b->tos;
}

/* The kernel's answer for a datagram from src to `to` with flow fl, asked once per network
 * state (net_gen): destinations on one host share it unless a rule or multipath hash looks at
 * the ports (lib/be/xdp.c does the same). */
static const struct ms__route *route_for(struct kstate *st, const struct sockaddr *to,
					 const struct sockaddr_storage *src,
					 const struct ms__flow *fl)
{
	static const struct ms__route other = { .kind = MS__RT_OTHER };
	struct rentry k = { .used = true, .fl = *fl };
	if (!addr_key(to, k.dst) || !addr_key((const struct sockaddr *)src, k.src))
		return &other;
	if (st->routes_gen != st->net_gen || st->nroutes >= st->caproutes * 3 / 4) {
		uint32_t cap = st->caproutes ? st->caproutes : 64;
		if (st->nroutes >= st->caproutes * 3 / 4 && cap < ROUTES_MAX)
			cap *= 2;
		if (cap != st->caproutes || !st->routes) {
			struct rentry *e = calloc(cap, sizeof(*e));
			if (!e)
				return &other;
			free(st->routes);
			st->routes = e;
			st->caproutes = cap;
		} else {
			memset(st->routes, 0, cap * sizeof(*st->routes));
		}
		st->nroutes = 0;
		if (st->routes_gen != st->net_gen || !st->deps_known) {
			for (int v = 0; v < 2; v++) {
				st->sys += 2;
				if (ms__route_deps(st->nl, v ? AF_INET6 : AF_INET, &st->deps[v]))
					st->deps[v] = MS__DEP_SPORT | MS__DEP_DPORT;
			}
			st->deps_known = true;
		}
		st->routes_gen = st->net_gen;
	}
	const bool v4 = to->sa_family == AF_INET || is_v4mapped(to);
	if (!(st->deps[!v4] & MS__DEP_DPORT))
		memset(k.dst + 2, 0, 2);
	if (!(st->deps[!v4] & MS__DEP_SPORT))
		memset(k.src + 2, 0, 2);
	const uint32_t f[] = { (uint32_t)fl->oif, fl->mark, fl->uid, fl->has_uid, fl->tos };
	const uint64_t h = fnv(fnv(fnv(FNV_SEED, k.dst, 24), k.src, 24), f, sizeof(f));
	const uint32_t mask = st->caproutes - 1;
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		struct rentry *e = &st->routes[i];
		if (e->used) {
			if (flow_eq(&e->fl, fl) && !memcmp(e->dst, k.dst, 24) &&
			    !memcmp(e->src, k.src, 24))
				return &e->rt;
			continue;
		}
		st->sys += 2;
		socklen_t tolen = to->sa_family == AF_INET ? sizeof(struct sockaddr_in)
							   : sizeof(struct sockaddr_in6);
		if (ms__route_get(st->nl, to, tolen, (const struct sockaddr *)src, &k.fl, &k.rt))
			k.rt = other;
		*e = k;
		st->nroutes++;
		return &e->rt;
	}
}

/* Slot k's template address on attachment a for a socket of family sfamily: the IPv4 one
 * (v4-mapped on an IPv6 socket) or the IPv6 one; port KF_SEQ_PORT(seq). Its length. */
static socklen_t tmpl_addr(const struct att *a, bool v6, int sfamily, uint32_t k, uint16_t seq,
			   struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	const uint16_t port = htons(KF_SEQ_PORT(seq));
	if (!v6 && sfamily == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;
		s4->sin_family = AF_INET;
		s4->sin_port = port;
		s4->sin_addr.s_addr = htonl(ntohl(a->ctl.tmpl4) | (k & 0xffffu));
		return sizeof(*s4);
	}
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
	s6->sin6_family = AF_INET6;
	s6->sin6_port = port;
	if (v6) {
		memcpy(&s6->sin6_addr, a->ctl.tmpl6, 16);
		const uint32_t be = htonl(k);
		memcpy(&s6->sin6_addr.s6_addr[12], &be, 4);
	} else {
		s6->sin6_addr.s6_addr[10] = 0xff;
		s6->sin6_addr.s6_addr[11] = 0xff;
		const uint32_t be = htonl(ntohl(a->ctl.tmpl4) | (k & 0xffffu));
		memcpy(&s6->sin6_addr.s6_addr[12], &be, 4);
	}
	return sizeof(*s6);
}

/* A template's outgoing interface, named in the send (IP_PKTINFO; IPV6_PKTINFO on an IPv6
 * socket, whose source address field must be v4-mapped for an IPv4 template): a template
 * whose route is gone (detached) then goes nowhere but there (no route: the kernel takes the
 * address as on-link and asks for it, and no one answers), never by another route (a default
 * route would carry the message off the host). Needs no privilege. The control's length. */
static socklen_t oif_cmsg(union oif_cmsg *c, int sfamily, bool v6, int ifindex)
{
	memset(c, 0, sizeof(*c));
	struct cmsghdr *h = &c->h;
	if (sfamily == AF_INET) {
		h->cmsg_level = IPPROTO_IP;
		h->cmsg_type = IP_PKTINFO;
		h->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
		struct in_pktinfo pi = { .ipi_ifindex = ifindex };
		memcpy(CMSG_DATA(h), &pi, sizeof(pi));
		return CMSG_SPACE(sizeof(struct in_pktinfo));
	}
	h->cmsg_level = IPPROTO_IPV6;
	h->cmsg_type = IPV6_PKTINFO;
	h->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
	struct in6_pktinfo pi = { .ipi6_ifindex = (unsigned)ifindex };
	if (!v6)
		pi.ipi6_addr.s6_addr[10] = pi.ipi6_addr.s6_addr[11] = 0xff; /* ::ffff:0.0.0.0 */
	memcpy(CMSG_DATA(h), &pi, sizeof(pi));
	return CMSG_SPACE(sizeof(struct in6_pktinfo));
}

static bool same_src(const struct ms__route *a, const struct ms__route *b)
{
	if (a->family != b->family)
		return false;
	return a->family == AF_INET ? a->src.v4.s_addr == b->src.v4.s_addr
				    : !memcmp(&a->src.v6, &b->src.v6, 16);
}

static int att_of(const struct kstate *st, int ifindex)
{
	for (unsigned i = 0; i < st->natt; i++)
		if (st->att[i].ifindex == ifindex)
			return (int)i;
	return -1;
}

/* Make d, the record for destination `to` of a usable socket si: by template, or why not. */
static void dest_for(struct kstate *st, const struct sockinfo *si, const struct sockaddr *to,
		     struct kdest *d)
{
	memset(d, 0, sizeof(*d));
	if (si->v6only && is_v4mapped(to)) {
		d->why = FB_OTHER; /* the kernel's error */
		return;
	}
	const bool dst6 = to->sa_family == AF_INET6 && !is_v4mapped(to);
	const struct ms__flow *fl = dst6 ? &si->fl6 : &si->fl4;
	const struct ms__route *rt = route_for(st, to, &si->local, fl);
	switch (rt->kind) {
	case MS__RT_OK:
		break;
	case MS__RT_NEIGH:
		d->why = FB_NEIGH;
		return;
	case MS__RT_LOCAL:
	case MS__RT_BCAST:
		d->why = FB_LOCAL;
		return;
	case MS__RT_UNREACH:
		d->why = FB_ROUTE;
		return;
	default:
		d->why = FB_OTHER;
		return;
	}
	if (rt->multicast) {
		d->why = FB_OTHER; /* the template's TTL and loop-back are a unicast send's */
		return;
	}
	const int ai = att_of(st, rt->ifindex);
	if (ai < 0) {
		d->why = FB_IFACE;
		return;
	}
	const struct att *a = &st->att[ai];
	const bool v6 = rt->family == AF_INET6;
	if (!(a->ctl.flags & (v6 ? KF_CTL_V6 : KF_CTL_V4))) {
		d->why = FB_OTHER;
		return;
	}
	/* The template's own route, from the same socket: out of the attachment's interface,
	 * from the source address this destination's route would use (the clones carry the
	 * template's). Gone (detached), or another source: the kernel's path. */
	struct sockaddr_storage t;
	tmpl_addr(a, v6, si->family, 0, 0, &t);
	const struct ms__route *trt = route_for(st, (const struct sockaddr *)&t, &si->local, fl);
	if (trt->kind != MS__RT_OK || trt->ifindex != a->ifindex || !same_src(trt, rt)) {
		d->why = FB_OTHER;
		return;
	}
	const uint32_t mtu = rt->mtu < trt->mtu ? rt->mtu : trt->mtu;
	const uint32_t hdr = v6 ? 48 : 28;
	d->lim = (mtu > hdr ? mtu - hdr : 0) + 1;
	d->att = (uint8_t)ai;
	d->v6 = v6;
	memcpy(d->rec.mac, rt->dst_mac, 6);
	if (to->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)to;
		d->rec.port = s4->sin_port;
		d->rec.addr.v4 = s4->sin_addr.s_addr;
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)to;
		d->rec.port = s6->sin6_port;
		if (v6)
			memcpy(d->rec.addr.v6, &s6->sin6_addr, 16);
		else
			memcpy(&d->rec.addr.v4, &s6->sin6_addr.s6_addr[12], 4);
	}
}

static int grow(void **pp, size_t *cap, size_t n, size_t size)
{
	if (n <= *cap)
		return 0;
	size_t c = *cap ? *cap : 16;
	while (c < n)
		c *= 2;
	void *p = realloc(*pp, c * size);
	if (!p)
		return -ENOMEM;
	*pp = p;
	*cap = c;
	return 0;
}

static inline struct kf_dest *dest_at(const struct att *a, uint32_t slot, uint32_t i)
{
	return (struct kf_dest *)(a->map[M_DESTS] +
				  ((size_t)slot * KF_SLICE_MAX + i) * a->stride[M_DESTS]);
}

/* Make every position's record and the slices, and give each slice a slot: the group's
 * slots of the last build first (per attachment), then new claims; those left over are
 * released. A slice without a slot (all 1024 taken) goes by the kernel's path. */
static int build(struct kstate *st, struct ms_group *g, struct kgroup *x)
{
	int err;
	size_t capsigs = x->capsigs;
	if ((err = grow((void **)&x->d, &x->capd, g->size, sizeof(*x->d))) ||
	    (err = grow((void **)&x->pos, &x->cappos, g->size, sizeof(*x->pos))) ||
	    (err = grow((void **)&x->sigs, &capsigs, g->nbuckets, sizeof(*x->sigs))))
		return err;
	x->capsigs = (uint32_t)capsigs;
	/* The slots the group holds, to give again. */
	uint32_t *old = NULL, nold = x->ns;
	if (nold && !(old = malloc(nold * sizeof(*old) * 2)))
		return -ENOMEM;
	for (uint32_t k = 0; k < nold; k++) {
		old[2 * k] = x->s[k].att;
		old[2 * k + 1] = x->s[k].slot;
	}
	uint32_t ns = 0, npos = 0;
	size_t pos = 0;
	for (uint32_t bi = 0; bi < g->nbuckets; bi++) {
		const struct ms__bucket *b = g->buckets[bi];
		const size_t base = pos;
		const uint32_t ns0 = ns; /* this socket's slices are x->s[ns0 .. ns) */
		struct sockinfo si = { .usable = false };
		x->sigs[bi] = 0;
		if (b->type == SOCK_DGRAM && b->family != AF_UNIX && !b->has_peer) {
			sock_read(b->fd, &si, &st->sys);
			if (si.usable)
				x->sigs[bi] = si.sig;
		}
		for (uint32_t j = 0; j < b->n; j++, pos++) {
			struct kdest *d = &x->d[pos];
			const struct ms__dest *dst = &b->dests[j];
			if (!si.usable || dst->kpath || !dst->addrlen) {
				memset(d, 0, sizeof(*d));
				d->why = FB_OTHER;
				continue;
			}
			dest_for(st, &si, (const struct sockaddr *)&dst->addr, d);
		}
		/* Slices: per attachment and family, in group order. */
		for (unsigned a = 0; a < st->natt; a++) {
			for (int v6 = 0; v6 < 2; v6++) {
				struct kslice *cur = NULL;
				for (size_t p = base; p < pos; p++) {
					struct kdest *d = &x->d[p];
					if (d->why || d->att != a || d->v6 != v6)
						continue;
					if (!cur || cur->count == st->att[a].slice) {
						size_t caps = x->caps;
						if ((err = grow((void **)&x->s, &caps, ns + 1,
								sizeof(*x->s))))
							goto out;
						x->caps = (uint32_t)caps;
						cur = &x->s[ns++];
						*cur = (struct kslice){ .att = (uint8_t)a,
									.v6 = (uint8_t)v6,
									.fd = b->fd,
									.sfamily = si.family,
									.xflags = b->xflags,
									.slot = UINT32_MAX,
									.lim = UINT32_MAX,
									.pos_off = npos };
					}
					d->slice = (uint32_t)(cur - x->s);
					cur->count++;
					if (d->lim < cur->lim)
						cur->lim = d->lim;
					x->pos[npos++] = (uint32_t)p;
				}
			}
		}
		/* Each slice a slot, with this socket's cookie and the slice's destinations. */
		for (uint32_t k = ns0; k < ns; k++) {
			struct kslice *s = &x->s[k];
			struct att *at = &st->att[s->att];
			int slot = -1;
			for (uint32_t o = 0; o < nold; o++)
				if (old[2 * o] == s->att && old[2 * o + 1] != UINT32_MAX) {
					slot = (int)old[2 * o + 1];
					old[2 * o + 1] = UINT32_MAX;
					break;
				}
			if (slot < 0)
				slot = slot_claim(st, at);
			if (slot < 0) {
				/* None free: these go by the kernel's path. */
				for (uint32_t i = 0; i < s->count; i++)
					x->d[x->pos[s->pos_off + i]].why = FB_OTHER;
				s->slot = UINT32_MAX;
				s->count = 0;
				continue;
			}
			s->slot = (uint32_t)slot;
			struct sockaddr_storage t;
			s->tolen = tmpl_addr(at, s->v6, s->sfamily, s->slot, 0, &t);
			memcpy(&s->to, &t, s->tolen);
			s->ctllen = oif_cmsg(&s->oc, s->sfamily, s->v6, at->ifindex);
			struct kf_slot *sl = slot_at(at, s->slot);
			s->seq = (uint16_t)KF_STATE_SEQ(__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE));
			__atomic_store_n(&sl->cookie, si.cookie, __ATOMIC_RELAXED);
			__atomic_store_n(&sl->flags, 0, __ATOMIC_RELAXED);
			for (uint32_t i = 0; i < s->count; i++)
				memcpy(dest_at(at, s->slot, i), &x->d[x->pos[s->pos_off + i]].rec,
				       sizeof(struct kf_dest));
			__atomic_thread_fence(__ATOMIC_RELEASE);
		}
	}
	err = 0;
out:
	for (uint32_t o = 0; o < nold; o++)
		if (old[2 * o + 1] != UINT32_MAX)
			slot_release(st, &st->att[old[2 * o]], old[2 * o + 1]);
	free(old);
	x->ns = ns;
	if (err) {
		/* Every slot given back; the group is made again at the next call. */
		for (uint32_t k = 0; k < ns; k++)
			if (x->s[k].slot < UINT32_MAX - 1)
				slot_release(st, &st->att[x->s[k].att], x->s[k].slot);
		x->ns = 0;
	}
	return err;
}

/* Read again the options of up to REVAL_BUCKETS sockets of g; true if one changed. */
static bool socks_changed(struct kstate *st, const struct ms_group *g, struct kgroup *x)
{
	for (uint32_t n = 0; n < REVAL_BUCKETS && n < g->nbuckets; n++) {
		const uint32_t k = x->reval_next++ % g->nbuckets;
		const struct ms__bucket *b = g->buckets[k];
		if (b->type != SOCK_DGRAM || b->family == AF_UNIX || b->has_peer)
			continue;
		struct sockinfo si;
		sock_read(b->fd, &si, &st->sys);
		if ((si.usable ? si.sig : 0) != x->sigs[k])
			return true;
	}
	return false;
}

/* kgroup.direct: firing x->s[0 .. ns) in order sends what the walk of positions 0 .. n would
 * (which fires a slice at its first position and hands FB_* positions to the kernel). */
static bool in_slice_order(const struct kgroup *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (x->d[i].why)
			return false;
	for (uint32_t k = 0; k < x->ns; k++) {
		const struct kslice *s = &x->s[k];
		if (!s->count || s->slot >= UINT32_MAX - 1)
			return false;
		if (k && x->pos[s->pos_off] < x->pos[x->s[k - 1].pos_off])
			return false;
	}
	return true;
}

static int kf_prepare(struct ms_ctx *ctx, void *state, struct ms_group *g, uint32_t plan_gen,
		      void **gdata)
{
	struct kstate *st = state;
	struct kgroup *x = *gdata;
	(void)ctx;
	const uint64_t now = now_ns();
	if (now >= st->next_check) {
		st->next_check = now + CHECK_NS;
		if (ms__nl_changed(st->nl, &st->sys))
			st->net_gen++;
	}
	bool stale = !x || x->plan_gen != plan_gen || x->net_gen != st->net_gen || x->lost;
	if (!stale && now >= x->reval_at) {
		x->reval_at = now + REVAL_NS;
		stale = socks_changed(st, g, x);
	}
	if (!stale)
		return 0;
	if (!x) {
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM;
		*gdata = x;
	}
	/* What is pending now is older than what build reads. */
	(void)ms__nl_changed(st->nl, &st->sys);
	int err = build(st, g, x);
	if (err)
		return err;
	x->plan_gen = plan_gen;
	x->net_gen = st->net_gen;
	x->lost = false;
	x->reval_at = now + REVAL_NS;
	x->direct = in_slice_order(x, g->size);
	return 0;
}

static void kf_group_fini(void *state, void *gdata)
{
	struct kstate *st = state;
	struct kgroup *x = gdata;
	if (!x)
		return;
	if (getpid() == st->pid) /* a forked child's copy holds nothing of its own */
		for (uint32_t k = 0; k < x->ns; k++)
			if (x->s[k].slot < UINT32_MAX - 1)
				slot_release(st, &st->att[x->s[k].att], x->s[k].slot);
	free(x->d);
	free(x->s);
	free(x->pos);
	free(x->sigs);
	free(x);
}

/* ---- sending ---------------------------------------------------------------------------------- */

/* Consecutive positions that go by the kernel's path for one reason (0: counted elsewhere). */
struct krun {
	size_t start, len;
	unsigned why;
};

static void count_fallback(struct ms__tally *t, unsigned why, uint32_t n)
{
	switch (why) {
	case 0: break;
	case FB_LOCAL: t->kfanout_fallback_local += n; break;
	case FB_IFACE: t->kfanout_fallback_iface += n; break;
	case FB_MTU: t->kfanout_fallback_mtu += n; break;
	case FB_ROUTE: t->kfanout_fallback_route += n; break;
	case FB_NEIGH: t->kfanout_fallback_neigh += n; break;
	default: t->kfanout_fallback_other += n; break;
	}
}

static void krun_flush(struct ms__batch *b, struct krun *k)
{
	if (!k->len)
		return;
	count_fallback(&b->t, k->why, (uint32_t)k->len);
	ms__backend_sendmmsg.send(NULL, b, k->start, k->len);
	k->len = 0;
}

static void krun_add(struct ms__batch *b, struct krun *k, size_t i, unsigned why)
{
	if (k->len && (why != k->why || (k->start + k->len) % b->n != i))
		krun_flush(b, k);
	if (!k->len++) {
		k->start = i;
		k->why = why;
	}
}

/* Positions from..count of slice s by the kernel's path, counted as why. */
static void kpath_slice(struct ms__batch *b, const struct kgroup *x, const struct kslice *s,
			uint32_t from, unsigned why)
{
	struct krun k = { 0 };
	for (uint32_t i = from; i < s->count; i++)
		krun_add(b, &k, x->pos[s->pos_off + i], why);
	krun_flush(b, &k);
}

static bool in_range(size_t p, size_t first, size_t count, size_t n)
{
	return (p + n - first) % n < count;
}

/* Wait (bounded) for the program running slice's template to finish. The final state. */
static uint32_t wait_done(struct kf_slot *sl, uint32_t v, uint32_t seq)
{
	uint64_t until = 0;
	for (unsigned spins = 0; v == KF_STATE(seq, KF_RUNNING); spins++) {
		if (spins > 64) {
			const uint64_t now = now_ns();
			if (!until)
				until = now + WAIT_DONE_NS;
			else if (now > until)
				break;
			sched_yield();
		}
		v = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
	}
	return v;
}

/* One slice: its template, then its statuses (abi.h, steps 3 to 5). */
static void fire(struct kstate *st, struct ms__batch *b, struct kgroup *x, struct kslice *s,
		 size_t first, size_t count)
{
	const uint32_t *pos = &x->pos[s->pos_off];
	if (count < b->n) {
		/* A range that holds part of the slice (a slow-consumer policy cut the call):
		 * those of its positions in the range go by the kernel's path. */
		uint32_t in = 0;
		for (uint32_t i = 0; i < s->count; i++)
			in += in_range(pos[i], first, count, b->n);
		if (in != s->count) {
			struct krun k = { 0 };
			for (uint32_t i = 0; i < s->count; i++)
				if (in_range(pos[i], first, count, b->n))
					krun_add(b, &k, pos[i], FB_OTHER);
			krun_flush(b, &k);
			return;
		}
	}
	if (b->len >= s->lim) {
		kpath_slice(b, x, s, 0, FB_MTU);
		return;
	}
	const struct att *a = &st->att[s->att];
	struct kf_slot *sl = slot_at(a, s->slot);
	if (unlikely(__atomic_load_n(&sl->owner, __ATOMIC_RELAXED) != st->owner)) {
		/* Taken over (our claim looked stale to someone: another pid namespace): never
		 * again; the next prepare makes the group again with other slots. */
		st->att[s->att].mine[s->slot] = 0;
		s->slot = UINT32_MAX;
		x->lost = true;
		kpath_slice(b, x, s, 0, FB_OTHER);
		s->count = 0;
		return;
	}
	const uint16_t seq = s->seq = (uint16_t)((s->seq + 1) & 0x7fffu);
	const uint32_t armed = KF_STATE(seq, KF_ARMED);
	__atomic_store_n(&sl->count, s->count, __ATOMIC_RELAXED);
	__atomic_store_n(&sl->state, armed, __ATOMIC_RELEASE);
	static char none;
	struct iovec iov = { .iov_base = b->len ? b->iov[0].iov_base : &none, .iov_len = b->len };
	s->to.v4.sin_port = htons(KF_SEQ_PORT(seq)); /* sin6_port is at the same place */
	struct msghdr m = { .msg_name = &s->to,
			    .msg_namelen = s->tolen,
			    .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = &s->oc,
			    .msg_controllen = s->ctllen };
	ssize_t r;
	do {
		b->t.syscalls++;
		r = ms__sys.sendmsg(s->fd, &m, b->msg_flags | s->xflags);
	} while (r < 0 && errno == EINTR &&
		 __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) == armed);
	uint32_t v = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);
	if (v == armed) {
		if (__atomic_compare_exchange_n(&sl->state, &v, KF_STATE(seq, KF_IDLE), false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			/* The program did not run: it never will for this seq. */
			b->t.kfanout_reclaimed += s->count;
			kpath_slice(b, x, s, 0, 0);
			return;
		}
	}
	v = wait_done(sl, v, seq);
	if (v != KF_STATE(seq, KF_DONE)) {
		/* Neither done nor waiting: not ours to read (a taker-over's). What went is
		 * unknown; sending again could send twice. */
		for (uint32_t i = 0; i < s->count; i++)
			ms__status(b, pos[i], -EIO);
		b->t.kfanout_clone_err += s->count;
		x->lost = true;
		return;
	}
	b->t.kfanout_templates++;
	uint32_t done = __atomic_load_n(&sl->done, __ATOMIC_RELAXED);
	if (done > s->count)
		done = s->count;
	const size_t len = b->len;
	struct ms_result *const res = b->res;
	const struct ms__plan_entry *const plan = b->plan;
	const size_t stride = a->stride[M_STATUS];
	const unsigned char *sp = a->map[M_STATUS] + (size_t)s->slot * KF_SLICE_MAX * stride;
	uint32_t ok = 0;
	for (uint32_t i = 0; i < done; i++, sp += stride) {
		int64_t stv;
		memcpy(&stv, sp, sizeof(stv));
		const uint32_t p = pos[i];
		if (likely(stv == 0)) {
			ok++;
			if (res)
				res[p] = (struct ms_result){ .id = plan[p].id, .status = (int)len };
			continue;
		}
		if (stv == -EPERM)
			b->t.kfanout_refused++;
		else
			b->t.kfanout_clone_err++;
		ms__status(b, p, stv < 0 && stv >= -4095 ? (int)stv : -EIO);
	}
	b->t.kfanout_clones += ok;
	b->t.accepted += ok;
	b->t.bytes += (uint64_t)ok * len;
	if (done < s->count) {
		/* The program stopped early: the rest were not attempted. */
		b->t.kfanout_reclaimed += s->count - done;
		kpath_slice(b, x, s, done, 0);
	}
}

static int kf_send(void *state, struct ms__batch *b, size_t first, size_t count)
{
	struct kstate *st = state;
	struct kgroup *x = b->gdata;
	b->t.kf = true;
	b->t.syscalls += st->sys;
	st->sys = 0;
	const uint64_t call = ++x->calls;
	if (x->direct && first == 0 && count == b->n) {
		/* (A slice that loses its slot in fire sends by the kernel's path there, and the
		 * next prepare makes the group again: x->lost.) */
		for (uint32_t k = 0, ns = x->ns; k < ns; k++)
			fire(st, b, x, &x->s[k], first, count);
		return 0;
	}
	struct krun k = { 0 };
	for (MS__EACH(i, left, first, count, b->n)) {
		const struct kdest *d = &x->d[i];
		if (d->why) {
			krun_add(b, &k, i, d->why);
			continue;
		}
		struct kslice *s = &x->s[d->slice];
		if (s->call == call)
			continue;
		s->call = call;
		krun_flush(b, &k);
		if (unlikely(!s->count || s->slot >= UINT32_MAX - 1)) {
			/* Lost its slot earlier in this plan: the kernel's path. */
			krun_add(b, &k, i, FB_OTHER);
			s->call = 0;
			continue;
		}
		fire(st, b, x, s, first, count);
	}
	krun_flush(b, &k);
	return 0;
}

const struct ms__backend ms__backend_kfanout = {
	.id = MS_BACKEND_KFANOUT,
	.name = "kfanout",
	.caps = MS__CAP_FORK_UNSAFE | MS__CAP_WHOLE,
	.ctx_init = kf_ctx_init,
	.ctx_fini = kf_ctx_fini,
	.prepare = kf_prepare,
	.group_fini = kf_group_fini,
	.send = kf_send,
	.describe = kf_describe,
};
