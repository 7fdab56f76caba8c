/* SPDX-License-Identifier: MIT */
/*
 * multisend-kfanout: the administrator's side of the kernel fan-out (lib/be/kfanout/abi.h).
 *
 *   attach IFACE   load kfanout.bpf.o, attach it to IFACE's egress (tcx where the kernel has
 *                  it, clsact otherwise), pin its maps under KF_PIN_ROOT/IFACE/ with the owner
 *                  group and mode given (who may publish), make the template routes and write
 *                  kf_ctl;
 *   detach IFACE   remove all of that; a publisher sending meanwhile loses nothing (its slot
 *                  stays ARMED and it sends by the kernel's path: abi.h, step 5);
 *   status IFACE   what is attached, the counters, the slots in use, policy and groups;
 *   policy ...     the root-only LPM map of where clones may go (empty: nowhere);
 *   group ...      multicast groups replicated to unicast members.
 *
 * The routes and neighbour entries are made by running ip(8) (iproute2), not by netlink of our
 * own: the commands are those an administrator would type, and they are printed with -v.
 * Exit status: 0 done, 1 failed (nothing is left half-made by attach), 2 usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "abi.h"

#ifndef KF_OBJECT_PATH
#define KF_OBJECT_PATH "/usr/local/lib/multisend/kfanout.bpf.o"
#endif
#define KF_BPFFS "/sys/fs/bpf"
#define KF_BPF_FS_MAGIC 0xcafe4a11
/* enum bpf_attach_type's BPF_TCX_EGRESS (Linux 6.6): Debian 12's linux/bpf.h (6.1) and
 * libbpf 1.1 predate it, so bpf_link_create gets the number itself. */
#define KF_BPF_TCX_EGRESS 47
/* tcx's order flags (Linux 6.6's BPF_F_BEFORE, BPF_F_AFTER): with no relative program, first
 * and last on the hook. */
#define KF_BPF_F_BEFORE (1u << 3)
#define KF_BPF_F_AFTER (1u << 4)
/* The clsact fallback's filters: handles and priorities of our own, to find and remove them;
 * the backstop's priority after the program's (a larger number runs later). */
#define KF_TC_HANDLE 0x6b66
#define KF_TC_PRIO 0x6b66
#define KF_TC_BACKSTOP 0x6b67
#define KF_PIN_LINK "kf_link" /* tcx: the link (the attachment lives as long as this pin) */
#define KF_PIN_BACKSTOP "kf_backstop" /* tcx: the backstop's link */
#define KF_PIN_PROG "kf_prog"

extern char **environ;

static int verbose;
static const char *prog_name = "multisend-kfanout";

static void die_usage(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s attach IFACE [--group NAME] [--mode MODE] [--slice N]\n"
		"                  [--template4 A.B.0.0] [--template6 PREFIX::] [--object PATH]\n"
		"       %s detach IFACE\n"
		"       %s status IFACE\n"
		"       %s policy add|del IFACE PREFIX[/LEN] [PORT[-PORT]]\n"
		"       %s policy list IFACE\n"
		"       %s group add IFACE GROUP:PORT DEST:PORT... [--consume]\n"
		"       %s group del|list IFACE [GROUP:PORT]\n"
		"Options: -v/--verbose, -h/--help, -V/--version\n",
		prog_name, prog_name, prog_name, prog_name, prog_name, prog_name, prog_name);
}

static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	usage(stderr);
	exit(2);
}

static void err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && verbose < 2)
		return 0;
	if (level == LIBBPF_INFO && !verbose)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

/* --- small helpers ------------------------------------------------------------------------ */

static int pin_path(char *buf, size_t n, const char *ifname, const char *name)
{
	int r = name ? snprintf(buf, n, "%s/%s/%s", KF_PIN_ROOT, ifname, name)
		     : snprintf(buf, n, "%s/%s", KF_PIN_ROOT, ifname);

	return r < 0 || (size_t)r >= n ? -ENAMETOOLONG : 0;
}

static int check_ifname(const char *ifname)
{
	if (!*ifname || strlen(ifname) >= IFNAMSIZ || strchr(ifname, '/') ||
	    !strcmp(ifname, ".") || !strcmp(ifname, ".."))
		die_usage("bad interface name '%s'", ifname);
	return 0;
}

/* Run ip(8) with the arguments given (no shell); its output into out if out is not NULL.
 * Returns its exit status, or -errno when it could not run. */
static int run_ip(char *out, size_t outsz, bool quiet, const char *arg, ...)
{
	const char *argv[32];
	int n = 0, pfd[2] = {-1, -1}, st;
	posix_spawn_file_actions_t fa;
	va_list ap;
	pid_t pid;
	size_t got = 0;
	int e;

	argv[n++] = "ip";
	va_start(ap, arg);
	for (const char *a = arg; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	if (verbose) {
		fprintf(stderr, "+");
		for (int i = 0; i < n; i++)
			fprintf(stderr, " %s", argv[i]);
		fputc('\n', stderr);
	}
	posix_spawn_file_actions_init(&fa);
	if (out) {
		if (pipe2(pfd, O_CLOEXEC) < 0) {
			posix_spawn_file_actions_destroy(&fa);
			return -errno;
		}
		posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	}
	if (quiet)
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	e = posix_spawnp(&pid, "ip", &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (out)
		close(pfd[1]);
	if (e) {
		if (out)
			close(pfd[0]);
		return -e;
	}
	if (out) {
		ssize_t r;

		while ((r = read(pfd[0], out + got, outsz - 1 - got)) > 0 && got + r < outsz - 1)
			got += r;
		if (r > 0)
			got += r;
		out[got] = 0;
		close(pfd[0]);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int read_long(const char *path, long *v)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return -errno;
	ok = fscanf(f, "%ld", v) == 1;
	fclose(f);
	return ok ? 0 : -EINVAL;
}

/* Open a pinned map of IFACE's attachment. */
static int open_pin(const char *ifname, const char *name, bool rdonly)
{
	LIBBPF_OPTS(bpf_obj_get_opts, o, .file_flags = rdonly ? BPF_F_RDONLY : 0);
	char path[PATH_MAX];
	int fd;

	if (pin_path(path, sizeof(path), ifname, name))
		return -ENAMETOOLONG;
	fd = bpf_obj_get_opts(path, &o);
	return fd < 0 ? -errno : fd;
}

static int read_ctl(const char *ifname, struct kf_ctl *ctl)
{
	__u32 zero = 0;
	int fd = open_pin(ifname, KF_MAP_CTL, true), r;

	if (fd < 0)
		return fd;
	r = bpf_map_lookup_elem(fd, &zero, ctl) ? -errno : 0;
	close(fd);
	return r;
}

/* --- attach ------------------------------------------------------------------------------- */

struct attach_opts {
	const char *group;
	unsigned mode;
	unsigned slice;
	const char *tmpl4, *tmpl6, *object;
};

/* bpffs at /sys/fs/bpf, mounted if it is not (as systemd does at boot). */
static int ensure_bpffs(void)
{
	struct statfs sf;

	if (statfs(KF_BPFFS, &sf) == 0 && (unsigned long)sf.f_type == KF_BPF_FS_MAGIC)
		return 0;
	if (mkdir(KF_BPFFS, 0700) < 0 && errno != EEXIST) {
		err("mkdir %s: %s", KF_BPFFS, strerror(errno));
		return -1;
	}
	if (mount("bpf", KF_BPFFS, "bpf", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") < 0) {
		err("bpffs is not mounted at %s and mounting it failed: %s", KF_BPFFS,
		    strerror(errno));
		return -1;
	}
	printf("mounted bpffs at %s\n", KF_BPFFS);
	return 0;
}

static int mkdir_mode(const char *path, mode_t mode, gid_t gid)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST) {
		err("mkdir %s: %s", path, strerror(errno));
		return -1;
	}
	if (chown(path, 0, gid) < 0 || chmod(path, mode) < 0) {
		err("%s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* The slice: how many clones one template may queue. The clones of one call are queued with
 * bottom halves off, so the receiving side's backlog (netdev_max_backlog, per CPU; 1000 by
 * default) and the device's queue (tx_queue_len) must take a whole slice; an XDP program on a
 * veth peer takes 256 at a time. It cannot be measured without sending, so: a quarter of the
 * smaller of the two (room for other traffic and other publishers), at most KF_SLICE_MAX. */
static unsigned default_slice(const char *ifname)
{
	long backlog = 1000, qlen = 0;
	char path[128];
	unsigned s = KF_SLICE_MAX;

	read_long("/proc/sys/net/core/netdev_max_backlog", &backlog);
	snprintf(path, sizeof(path), "/sys/class/net/%s/tx_queue_len", ifname);
	if (read_long(path, &qlen) < 0) {
		struct ifreq ifr = {0};
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
		if (fd >= 0 && ioctl(fd, SIOCGIFTXQLEN, &ifr) == 0)
			qlen = ifr.ifr_qlen;
		if (fd >= 0)
			close(fd);
	}
	if (backlog > 0 && (unsigned long)backlog / 4 < s)
		s = backlog / 4;
	if (qlen > 0 && (unsigned long)qlen / 4 < s) /* 0: no queue (noqueue), no limit */
		s = qlen / 4;
	return s ? s : 1;
}

static int parse_tmpl4(const char *s, __be32 *out)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1 || (ntohl(a.s_addr) & 0xffff))
		return -1;
	*out = a.s_addr;
	return 0;
}

static int parse_tmpl6(const char *s, __u8 out[16])
{
	struct in6_addr a;

	if (inet_pton(AF_INET6, s, &a) != 1)
		return -1;
	for (int i = 8; i < 16; i++)
		if (a.s6_addr[i])
			return -1;
	memcpy(out, a.s6_addr, 16);
	return 0;
}

/* The gateways the template routes go through: never a slot (slots are < KF_SLOTS). */
static void tmpl_gw4(__be32 prefix, char *buf)
{
	struct in_addr a = {.s_addr = prefix | htonl(0xfffe)};

	inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

static void tmpl_gw6(const __u8 prefix[16], char *buf, char *net)
{
	struct in6_addr a;

	memcpy(a.s6_addr, prefix, 16);
	inet_ntop(AF_INET6, &a, net, INET6_ADDRSTRLEN);
	strcat(net, "/64");
	a.s6_addr[12] = a.s6_addr[13] = a.s6_addr[14] = 0xff;
	a.s6_addr[15] = 0xfe;
	inet_ntop(AF_INET6, &a, buf, INET6_ADDRSTRLEN);
}

static void fmt_mac(const __u8 *m, char *buf)
{
	sprintf(buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

/* Remove the template routes and neighbours of ctl (those that are there). */
static int del_routes(const char *ifname, const struct kf_ctl *ctl, bool quiet)
{
	char gw[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN + 4];
	int bad = 0;

	if (ctl->flags & KF_CTL_V4) {
		struct in_addr a = {.s_addr = ctl->tmpl4};

		inet_ntop(AF_INET, &a, net, sizeof(net));
		strcat(net, "/16");
		tmpl_gw4(ctl->tmpl4, gw);
		bad |= run_ip(NULL, 0, quiet, "-4", "route", "del", net, "dev", ifname, NULL) != 0;
		bad |= run_ip(NULL, 0, quiet, "-4", "neigh", "del", gw, "dev", ifname, NULL) != 0;
	}
	if (ctl->flags & KF_CTL_V6) {
		tmpl_gw6(ctl->tmpl6, gw, net);
		bad |= run_ip(NULL, 0, quiet, "-6", "route", "del", net, "dev", ifname, NULL) != 0;
		bad |= run_ip(NULL, 0, quiet, "-6", "neigh", "del", gw, "dev", ifname, NULL) != 0;
	}
	return bad ? -1 : 0;
}

static const char *const pinned_maps[] = {
	KF_MAP_CTL, KF_MAP_SLOTS, KF_MAP_DESTS, KF_MAP_STATUS, KF_MAP_STATS, KF_MAP_POLICY,
	KF_MAP_GROUPS,
};

/* Who may do what with each pin: the publishers' group gets the mode given on the maps they
 * write (slots, destinations, statuses), read-only on kf_ctl and kf_stats; policy, groups,
 * the program and the link are root's. */
static mode_t pin_mode(const char *name, unsigned mode)
{
	if (!strcmp(name, KF_MAP_SLOTS) || !strcmp(name, KF_MAP_DESTS) ||
	    !strcmp(name, KF_MAP_STATUS))
		return (mode & 0066) | 0600;
	if (!strcmp(name, KF_MAP_CTL) || !strcmp(name, KF_MAP_STATS))
		return (mode & 0044) | 0600;
	return 0600;
}

static void unpin_all(const char *ifname)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(pinned_maps) / sizeof(pinned_maps[0]); i++)
		if (!pin_path(path, sizeof(path), ifname, pinned_maps[i]))
			unlink(path);
	if (!pin_path(path, sizeof(path), ifname, KF_PIN_PROG))
		unlink(path);
	if (!pin_path(path, sizeof(path), ifname, KF_PIN_LINK))
		unlink(path);
	if (!pin_path(path, sizeof(path), ifname, KF_PIN_BACKSTOP))
		unlink(path);
	if (!pin_path(path, sizeof(path), ifname, NULL))
		rmdir(path);
}

/* The clsact filter of handle and priority hp (KF_TC_PRIO: the program; KF_TC_BACKSTOP). */
static int tc_detach(int ifindex, __u32 hp)
{
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .handle = hp, .priority = hp);

	return bpf_tc_detach(&hook, &o);
}

/*
 * Put prog_fd on IFACE's egress: tcx (Linux 6.6+) as a link pinned as pin, first on the hook
 * (the program) or last (the backstop) whatever else is there; else a clsact filter of handle
 * and priority hp. *tcx says which. 0, or 1 with the reason said.
 */
static int hook_attach(const char *ifname, int ifindex, int prog_fd, const char *pin, __u32 hp,
		       bool first, bool *tcx)
{
	char path[PATH_MAX];
	int link_fd;

	{
		LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = first ? KF_BPF_F_BEFORE : KF_BPF_F_AFTER);

		link_fd = bpf_link_create(prog_fd, ifindex, KF_BPF_TCX_EGRESS, &lo);
	}
	if (link_fd >= 0) {
		int r = 0;

		pin_path(path, sizeof(path), ifname, pin);
		if (bpf_obj_pin(link_fd, path)) {
			err("pinning %s: %s", path, strerror(errno));
			bpf_link_detach(link_fd);
			r = 1;
		}
		close(link_fd);
		*tcx = true;
		return r;
	}
	DECLARE_LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
	DECLARE_LIBBPF_OPTS(bpf_tc_opts, o, .handle = hp, .priority = hp, .prog_fd = prog_fd);
	int e = errno, r;

	*tcx = false;
	if (verbose)
		fprintf(stderr, "tcx attach: %s; trying clsact\n", strerror(e));
	r = bpf_tc_hook_create(&hook);
	if (r && r != -EEXIST) {
		err("%s: clsact: %s", ifname, strerror(-r));
		return 1;
	}
	r = bpf_tc_attach(&hook, &o);
	if (r) {
		err("%s: attaching the tc filter: %s", ifname, strerror(-r));
		return 1;
	}
	return 0;
}

/* Take the program (pin KF_PIN_LINK, filter KF_TC_PRIO) or the backstop off the hook: its
 * tcx link, or with clsact (!tcx) its filter. 0, or 1 with the reason said; nothing there is
 * not an error. */
static int hook_detach(const char *ifname, int ifindex, const char *pin, __u32 hp, bool tcx)
{
	int fd = open_pin(ifname, pin, false), r;

	if (fd >= 0) {
		/* The link goes with its last reference; detach it now in case another holds one. */
		r = bpf_link_detach(fd) && errno != ENOLINK && errno != EINVAL ? -errno : 0;
		close(fd);
		if (!r) {
			char path[PATH_MAX];

			if (!pin_path(path, sizeof(path), ifname, pin))
				unlink(path);
			return 0;
		}
		err("%s: detaching the tcx link %s: %s", ifname, pin, strerror(-r));
		return 1;
	}
	if (tcx)
		return 0; /* its pin is gone: someone took it off */
	/* No clsact qdisc at all is -EINVAL ("Parent Qdisc doesn't exists"): nothing there. */
	r = tc_detach(ifindex, hp);
	if (r && r != -ENOENT && r != -ENODEV && r != -EINVAL) {
		err("%s: removing the tc filter: %s", ifname, strerror(-r));
		return 1;
	}
	return 0;
}

static int cmd_attach(const char *ifname, const struct attach_opts *ao)
{
	struct kf_ctl ctl = {.abi = KF_ABI_VERSION};
	char path[PATH_MAX], gw[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN + 4], mac[18];
	struct bpf_object *obj = NULL;
	struct bpf_program *prog;
	struct timespec now;
	struct ifreq ifr = {0};
	gid_t gid = 0;
	bool tcx = false, btcx = false, routed = false, pinned = false, backstop = false;
	bool attached = false;
	int ifindex, fd, prog_fd, bprog_fd, ctl_fd;
	__u32 zero = 0;
	mode_t dmode;

	ifindex = if_nametoindex(ifname);
	if (!ifindex) {
		err("%s: no such interface", ifname);
		return 1;
	}
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (fd < 0 || ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
		err("%s: %s", ifname, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	close(fd);
	if (ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
		err("%s is not an Ethernet device (link type %u): the program rewrites Ethernet "
		    "headers", ifname, ifr.ifr_hwaddr.sa_family);
		return 1;
	}
	if (ao->group) {
		struct group *g = getgrnam(ao->group);

		if (!g) {
			err("no group '%s'", ao->group);
			return 1;
		}
		gid = g->gr_gid;
	}
	ctl.ifindex = ifindex;
	ctl.slice = ao->slice ? ao->slice : default_slice(ifname);
	if (parse_tmpl4(ao->tmpl4, &ctl.tmpl4) < 0) {
		err("--template4 %s: not an IPv4 /16 prefix (A.B.0.0)", ao->tmpl4);
		return 2;
	}
	if (parse_tmpl6(ao->tmpl6, ctl.tmpl6) < 0) {
		err("--template6 %s: not an IPv6 /64 prefix (PREFIX::)", ao->tmpl6);
		return 2;
	}
	/* A locally administered unicast MAC, never on a wire: 02:6b:66 ("kf") + the ifindex. */
	ctl.tmpl_mac[0] = 0x02;
	ctl.tmpl_mac[1] = 0x6b;
	ctl.tmpl_mac[2] = 0x66;
	ctl.tmpl_mac[3] = ifindex >> 16;
	ctl.tmpl_mac[4] = ifindex >> 8;
	ctl.tmpl_mac[5] = ifindex;
	clock_gettime(CLOCK_REALTIME, &now);
	ctl.attached_ns = (__u64)now.tv_sec * 1000000000ull + now.tv_nsec;

	if (ensure_bpffs() < 0)
		return 1;
	if (pin_path(path, sizeof(path), ifname, KF_MAP_CTL) == 0 && access(path, F_OK) == 0) {
		err("%s: already attached (%s exists); detach it first", ifname, path);
		return 1;
	}
	/* bpffs is mounted 0700 by systemd: the publishers must be able to reach their pins
	 * (search, not list). */
	{
		struct stat st;

		if ((ao->mode & 0066) && stat(KF_BPFFS, &st) == 0 && !(st.st_mode & S_IXOTH)) {
			if (chmod(KF_BPFFS, (st.st_mode & 07777) | S_IXOTH) < 0) {
				err("chmod o+x %s: %s", KF_BPFFS, strerror(errno));
				return 1;
			}
			printf("%s: added o+x (search, not list) so that the pins' group can reach "
			       "them\n", KF_BPFFS);
		}
	}

	obj = bpf_object__open_file(ao->object, NULL);
	if (!obj) {
		err("%s: %s", ao->object, strerror(errno));
		return 1;
	}
	if (bpf_object__load(obj)) {
		err("loading %s failed: %s (the verifier's log is above; run with -vv for "
		    "libbpf's)", ao->object, strerror(errno));
		goto fail;
	}
	prog = bpf_object__find_program_by_name(obj, "kf_egress");
	if (!prog) {
		err("%s has no program kf_egress", ao->object);
		goto fail;
	}
	prog_fd = bpf_program__fd(prog);
	prog = bpf_object__find_program_by_name(obj, "kf_backstop");
	if (!prog) {
		err("%s has no program kf_backstop", ao->object);
		goto fail;
	}
	bprog_fd = bpf_program__fd(prog);
	ctl.flags = KF_CTL_V4 | KF_CTL_V6; /* cleared below for a family without a route */

	/* Pins first: the directory, then every map with its owner and mode. */
	if (mkdir_mode(KF_PIN_ROOT, 0755, 0) < 0)
		goto fail;
	dmode = 0700 | ((ao->mode & 0060) ? 0050 : 0) | ((ao->mode & 0006) ? 0005 : 0);
	pin_path(path, sizeof(path), ifname, NULL);
	if (mkdir_mode(path, dmode, gid) < 0)
		goto fail;
	pinned = true;
	for (size_t i = 0; i < sizeof(pinned_maps) / sizeof(pinned_maps[0]); i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, pinned_maps[i]);

		pin_path(path, sizeof(path), ifname, pinned_maps[i]);
		if (!m || bpf_map__pin(m, path)) {
			err("pinning %s: %s", path, m ? strerror(errno) : "no such map");
			goto fail;
		}
		if (chown(path, 0, gid) < 0 || chmod(path, pin_mode(pinned_maps[i], ao->mode)) < 0) {
			err("%s: %s", path, strerror(errno));
			goto fail;
		}
	}
	pin_path(path, sizeof(path), ifname, KF_PIN_PROG);
	if (bpf_obj_pin(prog_fd, path)) {
		err("pinning %s: %s", path, strerror(errno));
		goto fail;
	}

	/* The backstop before the routes (it reads the template prefixes from kf_ctl): from the
	 * first template routed out of IFACE to the last, none leaves on the wire untaken. */
	ctl_fd = bpf_map__fd(bpf_object__find_map_by_name(obj, KF_MAP_CTL));
	if (bpf_map_update_elem(ctl_fd, &zero, &ctl, BPF_ANY)) {
		err("writing kf_ctl: %s", strerror(errno));
		goto fail;
	}
	if (hook_attach(ifname, ifindex, bprog_fd, KF_PIN_BACKSTOP, KF_TC_BACKSTOP, false,
			&btcx))
		goto fail;
	backstop = true;

	/* The template routes: the /16 (/64) via a gateway inside it, onlink, whose permanent
	 * neighbour entry is tmpl_mac, so that a template leaves by IFACE with no resolution. */
	fmt_mac(ctl.tmpl_mac, mac);
	routed = true;
	tmpl_gw4(ctl.tmpl4, gw);
	{
		struct in_addr a = {.s_addr = ctl.tmpl4};

		inet_ntop(AF_INET, &a, net, sizeof(net));
		strcat(net, "/16");
	}
	if (run_ip(NULL, 0, false, "-4", "neigh", "replace", gw, "lladdr", mac, "dev", ifname,
		   "nud", "permanent", NULL) ||
	    run_ip(NULL, 0, false, "-4", "route", "add", net, "via", gw, "dev", ifname, "onlink",
		   NULL)) {
		err("%s: the IPv4 template route %s via %s failed (ip's message above)", ifname,
		    net, gw);
		goto fail;
	}
	tmpl_gw6(ctl.tmpl6, gw, net);
	if (run_ip(NULL, 0, false, "-6", "neigh", "replace", gw, "lladdr", mac, "dev", ifname,
		   "nud", "permanent", NULL) ||
	    run_ip(NULL, 0, false, "-6", "route", "add", net, "via", gw, "dev", ifname, "onlink",
		   NULL)) {
		/* IPv6 disabled on the device, say: IPv4 templates only, and say so. */
		run_ip(NULL, 0, true, "-6", "neigh", "del", gw, "dev", ifname, NULL);
		err("%s: no IPv6 template route (%s via %s failed, ip's message above): IPv4 "
		    "templates only", ifname, net, gw);
		ctl.flags &= ~KF_CTL_V6;
	}

	if (bpf_map_update_elem(ctl_fd, &zero, &ctl, BPF_ANY)) {
		err("writing kf_ctl: %s", strerror(errno));
		goto fail;
	}

	/* Attach last, once everything it reads is in place: tcx (Linux 6.6+) as a link pinned
	 * beside the maps, first on the hook (before the backstop and anything else), else a
	 * clsact filter of our own handle and priority (before the backstop's). */
	if (hook_attach(ifname, ifindex, prog_fd, KF_PIN_LINK, KF_TC_PRIO, true, &tcx))
		goto fail;
	attached = true;
	if (tcx != btcx) {
		err("%s: the program went on by %s but the backstop by %s", ifname,
		    tcx ? "tcx" : "clsact", btcx ? "tcx" : "clsact");
		goto fail;
	}
	printf("%s: attached (%s), program %s, slice %u, templates %s%s, pins %s/%s/ "
	       "(group %s, mode %04o)\n",
	       ifname, tcx ? "tcx" : "clsact", ao->object, ctl.slice,
	       ao->tmpl4, (ctl.flags & KF_CTL_V6) ? " and IPv6" : "", KF_PIN_ROOT, ifname,
	       ao->group ? ao->group : "root", ao->mode);
	bpf_object__close(obj);
	return 0;

fail:
	if (attached)
		hook_detach(ifname, ifindex, KF_PIN_LINK, KF_TC_PRIO, tcx);
	if (routed)
		del_routes(ifname, &ctl, true);
	if (backstop)
		hook_detach(ifname, ifindex, KF_PIN_BACKSTOP, KF_TC_BACKSTOP, btcx);
	if (pinned)
		unpin_all(ifname);
	bpf_object__close(obj);
	return 1;
}

/* --- detach ------------------------------------------------------------------------------- */

static int cmd_detach(const char *ifname)
{
	struct kf_ctl ctl;
	char path[PATH_MAX];
	int r, bad = 0;

	r = read_ctl(ifname, &ctl);
	if (r < 0) {
		err("%s: not attached (%s/%s/%s: %s)", ifname, KF_PIN_ROOT, ifname, KF_MAP_CTL,
		    strerror(-r));
		return 1;
	}
	/* tcx if either link is pinned (someone may have removed one). The program, the
	 * routes, then the backstop: a template routed out of IFACE meanwhile is dropped there;
	 * once the routes are gone, a publisher's template goes nowhere else either (it names
	 * IFACE as its outgoing interface: lib/be/kfanout/abi.h). */
	bool tcx = false;

	if (!pin_path(path, sizeof(path), ifname, KF_PIN_LINK))
		tcx |= access(path, F_OK) == 0;
	if (!pin_path(path, sizeof(path), ifname, KF_PIN_BACKSTOP))
		tcx |= access(path, F_OK) == 0;
	bad |= hook_detach(ifname, ctl.ifindex, KF_PIN_LINK, KF_TC_PRIO, tcx);
	if (if_nametoindex(ifname) == ctl.ifindex && del_routes(ifname, &ctl, false) < 0) {
		err("%s: a template route or neighbour could not be removed (ip's message above)",
		    ifname);
		bad = 1;
	}
	bad |= hook_detach(ifname, ctl.ifindex, KF_PIN_BACKSTOP, KF_TC_BACKSTOP, tcx);
	unpin_all(ifname);
	if (pin_path(path, sizeof(path), ifname, NULL) == 0 && access(path, F_OK) == 0) {
		err("%s: could not remove %s", ifname, path);
		bad = 1;
	}
	if (!bad)
		printf("%s: detached\n", ifname);
	return bad;
}

/* --- status ------------------------------------------------------------------------------- */

static const char *const stat_names[] = {
	[KF_STAT_TEMPLATES] = "templates", [KF_STAT_CLONES] = "clones",
	[KF_STAT_CLONE_ERR] = "clone_errors", [KF_STAT_POLICY] = "policy_refused",
	[KF_STAT_NOT_OWNER] = "not_owner", [KF_STAT_STALE] = "stale",
	[KF_STAT_MALFORMED] = "malformed", [KF_STAT_GROUP_PKTS] = "group_datagrams",
	[KF_STAT_BACKSTOP] = "backstop_dropped",
};

static int fmt_prefix(const struct kf_prefix *p, char *buf, size_t n)
{
	char a[INET6_ADDRSTRLEN];

	if (!inet_ntop(p->family == AF_INET6 ? AF_INET6 : AF_INET, p->addr, a, sizeof(a)))
		return -1;
	snprintf(buf, n, "%s/%u", a, p->prefixlen - 32);
	return 0;
}

static int list_policy(const char *ifname, bool quiet_empty)
{
	struct kf_prefix k, next;
	struct kf_ports v;
	char buf[INET6_ADDRSTRLEN + 8];
	int fd = open_pin(ifname, KF_MAP_POLICY, true), n = 0;
	void *prev = NULL;

	if (fd < 0) {
		err("%s: %s/%s/%s: %s", ifname, KF_PIN_ROOT, ifname, KF_MAP_POLICY,
		    strerror(-fd));
		return -1;
	}
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		if (bpf_map_lookup_elem(fd, &k, &v))
			continue;
		if (fmt_prefix(&k, buf, sizeof(buf)) == 0)
			printf("policy %s ports %u-%u\n", buf, v.lo, v.hi);
		n++;
	}
	if (!n && !quiet_empty)
		printf("policy empty: clones may go nowhere\n");
	close(fd);
	return n;
}

static void fmt_ep(int family, const void *addr, __be16 port, char *buf, size_t n)
{
	char a[INET6_ADDRSTRLEN];

	inet_ntop(family, addr, a, sizeof(a));
	snprintf(buf, n, family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, ntohs(port));
}

static int list_groups(const char *ifname)
{
	struct kf_gkey k, next;
	__u32 slot;
	void *prev = NULL;
	int fd = open_pin(ifname, KF_MAP_GROUPS, true), sfd, dfd, n = 0;

	if (fd < 0) {
		err("%s: %s/%s/%s: %s", ifname, KF_PIN_ROOT, ifname, KF_MAP_GROUPS,
		    strerror(-fd));
		return -1;
	}
	sfd = open_pin(ifname, KF_MAP_SLOTS, true);
	dfd = open_pin(ifname, KF_MAP_DESTS, true);
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		struct kf_slot s = {0};
		char g[INET6_ADDRSTRLEN + 10];
		int fam;

		k = next;
		prev = &k;
		if (bpf_map_lookup_elem(fd, &k, &slot))
			continue;
		fam = k.family == AF_INET6 ? AF_INET6 : AF_INET;
		fmt_ep(fam, k.addr, k.port, g, sizeof(g));
		if (sfd >= 0)
			bpf_map_lookup_elem(sfd, &slot, &s);
		printf("group %s slot %u%s members %u:", g, slot,
		       (s.flags & KF_GROUP_CONSUME) ? " consume" : "", s.count);
		for (__u32 i = 0; dfd >= 0 && i < s.count && i < KF_SLICE_MAX; i++) {
			struct kf_dest d;
			__u32 idx = slot * KF_SLICE_MAX + i;
			char m[INET6_ADDRSTRLEN + 10], mac[18];

			if (bpf_map_lookup_elem(dfd, &idx, &d))
				continue;
			fmt_ep(fam, &d.addr, d.port, m, sizeof(m));
			fmt_mac(d.mac, mac);
			printf(" %s (%s)", m, mac);
		}
		printf("\n");
		n++;
	}
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	close(fd);
	return n;
}

static int cmd_status(const char *ifname)
{
	struct kf_ctl ctl;
	char path[PATH_MAX], a4[INET_ADDRSTRLEN], a6[INET6_ADDRSTRLEN];
	struct bpf_prog_info info = {0};
	__u32 ilen = sizeof(info);
	int ncpu = libbpf_num_possible_cpus(), fd, r, used = 0;
	bool tcx;

	r = read_ctl(ifname, &ctl);
	if (r < 0) {
		printf("%s: not attached\n", ifname);
		err("%s: %s/%s/%s: %s", ifname, KF_PIN_ROOT, ifname, KF_MAP_CTL, strerror(-r));
		return 1;
	}
	pin_path(path, sizeof(path), ifname, KF_PIN_LINK);
	tcx = access(path, F_OK) == 0;
	pin_path(path, sizeof(path), ifname, KF_PIN_BACKSTOP);
	tcx |= access(path, F_OK) == 0;
	fd = open_pin(ifname, KF_PIN_PROG, true);
	if (fd >= 0) {
		bpf_obj_get_info_by_fd(fd, &info, &ilen);
		close(fd);
	}
	inet_ntop(AF_INET, &ctl.tmpl4, a4, sizeof(a4));
	inet_ntop(AF_INET6, ctl.tmpl6, a6, sizeof(a6));
	printf("%s: attached (%s), ifindex %u%s, program id %u, abi %u, slice %u\n", ifname,
	       tcx ? "tcx" : "clsact", ctl.ifindex,
	       if_nametoindex(ifname) == ctl.ifindex ? "" : " (the interface is gone)", info.id,
	       ctl.abi, ctl.slice);
	printf("templates %s/16%s, %s/64%s\n", a4, (ctl.flags & KF_CTL_V4) ? "" : " (off)", a6,
	       (ctl.flags & KF_CTL_V6) ? "" : " (off)");
	if (tcx) {
		pin_path(path, sizeof(path), ifname, KF_PIN_LINK);
		if (access(path, F_OK))
			printf("the program's link is gone: templates are dropped by the backstop "
			       "and publishers send by the kernel's path (detach, then attach)\n");
		pin_path(path, sizeof(path), ifname, KF_PIN_BACKSTOP);
		if (access(path, F_OK))
			printf("no backstop: a template the program does not take leaves on the "
			       "wire (detach, then attach)\n");
	}

	fd = open_pin(ifname, KF_MAP_STATS, true);
	if (fd >= 0 && ncpu > 0) {
		__u64 *v = calloc(ncpu, sizeof(*v));

		for (__u32 i = 0; v && i < sizeof(stat_names) / sizeof(stat_names[0]); i++) {
			__u64 sum = 0;

			if (bpf_map_lookup_elem(fd, &i, v))
				continue;
			for (int c = 0; c < ncpu; c++)
				sum += v[c];
			printf("%s %" PRIu64 "\n", stat_names[i], (uint64_t)sum);
		}
		free(v);
	}
	if (fd >= 0)
		close(fd);

	fd = open_pin(ifname, KF_MAP_SLOTS, true);
	if (fd >= 0) {
		for (__u32 k = 0; k < KF_SLOTS; k++) {
			struct kf_slot s;

			if (bpf_map_lookup_elem(fd, &k, &s) || !s.owner)
				continue;
			used++;
			if (s.owner == KF_OWNER_GROUP)
				printf("slot %u group, %u members\n", k, s.count);
			else
				printf("slot %u pid %" PRIu64 " state %u seq %u count %u done %u\n", k,
				       (uint64_t)(s.owner >> 32), KF_STATE_ST(s.state),
				       KF_STATE_SEQ(s.state), s.count, s.done);
		}
		close(fd);
	}
	printf("slots in use %d of %u\n", used, KF_SLOTS);
	/* Policy and groups are root's: say so when this user cannot read them. */
	if (list_policy(ifname, false) < 0 || list_groups(ifname) < 0)
		return 1;
	return 0;
}

/* --- policy ------------------------------------------------------------------------------- */

static int parse_ports(const char *s, struct kf_ports *p)
{
	char *e;
	unsigned long lo, hi;

	if (!s) {
		p->lo = 0;
		p->hi = 65535;
		return 0;
	}
	errno = 0;
	lo = strtoul(s, &e, 10);
	if (e == s || errno || lo > 65535)
		return -1;
	hi = lo;
	if (*e == '-') {
		const char *h = e + 1;

		hi = strtoul(h, &e, 10);
		if (e == h || errno || hi > 65535)
			return -1;
	}
	if (*e || hi < lo)
		return -1;
	p->lo = lo;
	p->hi = hi;
	return 0;
}

static int parse_prefix(const char *s, struct kf_prefix *p)
{
	char a[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	unsigned long len, max;
	char *e;

	memset(p, 0, sizeof(*p));
	if (n >= sizeof(a))
		return -1;
	memcpy(a, s, n);
	a[n] = 0;
	if (inet_pton(AF_INET, a, p->addr) == 1) {
		p->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, a, p->addr) == 1) {
		p->family = AF_INET6;
		max = 128;
	} else {
		return -1;
	}
	len = max;
	if (slash) {
		errno = 0;
		len = strtoul(slash + 1, &e, 10);
		if (e == slash + 1 || *e || errno || len > max)
			return -1;
	}
	/* The host bits are cleared: the entry is the prefix, as the kernel's trie keeps it. */
	for (unsigned long b = len; b < max; b++)
		p->addr[b / 8] &= ~(0x80 >> (b % 8));
	p->prefixlen = 32 + len;
	return 0;
}

static int cmd_policy(const char *op, const char *ifname, int argc, char **argv)
{
	struct kf_prefix key;
	struct kf_ports ports;
	char buf[INET6_ADDRSTRLEN + 8];
	int fd, r;

	if (!strcmp(op, "list")) {
		if (argc)
			die_usage("policy list takes only IFACE");
		return list_policy(ifname, false) < 0;
	}
	if (strcmp(op, "add") && strcmp(op, "del"))
		die_usage("policy: add, del or list, not '%s'", op);
	if (argc < 1 || argc > 2)
		die_usage("policy %s IFACE PREFIX[/LEN] [PORT[-PORT]]", op);
	if (parse_prefix(argv[0], &key) < 0)
		die_usage("'%s' is not an IPv4 or IPv6 prefix", argv[0]);
	if (parse_ports(argc > 1 ? argv[1] : NULL, &ports) < 0)
		die_usage("'%s' is not a port or a range LO-HI (0-65535)", argv[1]);
	fd = open_pin(ifname, KF_MAP_POLICY, false);
	if (fd < 0) {
		err("%s: %s/%s/%s: %s%s", ifname, KF_PIN_ROOT, ifname, KF_MAP_POLICY,
		    strerror(-fd), fd == -ENOENT ? " (not attached?)" : "");
		return 1;
	}
	fmt_prefix(&key, buf, sizeof(buf));
	if (!strcmp(op, "add")) {
		r = bpf_map_update_elem(fd, &key, &ports, BPF_ANY) ? -errno : 0;
		if (r)
			err("policy add %s: %s", buf, strerror(-r));
		else
			printf("policy %s ports %u-%u\n", buf, ports.lo, ports.hi);
	} else {
		r = bpf_map_delete_elem(fd, &key) ? -errno : 0;
		if (r)
			err("policy del %s: %s", buf,
			    r == -ENOENT ? "no such entry" : strerror(-r));
	}
	close(fd);
	return r ? 1 : 0;
}

/* --- groups ------------------------------------------------------------------------------- */

/* "A.B.C.D:PORT" or "[V6]:PORT". */
static int parse_ep(const char *s, int *family, __u8 addr[16], __be16 *port)
{
	char a[INET6_ADDRSTRLEN + 1];
	const char *colon, *p;
	unsigned long v;
	char *e;
	size_t n;

	memset(addr, 0, 16);
	if (*s == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -1;
		n = rb - s - 1;
		p = s + 1;
		colon = rb + 1;
		*family = AF_INET6;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		n = colon - s;
		p = s;
		*family = AF_INET;
	}
	if (n >= sizeof(a))
		return -1;
	memcpy(a, p, n);
	a[n] = 0;
	if (inet_pton(*family, a, addr) != 1)
		return -1;
	errno = 0;
	v = strtoul(colon + 1, &e, 10);
	if (e == colon + 1 || *e || errno || !v || v > 65535)
		return -1;
	*port = htons(v);
	return 0;
}

static bool is_multicast(int family, const __u8 *a)
{
	return family == AF_INET ? (a[0] & 0xf0) == 0xe0 : a[0] == 0xff;
}

/* A member's next hop and its MAC: the kernel's route (must leave by IFACE) and neighbour
 * tables, read with ip(8). An unresolved neighbour is refused (the program cannot resolve). */
static int resolve(const char *ifname, int family, const __u8 *addr, __u8 mac[6])
{
	char a[INET6_ADDRSTRLEN], out[4096], nh[INET6_ADDRSTRLEN], dev[IFNAMSIZ + 1];
	const char *fam = family == AF_INET6 ? "-6" : "-4";
	char *p;
	unsigned m[6];
	int r;

	inet_ntop(family, addr, a, sizeof(a));
	r = run_ip(out, sizeof(out), true, fam, "-o", "route", "get", a, NULL);
	if (r) {
		err("%s: no route (ip route get failed)", a);
		return -1;
	}
	if (strstr(out, " local ") || !strncmp(out, "local ", 6)) {
		err("%s is local to this host: clones leave by %s", a, ifname);
		return -1;
	}
	p = strstr(out, " dev ");
	if (!p || sscanf(p, " dev %16s", dev) != 1 || strcmp(dev, ifname)) {
		err("%s leaves by %s, not %s", a, p ? dev : "?", ifname);
		return -1;
	}
	snprintf(nh, sizeof(nh), "%s", a);
	p = strstr(out, " via ");
	if (p && sscanf(p, " via %45s", nh) != 1)
		return -1;
	if (family == AF_INET6 && p && !strncmp(nh, "inet6", 5))
		sscanf(p, " via inet6 %45s", nh);
	r = run_ip(out, sizeof(out), true, fam, "neigh", "show", "to", nh, "dev", ifname, NULL);
	p = r ? NULL : strstr(out, "lladdr ");
	if (!p || sscanf(p, "lladdr %x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4],
			 &m[5]) != 6 || strstr(out, "FAILED") || strstr(out, "INCOMPLETE")) {
		err("%s: the neighbour %s on %s is not resolved; reach it once (ping) or add it "
		    "(ip neigh replace %s lladdr MAC dev %s nud permanent), then add the group "
		    "again", a, nh, ifname, nh, ifname);
		return -1;
	}
	for (int i = 0; i < 6; i++)
		mac[i] = m[i];
	return 0;
}

/* Claim a free slot for a group, from the top (publishers claim from the bottom; both by
 * compare-and-swap in the mmap'ed map, as abi.h says). */
static int claim_slot(struct kf_slot *slots)
{
	for (int k = KF_SLOTS - 1; k >= 0; k--) {
		__u64 zero = 0;

		if (__atomic_compare_exchange_n(&slots[k].owner, &zero, KF_OWNER_GROUP, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return k;
	}
	return -1;
}

static void release_slot(struct kf_slot *s)
{
	s->count = 0;
	s->flags = 0;
	s->cookie = 0;
	__atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
}

static int cmd_group(const char *op, const char *ifname, int argc, char **argv, bool consume)
{
	struct kf_gkey key = {0};
	__u8 gaddr[16];
	int family, gfd = -1, sfd = -1, dfd = -1, k = -1, rc = 1;
	__u32 old = 0;
	bool had_old;
	struct kf_slot *slots = MAP_FAILED;
	size_t slots_len = KF_SLOTS * sizeof(struct kf_slot);

	if (!strcmp(op, "list")) {
		if (argc)
			die_usage("group list takes only IFACE");
		return list_groups(ifname) < 0;
	}
	if (strcmp(op, "add") && strcmp(op, "del"))
		die_usage("group: add, del or list, not '%s'", op);
	if (argc < 1)
		die_usage("group %s IFACE GROUP:PORT%s", op, strcmp(op, "add") ? "" : " DEST:PORT...");
	if (parse_ep(argv[0], &family, gaddr, &key.port) < 0 || !is_multicast(family, gaddr))
		die_usage("'%s' is not a multicast GROUP:PORT ([GROUP]:PORT for IPv6)", argv[0]);
	key.family = family == AF_INET6 ? AF_INET6 : AF_INET;
	memcpy(key.addr, gaddr, 16);
	if (!strcmp(op, "del") && argc != 1)
		die_usage("group del IFACE GROUP:PORT");
	if (!strcmp(op, "add") && argc < 2)
		die_usage("group add needs at least one member DEST:PORT");
	if (argc - 1 > (int)KF_SLICE_MAX)
		die_usage("at most %u members per group", KF_SLICE_MAX);

	gfd = open_pin(ifname, KF_MAP_GROUPS, false);
	sfd = open_pin(ifname, KF_MAP_SLOTS, false);
	dfd = open_pin(ifname, KF_MAP_DESTS, false);
	if (gfd < 0 || sfd < 0 || dfd < 0) {
		int e = gfd < 0 ? gfd : sfd < 0 ? sfd : dfd;

		err("%s: the pinned maps: %s%s", ifname, strerror(-e),
		    e == -ENOENT ? " (not attached?)" : "");
		goto out;
	}
	slots = mmap(NULL, slots_len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (slots == MAP_FAILED) {
		err("mmap %s: %s", KF_MAP_SLOTS, strerror(errno));
		goto out;
	}
	had_old = bpf_map_lookup_elem(gfd, &key, &old) == 0 && old < KF_SLOTS;

	if (!strcmp(op, "add")) {
		struct kf_dest d[KF_SLICE_MAX];
		int n = argc - 1;

		memset(d, 0, sizeof(d));
		for (int i = 0; i < n; i++) {
			int f;

			if (parse_ep(argv[i + 1], &f, d[i].addr.v6, &d[i].port) < 0 || f != family) {
				err("member '%s': not an %s DEST:PORT", argv[i + 1],
				    family == AF_INET6 ? "IPv6 [DEST]" : "IPv4");
				rc = 2;
				goto out;
			}
			if (is_multicast(f, d[i].addr.v6)) {
				err("member '%s' is a multicast address", argv[i + 1]);
				rc = 2;
				goto out;
			}
			if (resolve(ifname, f, d[i].addr.v6, d[i].mac) < 0)
				goto out;
		}
		/* A fresh slot filled first, then the group switched to it in one map update:
		 * a datagram being replicated meanwhile sees the old members or the new. */
		k = claim_slot(slots);
		if (k < 0) {
			err("%s: no free slot", ifname);
			goto out;
		}
		for (int i = 0; i < n; i++) {
			__u32 idx = k * KF_SLICE_MAX + i;

			if (bpf_map_update_elem(dfd, &idx, &d[i], BPF_ANY)) {
				err("writing %s: %s", KF_MAP_DESTS, strerror(errno));
				release_slot(&slots[k]);
				goto out;
			}
		}
		slots[k].cookie = KF_COOKIE_ANY;
		slots[k].flags = consume ? KF_GROUP_CONSUME : 0;
		__atomic_store_n(&slots[k].count, n, __ATOMIC_RELEASE);
		{
			__u32 kv = k;

			if (bpf_map_update_elem(gfd, &key, &kv, BPF_ANY)) {
				err("writing %s: %s", KF_MAP_GROUPS, strerror(errno));
				release_slot(&slots[k]);
				goto out;
			}
		}
		printf("group %s: %d member%s, slot %d%s\n", argv[0], n, n == 1 ? "" : "s", k,
		       consume ? ", original consumed" : "");
	} else {
		if (!had_old) {
			err("group %s: no such group on %s", argv[0], ifname);
			goto out;
		}
		if (bpf_map_delete_elem(gfd, &key)) {
			err("group del %s: %s", argv[0], strerror(errno));
			goto out;
		}
	}
	if (had_old) {
		/* A replication that read the old slot before the switch runs to its end with
		 * bottom halves off, in microseconds: give it far more before the slot is reused. */
		struct timespec ts = {0, 50 * 1000 * 1000};

		nanosleep(&ts, NULL);
		if (slots[old].owner == KF_OWNER_GROUP)
			release_slot(&slots[old]);
	}
	rc = 0;
out:
	if (slots != MAP_FAILED)
		munmap(slots, slots_len);
	if (gfd >= 0)
		close(gfd);
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

/* --- main --------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"group", required_argument, NULL, 'g'},
		{"mode", required_argument, NULL, 'm'},
		{"slice", required_argument, NULL, 's'},
		{"template4", required_argument, NULL, '4'},
		{"template6", required_argument, NULL, '6'},
		{"object", required_argument, NULL, 'o'},
		{"consume", no_argument, NULL, 'c'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct attach_opts ao = {
		.mode = 0660, .tmpl4 = "198.18.0.0", .tmpl6 = "100::", .object = KF_OBJECT_PATH,
	};
	bool consume = false, attach_opt = false;
	const char *cmd, *ifname;
	char *e;
	int c;

	/* Options anywhere (GNU getopt permutes): "attach eth1 --group pub" as documented. */
	while ((c = getopt_long(argc, argv, "vhV", opts, NULL)) != -1) {
		switch (c) {
		case 'g':
			ao.group = optarg;
			attach_opt = true;
			break;
		case 'm':
			errno = 0;
			ao.mode = strtoul(optarg, &e, 8);
			if (e == optarg || *e || errno || ao.mode > 0777)
				die_usage("--mode %s: an octal mode such as 0660", optarg);
			if (ao.mode & 0111)
				die_usage("--mode %s: no execute bits on a map", optarg);
			attach_opt = true;
			break;
		case 's':
			errno = 0;
			ao.slice = strtoul(optarg, &e, 10);
			if (e == optarg || *e || errno || !ao.slice || ao.slice > KF_SLICE_MAX)
				die_usage("--slice %s: 1 to %u", optarg, KF_SLICE_MAX);
			attach_opt = true;
			break;
		case '4':
			ao.tmpl4 = optarg;
			attach_opt = true;
			break;
		case '6':
			ao.tmpl6 = optarg;
			attach_opt = true;
			break;
		case 'o':
			ao.object = optarg;
			attach_opt = true;
			break;
		case 'c':
			consume = true;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("%s (libmultisend) kfanout abi %u\n", prog_name, KF_ABI_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	libbpf_set_print(libbpf_print);
	argc -= optind;
	argv += optind;
	if (argc < 1)
		die_usage("a command: attach, detach, status, policy or group");
	cmd = argv[0];
	if (!strcmp(cmd, "policy") || !strcmp(cmd, "group")) {
		if (argc < 3)
			die_usage("%s add|del|list IFACE ...", cmd);
		if (attach_opt)
			die_usage("--group, --mode, --slice, --template4/6 and --object are attach's");
		if (consume && strcmp(cmd, "group"))
			die_usage("--consume is group add's");
		check_ifname(argv[2]);
		if (!strcmp(cmd, "policy"))
			return cmd_policy(argv[1], argv[2], argc - 3, argv + 3);
		if (consume && strcmp(argv[1], "add"))
			die_usage("--consume is group add's");
		return cmd_group(argv[1], argv[2], argc - 3, argv + 3, consume);
	}
	if (argc != 2)
		die_usage("%s IFACE", cmd);
	ifname = argv[1];
	check_ifname(ifname);
	if (consume)
		die_usage("--consume is group add's");
	if (!strcmp(cmd, "attach"))
		return cmd_attach(ifname, &ao);
	if (attach_opt)
		die_usage("--group, --mode, --slice, --template4/6 and --object are attach's");
	if (!strcmp(cmd, "detach"))
		return cmd_detach(ifname);
	if (!strcmp(cmd, "status"))
		return cmd_status(ifname);
	die_usage("unknown command '%s'", cmd);
}
