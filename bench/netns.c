/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "netns.h"
#include "util.h"

#define NETNS_DIR "/run/netns"

static int ip(char *const argv[])
{
	return run_command(argv, NULL, NULL);
}

/* Each namespace "msbench-<pid namespace inode>-<pid>" has a lock file, LOCK_DIR/<name>.lock,
 * which the bench that made the namespace holds (flock, LOCK_EX) from before it makes it until
 * after it deletes it. The kernel drops the lock when that process dies, however it dies
 * (SIGKILL, the end of its PID namespace), so a namespace whose lock can be taken has no owner:
 * its PID, which another process may have now (PID 1 of every PID namespace), says nothing. */
#define LOCK_DIR "/run/multisend-bench"

static void lock_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, LOCK_DIR "/%s.lock", name);
}

/* Take name's lock: returns a descriptor holding it, -EWOULDBLOCK when another process holds it
 * (and !wait), or another -errno. With create, the file is made if absent; without, -ENOENT.
 * The lock is on the file that is at the path when this returns: one removed in between (by
 * a bench that cleaned the namespace up) is opened again. */
static int lock_take(const char *name, bool create, bool wait)
{
	char path[sizeof(((struct netns *)0)->name) + sizeof(LOCK_DIR) + 8];

	lock_path(path, sizeof(path), name);
	for (int tries = 0; tries < 100; tries++) {
		int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
		struct stat a, b;

		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB))) {
			int err = -errno;

			close(fd);
			return err;
		}
		if (!fstat(fd, &a) && !lstat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
			return fd;
		close(fd);
		if (!create)
			return -ENOENT;
	}
	return -EAGAIN;
}

/* Under name's lock: delete the namespace if it is there, then the lock file. */
static void remove_owned(const char *name, int lockfd, bool stale)
{
	char path[sizeof(NETNS_DIR) + 256];
	struct stat st;

	snprintf(path, sizeof(path), NETNS_DIR "/%s", name);
	if (!lstat(path, &st)) {
		char copy[256];

		snprintf(copy, sizeof(copy), "%s", name);
		char *argv[] = { "ip", "netns", "delete", copy, NULL };

		if (ip(argv) == 0 && stale)
			fprintf(stderr, "multisend-bench: removed stale namespace %s\n", name);
	}
	lock_path(path, sizeof(path), name);
	unlink(path);
	close(lockfd);
}

/* Names this bench made: "msbench-" then digits, '-', digits. The form before the locks,
 * "msbench-<pid>", is recognised too (old_owner_gone). */
static bool our_name(const char *name, bool *old)
{
	const char *p = name + strlen(NETNS_PREFIX);
	const char *dash = strchr(p, '-');

	if (strncmp(name, NETNS_PREFIX, strlen(NETNS_PREFIX)) || !*p ||
	    strspn(p, "0123456789-") != strlen(p))
		return false;
	*old = !dash;
	return !dash || (dash > p && dash[1] && !strchr(dash + 1, '-'));
}

/* A namespace "msbench-<pid>" of a bench from before the locks: its owner is gone when no
 * process here has that PID, or the one that has it is not a multisend-bench (PID 1, say,
 * which every bench that was PID 1 of a PID namespace called itself). */
static bool old_owner_gone(long pid)
{
	char path[64], comm[32] = "";

	if (pid <= 0 || pid == getpid())
		return false;
	if (kill((pid_t)pid, 0) && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	ssize_t n = read(fd, comm, sizeof(comm) - 1);

	close(fd);
	return n > 0 && strcmp(comm, "multisend-bench\n");
}

static void remove_stale_name(const char *name)
{
	bool old;

	if (strlen(name) >= sizeof(((struct netns *)0)->name) || !our_name(name, &old))
		return;
	if (old && !old_owner_gone(strtol(name + strlen(NETNS_PREFIX), NULL, 10)))
		return;
	int fd = lock_take(name, true, false);

	if (fd >= 0)
		remove_owned(name, fd, true);
}

/* Remove what benches that were killed left: every namespace of ours, and every lock file,
 * whose lock is free. Live ones are left alone. */
static void remove_stale(void)
{
	const char *dirs[] = { NETNS_DIR, LOCK_DIR };

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *e;

		while (d && (e = readdir(d))) {
			char name[sizeof(e->d_name)];
			size_t n = strlen(e->d_name);

			snprintf(name, sizeof(name), "%s", e->d_name);
			if (i == 1) {
				if (n <= 5 || strcmp(name + n - 5, ".lock"))
					continue;
				name[n - 5] = '\0';
			}
			remove_stale_name(name);
		}
		if (d)
			closedir(d);
	}
}

/* LOCK_DIR: made if absent; it must be root's directory (not a symbolic link). */
static int lock_dir(char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(LOCK_DIR, 0700) && errno != EEXIST) {
		snprintf(err, errlen, "cannot make %s: %s", LOCK_DIR, strerror(errno));
		return -errno;
	}
	if (lstat(LOCK_DIR, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		snprintf(err, errlen, "%s is not a directory of this user's", LOCK_DIR);
		return -EPERM;
	}
	return 0;
}

/* netns-xdp: how the peer drops what arrives. 0 (kept): no program; the frames reach the
 * peer's IP layer, which drops them as PACKET_OTHERHOST (the neighbour's MAC is nobody's).
 * 1: an XDP program that returns XDP_DROP, attached to the peer in the veth driver's mode.
 * That looks earlier but costs more: the veth must turn each sk_buff into an xdp_buff with
 * XDP_PACKET_HEADROOM in front, which a sent sk_buff has not, so it copies every frame into
 * a new page first. Measured here (Linux 6.18, fan-out 256, 64 B, CPU ns per destination):
 * raw-sendto 2515 without the program, 2800 with it; raw-xdp 840 and 1025. Build with
 * -DPEER_XDP_DROP=1 to measure it again. */
#ifndef PEER_XDP_DROP
#define PEER_XDP_DROP 0
#endif

/* r0 = XDP_DROP; exit: the whole program, by hand (no compiler, no libbpf). */
static int xdp_drop_prog(char *err, size_t errlen)
{
	struct bpf_insn insn[2];
	union bpf_attr a;
	char log[256] = "";

	memset(insn, 0, sizeof(insn));
	insn[0].code = BPF_ALU64 | BPF_MOV | BPF_K;
	insn[0].dst_reg = BPF_REG_0;
	insn[0].imm = XDP_DROP;
	insn[1].code = BPF_JMP | BPF_EXIT;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_XDP;
	a.insns = (uintptr_t)insn;
	a.insn_cnt = 2;
	a.license = (uintptr_t)"MIT"; /* it calls no helper: any licence will do */
	a.log_buf = (uintptr_t)log;
	a.log_size = sizeof(log);
	a.log_level = 1;
	int fd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof(a));

	if (fd < 0)
		snprintf(err, errlen, "loading the peer's XDP_DROP program: bpf(BPF_PROG_LOAD): %s%s%s",
			 strerror(errno), log[0] ? ": " : "", log);
	return fd < 0 ? -errno : fd;
}

/* RTM_SETLINK with IFLA_XDP { IFLA_XDP_FD, IFLA_XDP_FLAGS } on a netlink socket of the
 * namespace; the kernel's acknowledgement says whether it took it. */
static int xdp_attach(int nl, unsigned ifindex, int prog, uint32_t flags)
{
	struct {
		struct nlmsghdr h;
		struct ifinfomsg i;
		char attrs[64];
	} req;
	struct rtattr *xdp, *a;
	char buf[512];

	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = NLMSG_LENGTH(sizeof(req.i));
	req.h.nlmsg_type = RTM_SETLINK;
	req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	req.h.nlmsg_seq = 1;
	req.i.ifi_family = AF_UNSPEC;
	req.i.ifi_index = (int)ifindex;
	xdp = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.h.nlmsg_len));
	xdp->rta_type = IFLA_XDP | NLA_F_NESTED;
	xdp->rta_len = RTA_LENGTH(0);
	a = (struct rtattr *)((char *)xdp + RTA_ALIGN(xdp->rta_len));
	a->rta_type = IFLA_XDP_FD;
	a->rta_len = RTA_LENGTH(sizeof(int));
	memcpy(RTA_DATA(a), &prog, sizeof(int));
	xdp->rta_len = (unsigned short)(xdp->rta_len + RTA_ALIGN(a->rta_len));
	a = (struct rtattr *)((char *)xdp + RTA_ALIGN(xdp->rta_len));
	a->rta_type = IFLA_XDP_FLAGS;
	a->rta_len = RTA_LENGTH(sizeof(flags));
	memcpy(RTA_DATA(a), &flags, sizeof(flags));
	xdp->rta_len = (unsigned short)(xdp->rta_len + RTA_ALIGN(a->rta_len));
	req.h.nlmsg_len = NLMSG_ALIGN(req.h.nlmsg_len) + RTA_ALIGN(xdp->rta_len);
	if (send(nl, &req, req.h.nlmsg_len, 0) < 0)
		return -errno;
	ssize_t n = recv(nl, buf, sizeof(buf), 0);

	if (n < 0)
		return -errno;
	for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned)n);
	     h = NLMSG_NEXT(h, n))
		if (h->nlmsg_type == NLMSG_ERROR)
			return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
	return -EPROTO;
}

struct attach_job {
	const struct netns *ns;
	int prog, err;
	char *why;
	size_t whylen;
};

/* On a thread of its own, which enters the namespace (the caller's stays where it is). */
static void *attach_thread(void *arg)
{
	struct attach_job *j = arg;
	int nl = -1;
	unsigned ifindex;

	if ((j->err = netns_enter(j->ns))) {
		snprintf(j->why, j->whylen, "entering namespace %s: %s", j->ns->name,
			 strerror(-j->err));
		return NULL;
	}
	ifindex = if_nametoindex(NETNS_PEER);
	nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (!ifindex || nl < 0) {
		j->err = -errno;
		snprintf(j->why, j->whylen, "attaching the peer's XDP program: %s",
			 strerror(errno));
	} else if ((j->err = xdp_attach(nl, ifindex, j->prog, XDP_FLAGS_DRV_MODE))) {
		snprintf(j->why, j->whylen,
			 "attaching the XDP_DROP program to %s (RTM_SETLINK IFLA_XDP, driver "
			 "mode): %s",
			 NETNS_PEER, strerror(-j->err));
	}
	if (nl >= 0)
		close(nl);
	return NULL;
}

static int peer_drop_prog(struct netns *ns, char *err, size_t errlen)
{
	struct attach_job j = { .ns = ns, .why = err, .whylen = errlen };
	pthread_t t;
	int e;

	j.prog = xdp_drop_prog(err, errlen);
	if (j.prog < 0)
		return j.prog;
	e = pthread_create(&t, NULL, attach_thread, &j);
	if (e) {
		close(j.prog);
		snprintf(err, errlen, "pthread_create: %s", strerror(e));
		return -e;
	}
	pthread_join(t, NULL);
	/* The device holds the program now; it goes with the namespace. */
	close(j.prog);
	if (!j.err)
		ns->peer_prog = true;
	return j.err;
}

int netns_create(struct netns *ns, char *err, size_t errlen)
{
	const unsigned mtu = ns->mtu;
	const bool xdp = ns->xdp;
	const char *sink = xdp ? "--sink netns-xdp" : "--sink netns-drop";

	memset(ns, 0, sizeof(*ns));
	ns->mtu = mtu;
	ns->xdp = xdp;
	if (geteuid() != 0) {
		snprintf(err, errlen,
			 "%s needs root (it creates a network namespace and a veth "
			 "pair); run it as root, or use --sink loopback or deliver",
			 sink);
		return -EPERM;
	}
	if (!have_program("ip")) {
		snprintf(err, errlen, "%s needs the ip command (package iproute2)", sink);
		return -ENOENT;
	}
	ns->lockfd = -1;
	int rc = lock_dir(err, errlen);

	if (rc)
		return rc;
	remove_stale();
	/* PID and PID namespace: unique among live processes (PID 1 is in every namespace). */
	struct stat pidns;

	if (stat("/proc/self/ns/pid", &pidns))
		pidns.st_ino = 0;
	snprintf(ns->name, sizeof(ns->name), NETNS_PREFIX "%lu-%ld", (unsigned long)pidns.st_ino,
		 (long)getpid());
	snprintf(ns->path, sizeof(ns->path), NETNS_DIR "/%s", ns->name);

	/* Waits only for a bench cleaning up a namespace of this name that a killed one left. */
	ns->lockfd = lock_take(ns->name, true, true);
	if (ns->lockfd < 0) {
		snprintf(err, errlen, "cannot lock %s/%s.lock: %s", LOCK_DIR, ns->name,
			 strerror(-ns->lockfd));
		return ns->lockfd;
	}
	/* Ours now: a namespace of this name was left by a killed bench (the namespace inode
	 * and the PID were reused), whose lock was dropped when it died. */
	struct stat st;

	if (!lstat(ns->path, &st)) {
		char *del[] = { "ip", "netns", "delete", ns->name, NULL };

		if (ip(del) == 0)
			fprintf(stderr, "multisend-bench: removed stale namespace %s\n", ns->name);
	}

	char *add[] = { "ip", "netns", "add", ns->name, NULL };

	rc = ip(add);
	if (rc) {
		snprintf(err, errlen, "ip netns add %s failed (status %d)", ns->name, rc);
		remove_owned(ns->name, ns->lockfd, false);
		ns->lockfd = -1;
		return -EIO;
	}
	ns->created = true;

	char *const cmds[][16] = {
		{ "ip", "-n", ns->name, "link", "add", NETNS_DEV, "type", "veth", "peer", "name",
		  NETNS_PEER, NULL },
		/* No IPv6 link-local address: no duplicate-address probes or router solicitations
		 * would join our datagrams in the veth's drop counter. */
		{ "ip", "-n", ns->name, "link", "set", NETNS_DEV, "addrgenmode", "none", NULL },
		{ "ip", "-n", ns->name, "addr", "add", NETNS_LOCAL "/24", "dev", NETNS_DEV, NULL },
		{ "ip", "-n", ns->name, "link", "set", NETNS_DEV, "up", NULL },
		{ "ip", "-n", ns->name, "neigh", "replace", NETNS_REMOTE, "lladdr", NETNS_REMOTE_MAC,
		  "dev", NETNS_DEV, "nud", "permanent", NULL },
	};
	/* netns-xdp: two queues each way, so that the library's xdp (queue 0) and raw-xdp
	 * (queue 1) each have an AF_XDP socket on a queue of their own in one run. */
	char *const add_xdp[] = { "ip", "-n", ns->name, "link", "add", NETNS_DEV, "numtxqueues",
				  "2", "numrxqueues", "2", "type", "veth", "peer", "name",
				  NETNS_PEER, "numtxqueues", "2", "numrxqueues", "2", NULL };

	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
		rc = ip(i == 0 && xdp ? add_xdp : cmds[i]);
		if (rc) {
			snprintf(err, errlen, "setting up namespace %s failed: ip %s %s ... (status %d)",
				 ns->name, cmds[i][3], cmds[i][4], rc);
			return -EIO;
		}
	}
	/* --mtu: a datagram above the MTU leaves in fragments, which the kernel copies, so zero
	 * copy can be measured only below it. Both ends, so that the pair agrees. */
	for (int end = 0; ns->mtu && end < 2; end++) {
		char num[16];
		char *set[] = { "ip", "-n", ns->name, "link", "set", end ? NETNS_PEER : NETNS_DEV,
				"mtu", num, NULL };

		snprintf(num, sizeof(num), "%u", ns->mtu);
		rc = ip(set);
		if (rc) {
			snprintf(err, errlen, "setting the MTU of %s to %u in namespace %s failed "
				 "(status %d)",
				 set[5], ns->mtu, ns->name, rc);
			return -EIO;
		}
	}
	if (!xdp)
		return 0;
	/* netns-xdp: the peer up (carrier for AF_XDP), quiet (no IPv6 address of its own, so no
	 * solicitation comes back), and dropping what arrives. */
	char *const up[][16] = {
		{ "ip", "-n", ns->name, "link", "set", NETNS_PEER, "addrgenmode", "none", NULL },
		{ "ip", "-n", ns->name, "link", "set", NETNS_PEER, "up", NULL },
	};
	for (size_t i = 0; i < ARRAY_SIZE(up); i++) {
		rc = ip(up[i]);
		if (rc) {
			snprintf(err, errlen, "setting up namespace %s failed: ip %s %s ... (status %d)",
				 ns->name, up[i][3], up[i][4], rc);
			return -EIO;
		}
	}
	return PEER_XDP_DROP ? peer_drop_prog(ns, err, errlen) : 0;
}

static int same_inode(int fd, const char *path)
{
	struct stat a, b;

	if (fstat(fd, &a) || stat(path, &b))
		return -errno;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? 0 : -EXDEV;
}

int netns_enter(const struct netns *ns)
{
	int fd = open(ns->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	int err = setns(fd, CLONE_NEWNET) ? -errno : 0;

	close(fd);
	if (err)
		return err;
	/* Belt and braces: the thread's own view must now be the namespace. */
	fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = same_inode(fd, ns->path);
	close(fd);
	return err;
}

int netns_check_socket(const struct netns *ns, int sock)
{
	int fd = ioctl(sock, SIOCGSKNS);

	if (fd < 0)
		return -errno;
	int err = same_inode(fd, ns->path);

	close(fd);
	return err;
}

int netns_destroy(struct netns *ns)
{
	if (!ns->created)
		return 0;
	char *del[] = { "ip", "netns", "delete", ns->name, NULL };
	int rc = ip(del);

	if (rc)
		return rc < 0 ? rc : -EIO; /* the lock stays held until exit: stale after */
	ns->created = false;
	if (ns->lockfd >= 0)
		remove_owned(ns->name, ns->lockfd, false);
	ns->lockfd = -1;
	return 0;
}

void netns_describe(const struct netns *ns, char *buf, size_t len)
{
	if (ns->xdp) {
		snprintf(buf, len,
			 "netns-xdp: namespace %s, veth %s (%s/24, up) with peer %s up; destination "
			 "%s has a permanent neighbour entry (%s, nobody's), and %s: the sender's "
			 "whole path (AF_XDP or the kernel's) and the same receive side for every "
			 "backend, nothing received; MTU %u%s",
			 ns->name, NETNS_DEV, NETNS_LOCAL, NETNS_PEER, NETNS_REMOTE, NETNS_REMOTE_MAC,
			 ns->peer_prog
				 ? "the peer runs a two-instruction XDP program (driver mode) that "
				   "returns XDP_DROP (built with PEER_XDP_DROP=1; the veth copies "
				   "each frame for it)"
				 : "the peer's IP layer drops every frame as addressed to another host "
				   "(PACKET_OTHERHOST; cheaper per datagram than an XDP_DROP program "
				   "there, for which the veth copies each frame)",
			 ns->mtu ? ns->mtu : 1500, ns->mtu ? " (--mtu)" : "");
		return;
	}
	snprintf(buf, len,
		 "netns-drop: namespace %s, veth %s (%s/24, up) with peer %s down; destination "
		 "%s has a permanent neighbour entry (%s), so the veth driver drops every "
		 "datagram: the sender's whole path, nothing received; MTU %u%s",
		 ns->name, NETNS_DEV, NETNS_LOCAL, NETNS_PEER, NETNS_REMOTE, NETNS_REMOTE_MAC,
		 ns->mtu ? ns->mtu : 1500, ns->mtu ? " (--mtu)" : "");
}
