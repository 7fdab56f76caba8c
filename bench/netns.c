/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "netns.h"
#include "util.h"

#define NETNS_DIR "/run/netns"
/* Locally administered (bit 1 of the first octet), so it can belong to no real card. */
#define NETNS_REMOTE_MAC "02:00:5e:10:00:02"

static int ip(char *const argv[])
{
	return run_command(argv, NULL, NULL);
}

/* A namespace "msbench-<pid>" whose process is gone was left by a bench that was killed
 * (SIGKILL, power loss): remove it so they cannot pile up. Live ones are left alone. */
static void remove_stale(void)
{
	DIR *d = opendir(NETNS_DIR);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end;

		if (strncmp(e->d_name, NETNS_PREFIX, strlen(NETNS_PREFIX)))
			continue;
		long pid = strtol(e->d_name + strlen(NETNS_PREFIX), &end, 10);

		if (*end || pid <= 0 || pid == getpid() || kill((pid_t)pid, 0) == 0 ||
		    errno != ESRCH)
			continue;
		char name[sizeof(e->d_name)];

		snprintf(name, sizeof(name), "%s", e->d_name);
		char *argv[] = { "ip", "netns", "delete", name, NULL };

		if (ip(argv) == 0)
			fprintf(stderr, "multisend-bench: removed stale namespace %s\n", name);
	}
	closedir(d);
}

int netns_create(struct netns *ns, char *err, size_t errlen)
{
	const unsigned mtu = ns->mtu;

	memset(ns, 0, sizeof(*ns));
	ns->mtu = mtu;
	if (geteuid() != 0) {
		snprintf(err, errlen,
			 "--sink netns-drop needs root (it creates a network namespace and a veth "
			 "pair); run it as root, or use --sink loopback or deliver");
		return -EPERM;
	}
	if (!have_program("ip")) {
		snprintf(err, errlen, "--sink netns-drop needs the ip command (package iproute2)");
		return -ENOENT;
	}
	remove_stale();
	snprintf(ns->name, sizeof(ns->name), NETNS_PREFIX "%ld", (long)getpid());
	snprintf(ns->path, sizeof(ns->path), NETNS_DIR "/%s", ns->name);

	char *add[] = { "ip", "netns", "add", ns->name, NULL };
	int rc = ip(add);

	if (rc) {
		snprintf(err, errlen, "ip netns add %s failed (status %d)", ns->name, rc);
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
	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
		rc = ip(cmds[i]);
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
	return 0;
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
		return rc < 0 ? rc : -EIO;
	ns->created = false;
	return 0;
}

void netns_describe(const struct netns *ns, char *buf, size_t len)
{
	snprintf(buf, len,
		 "netns-drop: namespace %s, veth %s (%s/24, up) with peer %s down; destination "
		 "%s has a permanent neighbour entry (%s), so the veth driver drops every "
		 "datagram: the sender's whole path, nothing received; MTU %u%s",
		 ns->name, NETNS_DEV, NETNS_LOCAL, NETNS_PEER, NETNS_REMOTE, NETNS_REMOTE_MAC,
		 ns->mtu ? ns->mtu : 1500, ns->mtu ? " (--mtu)" : "");
}
