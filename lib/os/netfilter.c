/* SPDX-License-Identifier: MIT */
/*
 * nftables' chains are listed over nfnetlink (NFT_MSG_GETCHAIN, a dump of every family's
 * chains; a base chain carries NFTA_CHAIN_HOOK with its hook number). iptables-nft's rules live
 * in such chains too; iptables-legacy's tables are named in /proc/net/ip{,6}_tables_names.
 * Read once per question (when the bypass takes a queue), never on a send path.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include "netfilter.h"
#include "sys.h"

#ifndef NF_NETDEV_EGRESS
#define NF_NETDEV_EGRESS 1
#endif

static const char *family_name(int f)
{
	switch (f) {
	case NFPROTO_IPV4:
		return "ip";
	case NFPROTO_IPV6:
		return "ip6";
	case NFPROTO_INET:
		return "inet";
	case NFPROTO_NETDEV:
		return "netdev";
	default:
		return NULL;
	}
}

/* Is a base chain of this family at this hook on the path of a datagram this host sends? */
static const char *hook_seen(int family, uint32_t hook)
{
	if (family == NFPROTO_NETDEV)
		return hook == NF_NETDEV_EGRESS ? "egress" : NULL;
	if (!family_name(family))
		return NULL; /* arp, bridge: not on a UDP datagram's output path */
	return hook == NF_INET_LOCAL_OUT ? "output" : hook == NF_INET_POST_ROUTING ? "postrouting" : NULL;
}

/* One chain's message: 1 and what set when it is a base chain that counts. */
static int chain_counts(const struct nlmsghdr *h, char *what, size_t len)
{
	const struct nfgenmsg *g = NLMSG_DATA(h);
	if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*g)))
		return 0;
	const char *table = "?", *name = "?", *hook = NULL;
	const unsigned char *p = (const unsigned char *)g + NLMSG_ALIGN(sizeof(*g));
	const unsigned char *end = (const unsigned char *)h + h->nlmsg_len;
	while (p + sizeof(struct nlattr) <= end) {
		const struct nlattr *a = (const void *)p;
		if (a->nla_len < sizeof(*a) || p + a->nla_len > end)
			break;
		const unsigned char *v = p + NLA_HDRLEN;
		const size_t vlen = a->nla_len - NLA_HDRLEN;
		switch (a->nla_type & NLA_TYPE_MASK) {
		case NFTA_CHAIN_TABLE:
			if (vlen && memchr(v, 0, vlen))
				table = (const char *)v;
			break;
		case NFTA_CHAIN_NAME:
			if (vlen && memchr(v, 0, vlen))
				name = (const char *)v;
			break;
		case NFTA_CHAIN_HOOK:
			for (const unsigned char *q = v; q + sizeof(struct nlattr) <= v + vlen;) {
				const struct nlattr *b = (const void *)q;
				if (b->nla_len < sizeof(*b) || q + b->nla_len > v + vlen)
					break;
				if ((b->nla_type & NLA_TYPE_MASK) == NFTA_HOOK_HOOKNUM &&
				    b->nla_len >= NLA_HDRLEN + 4) {
					uint32_t num;
					memcpy(&num, q + NLA_HDRLEN, 4);
					hook = hook_seen(g->nfgen_family, ntohl(num));
				}
				q += NLA_ALIGN(b->nla_len);
			}
			break;
		}
		p += NLA_ALIGN(a->nla_len);
	}
	if (!hook)
		return 0;
	snprintf(what, len, "nftables chain %s %s %s (%s)", family_name(g->nfgen_family), table,
		 name, hook);
	return 1;
}

static int nft_chains(char *what, size_t len)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (fd < 0) {
		/* No nfnetlink in this kernel: no nftables either. */
		return errno == EPROTONOSUPPORT || errno == EAFNOSUPPORT ? 0 : -errno;
	}
	struct {
		struct nlmsghdr h;
		struct nfgenmsg g;
	} req = {
		.h = { .nlmsg_len = sizeof(req),
		       .nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETCHAIN,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
		       .nlmsg_seq = 1 },
		.g = { .nfgen_family = NFPROTO_UNSPEC, .version = NFNETLINK_V0 },
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	unsigned char *buf = NULL;
	int rc = 0;
	if (ms__sys.sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
		goto out;
	}
	enum { BUFLEN = 32768 };
	buf = malloc(BUFLEN);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	for (int reads = 0; reads < 4096; reads++) {
		ssize_t n = recv(fd, buf, BUFLEN, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto out;
		}
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != 1)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				goto out;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				rc = h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) ? e->error : -EPROTO;
				/* nf_tables not in this kernel: no chains. */
				if (rc == -EOPNOTSUPP || rc == -EPROTONOSUPPORT || rc == -ENOENT)
					rc = 0;
				goto out;
			}
			if (rc == 0 && h->nlmsg_type == ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWCHAIN))
				rc = chain_counts(h, what, len);
		}
	}
	rc = -EPROTO; /* a dump that never ended */
out:
	free(buf);
	close(fd);
	return rc;
}

/* iptables-legacy: a table loaded in this namespace registers its hooks (filter, mangle, nat,
 * raw, security all see output). -errno: the file cannot be read (it is root's). */
static int legacy_tables(const char *file, const char *cmd, char *what, size_t len)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno; /* ENOENT: ip_tables not loaded at all */
	char b[256];
	ssize_t n = read(fd, b, sizeof(b) - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	b[n] = '\0';
	size_t first = strcspn(b, "\n");
	if (!first)
		return 0;
	snprintf(what, len, "%s-legacy table %.*s", cmd, (int)first, b);
	return 1;
}

int ms__nf_output_hooks(char *what, size_t len)
{
	int rc = nft_chains(what, len);
	if (rc < 0) {
		snprintf(what, len, "cannot list nftables chains: %s%s", strerror(-rc),
			 rc == -EPERM ? " (needs CAP_NET_ADMIN)" : "");
		return rc;
	}
	if (rc)
		return 1;
	const char *files[2][2] = { { "/proc/net/ip_tables_names", "iptables" },
				    { "/proc/net/ip6_tables_names", "ip6tables" } };
	for (int k = 0; k < 2; k++) {
		rc = legacy_tables(files[k][0], files[k][1], what, len);
		if (rc < 0) {
			snprintf(what, len, "cannot read %s: %s", files[k][0], strerror(-rc));
			return rc;
		}
		if (rc)
			return 1;
	}
	return 0;
}
