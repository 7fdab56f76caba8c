/* SPDX-License-Identifier: MIT */
/*
 * The kernel fan-out's program driven by hand, without the library: what a publisher does
 * (abi.h, "How a fan-out goes"), checked against what arrives at real sockets.
 *
 *   kf-driver run --iface IF --rx-ns PATH --tx-ns PATH --family 4|6 --dst ADDR[,ADDR...]
 *                 --mac MAC --n N [--size B] [--rounds R] [--as UID:GID[:GROUP]]
 *                 [--expect ok|eperm|policy|enobufs] [--allow A/LEN:LO-HI]
 *     In the receivers' namespace: N UDP sockets bound to port 0 of the addresses given (in
 *     turn). In the sender's namespace: one UDP socket, a slot claimed, the destinations
 *     written, then R rounds of ceil(N / slice) templates. Each template's state must be DONE
 *     with its sequence when sendto returns, done == count, the statuses as --expect says;
 *     every receiver must get each round's datagram exactly once, byte for byte (ok), none
 *     (eperm), or exactly those whose status is 0 (policy: allowed by --allow, the rest
 *     -EPERM; enobufs: 0 or -ENOBUFS, and -ENOBUFS exactly for those that did not arrive).
 *     The receivers' UDP InCsumErrors must not move; kf_stats must agree with the statuses.
 *   kf-driver open IFACE        open every pin as a publisher would; print each result
 *   kf-driver csum-off IFACE    the device computes no checksums (ETHTOOL_STXCSUM off), so
 *                               the stack does, and the receiver's kernel checks them
 * Exit 0 pass, 1 fail, 2 usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "abi.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static int failures;

#define FAIL(...)                                                                          \
	do {                                                                               \
		printf("FAIL: " __VA_ARGS__);                                              \
		putchar('\n');                                                             \
		failures++;                                                                \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int open_pin(const char *ifname, const char *name, bool rdonly)
{
	LIBBPF_OPTS(bpf_obj_get_opts, o, .file_flags = rdonly ? BPF_F_RDONLY : 0);
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s/%s", KF_PIN_ROOT, ifname, name);
	fd = bpf_obj_get_opts(path, &o);
	return fd < 0 ? -errno : fd;
}

static int cmd_open(const char *ifname)
{
	static const struct {
		const char *name;
		bool rdonly;
	} pins[] = {
		{KF_MAP_CTL, true}, {KF_MAP_SLOTS, false}, {KF_MAP_DESTS, false},
		{KF_MAP_STATUS, false}, {KF_MAP_STATS, true},
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(pins) / sizeof(pins[0]); i++) {
		int fd = open_pin(ifname, pins[i].name, pins[i].rdonly);

		printf("%s %s\n", pins[i].name, fd >= 0 ? "ok" : strerrorname_np(-fd));
		if (fd >= 0)
			close(fd);
		else
			bad = 1;
	}
	return bad;
}

static int cmd_csum_off(const char *ifname)
{
	struct ethtool_value ev = {.cmd = ETHTOOL_STXCSUM, .data = 0};
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	ifr.ifr_data = (void *)&ev;
	if (fd < 0 || ioctl(fd, SIOCETHTOOL, &ifr) < 0) {
		printf("FAIL: %s: ETHTOOL_STXCSUM: %s\n", ifname, strerror(errno));
		return 1;
	}
	close(fd);
	return 0;
}

/* The UDP (IPv4) or Udp6 (IPv6) InCsumErrors of the namespace the file was opened in. */
static long csum_errors(int fd, int family)
{
	char buf[8192], *p;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = 0;
	if (family == AF_INET6) {
		p = strstr(buf, "Udp6InCsumErrors");
		return p ? strtol(p + strlen("Udp6InCsumErrors"), NULL, 10) : -1;
	}
	/* "Udp: InDatagrams ... InCsumErrors ..." then "Udp: 1 2 ...": the column's index. */
	p = strstr(buf, "\nUdp: ");
	if (!p)
		return -1;
	{
		char *hdr = p + 6, *vals = strstr(hdr, "\nUdp: "), *e;
		int col = 0;

		if (!vals)
			return -1;
		vals += 6;
		for (char *t = hdr; t < vals && strncmp(t, "InCsumErrors", 12); col++) {
			t = strchr(t, ' ');
			if (!t || t > vals)
				return -1;
			t++;
		}
		for (int i = 0; i < col; i++) {
			vals = strchr(vals, ' ');
			if (!vals)
				return -1;
			vals++;
		}
		return strtol(vals, &e, 10);
	}
}

static int enter_ns(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		printf("FAIL: setns %s: %s\n", path, strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

static uint64_t stats_sum(int fd, uint32_t i)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t v[1024] = {0}, s = 0;

	if (ncpu <= 0 || ncpu > 1024 || bpf_map_lookup_elem(fd, &i, v))
		return 0;
	for (int c = 0; c < ncpu; c++)
		s += v[c];
	return s;
}

/* This process's claim: (pid << 32) | its start time's low 32 bits (abi.h). */
static uint64_t my_owner(void)
{
	char buf[1024], *p;
	unsigned long long start = 0;
	FILE *f = fopen("/proc/self/stat", "re");

	if (f) {
		if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')'))) {
			/* field 3 is after ") "; the start time is field 22 */
			p += 2;
			for (int i = 3; i < 22 && p; i++) {
				p = strchr(p, ' ');
				if (p)
					p++;
			}
			if (p)
				start = strtoull(p, NULL, 10);
		}
		fclose(f);
	}
	return ((uint64_t)getpid() << 32) | (uint32_t)start;
}

static void payload(unsigned char *b, size_t n, unsigned round)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 7 + round * 13 + 1);
}

struct allow {
	int family;
	unsigned char addr[16];
	unsigned len, lo, hi;
};

static bool allowed(const struct allow *al, int nal, int family, const void *addr,
		    unsigned port)
{
	for (int a = 0; a < nal; a++) {
		const unsigned char *x = addr;
		unsigned b;

		if (al[a].family != family || port < al[a].lo || port > al[a].hi)
			continue;
		for (b = 0; b < al[a].len; b++)
			if ((x[b / 8] ^ al[a].addr[b / 8]) & (0x80 >> (b % 8)))
				break;
		if (b == al[a].len)
			return true;
	}
	return false;
}

enum expect { EX_OK, EX_EPERM, EX_POLICY, EX_ENOBUFS };

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"iface", required_argument, NULL, 'i'}, {"rx-ns", required_argument, NULL, 'r'},
		{"tx-ns", required_argument, NULL, 't'}, {"family", required_argument, NULL, 'f'},
		{"dst", required_argument, NULL, 'd'},   {"mac", required_argument, NULL, 'm'},
		{"n", required_argument, NULL, 'n'},     {"size", required_argument, NULL, 's'},
		{"rounds", required_argument, NULL, 'R'}, {"as", required_argument, NULL, 'u'},
		{"expect", required_argument, NULL, 'e'}, {"allow", required_argument, NULL, 'a'},
		{NULL, 0, NULL, 0},
	};
	const char *ifname = NULL, *rxns = NULL, *txns = NULL, *as = NULL;
	char *dsts = NULL;
	unsigned char mac[6] = {0}, addrs[64][16];
	int family = AF_INET, naddr = 0, n = 1, size = 16, rounds = 1, nal = 0, c;
	enum expect ex = EX_OK;
	struct allow al[16];

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'i': ifname = optarg; break;
		case 'r': rxns = optarg; break;
		case 't': txns = optarg; break;
		case 'f': family = atoi(optarg) == 6 ? AF_INET6 : AF_INET; break;
		case 'd': dsts = optarg; break;
		case 'm':
			if (sscanf(optarg, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2],
				   &mac[3], &mac[4], &mac[5]) != 6)
				return 2;
			break;
		case 'n': n = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		case 'R': rounds = atoi(optarg); break;
		case 'u': as = optarg; break;
		case 'e':
			ex = !strcmp(optarg, "eperm")	? EX_EPERM
			     : !strcmp(optarg, "policy")  ? EX_POLICY
			     : !strcmp(optarg, "enobufs") ? EX_ENOBUFS
							  : EX_OK;
			break;
		case 'a': {
			char a[64];
			if (nal == 16 || sscanf(optarg, "%63[^/]/%u:%u-%u", a, &al[nal].len,
						&al[nal].lo, &al[nal].hi) != 4)
				return 2;
			al[nal].family = strchr(a, ':') ? AF_INET6 : AF_INET;
			if (inet_pton(al[nal].family, a, al[nal].addr) != 1)
				return 2;
			nal++;
			break;
		}
		default:
			return 2;
		}
	}
	if (!ifname || !rxns || !txns || !dsts || n < 1 || n > 65536 || size < 1 ||
	    size > 65000 || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "kf-driver run: missing or bad options\n");
		return 2;
	}
	for (char *t = strtok(dsts, ","); t && naddr < 64; t = strtok(NULL, ","))
		if (inet_pton(family, t, addrs[naddr++]) != 1)
			return 2;

	/* Receivers, in their namespace. */
	if (enter_ns(rxns) < 0)
		return 1;
	int snmp = open(family == AF_INET6 ? "/proc/self/net/snmp6" : "/proc/self/net/snmp",
			O_RDONLY | O_CLOEXEC);
	int *rx = calloc(n, sizeof(int));
	unsigned *port = calloc(n, sizeof(unsigned));
	unsigned *got = calloc(n, sizeof(unsigned)), *bad = calloc(n, sizeof(unsigned));
	int64_t *last_status = calloc(n, sizeof(int64_t));
	struct pollfd *pf = calloc(n, sizeof(*pf));
	if (snmp < 0 || !rx || !port || !got || !bad || !last_status || !pf) {
		printf("FAIL: setup: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct sockaddr_storage ss = {0};
		socklen_t sl;
		int big = 1 << 20;

		rx[i] = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (rx[i] < 0) {
			printf("FAIL: receiver %d: socket: %s (ulimit -n?)\n", i, strerror(errno));
			return 1;
		}
		if (family == AF_INET) {
			struct sockaddr_in *s4 = (void *)&ss;

			s4->sin_family = AF_INET;
			memcpy(&s4->sin_addr, addrs[i % naddr], 4);
			sl = sizeof(*s4);
		} else {
			struct sockaddr_in6 *s6 = (void *)&ss;

			s6->sin6_family = AF_INET6;
			memcpy(&s6->sin6_addr, addrs[i % naddr], 16);
			sl = sizeof(*s6);
		}
		setsockopt(rx[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
		if (rx[i] < 0 || bind(rx[i], (void *)&ss, sl) < 0 ||
		    getsockname(rx[i], (void *)&ss, &sl) < 0) {
			printf("FAIL: receiver %d: %s (ulimit -n?)\n", i, strerror(errno));
			return 1;
		}
		port[i] = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		pf[i].fd = rx[i];
		pf[i].events = POLLIN;
	}
	long csum0 = csum_errors(snmp, family);

	/* The sender, in its namespace, maybe as another user. */
	if (enter_ns(txns) < 0)
		return 1;
	int tx = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	uint64_t cookie = 0;
	socklen_t cl = sizeof(cookie);
	if (tx < 0 || getsockopt(tx, SOL_SOCKET, SO_COOKIE, &cookie, &cl) < 0) {
		printf("FAIL: sender socket: %s\n", strerror(errno));
		return 1;
	}
	if (as) {
		unsigned uid, gid, sup;
		int k = sscanf(as, "%u:%u:%u", &uid, &gid, &sup);
		gid_t g = sup;

		if (k < 2 || setgroups(k == 3 ? 1 : 0, &g) < 0 || setresgid(gid, gid, gid) < 0 ||
		    setresuid(uid, uid, uid) < 0) {
			printf("FAIL: --as %s: %s\n", as, strerror(errno));
			return 1;
		}
	}
	int ctl_fd = open_pin(ifname, KF_MAP_CTL, true);
	int slots_fd = open_pin(ifname, KF_MAP_SLOTS, false);
	int dests_fd = open_pin(ifname, KF_MAP_DESTS, false);
	int st_fd = open_pin(ifname, KF_MAP_STATUS, false);
	int stats_fd = open_pin(ifname, KF_MAP_STATS, true);
	if (ctl_fd < 0 || slots_fd < 0 || dests_fd < 0 || st_fd < 0 || stats_fd < 0) {
		printf("FAIL: pins: ctl %d slots %d dests %d status %d stats %d (-errno)\n", ctl_fd,
		       slots_fd, dests_fd, st_fd, stats_fd);
		return 1;
	}
	struct kf_ctl ctl;
	uint32_t zero = 0;
	if (bpf_map_lookup_elem(ctl_fd, &zero, &ctl) || ctl.abi != KF_ABI_VERSION) {
		printf("FAIL: kf_ctl: %s, abi %u\n", strerror(errno), ctl.abi);
		return 1;
	}
	size_t nd = (size_t)KF_SLOTS * KF_SLICE_MAX;
	struct kf_slot *slots = mmap(NULL, KF_SLOTS * sizeof(*slots), PROT_READ | PROT_WRITE,
				     MAP_SHARED, slots_fd, 0);
	struct kf_dest *dests = mmap(NULL, nd * sizeof(*dests), PROT_READ | PROT_WRITE,
				     MAP_SHARED, dests_fd, 0);
	int64_t *status = mmap(NULL, nd * sizeof(*status), PROT_READ | PROT_WRITE, MAP_SHARED,
			       st_fd, 0);
	if (slots == MAP_FAILED || dests == MAP_FAILED || status == MAP_FAILED) {
		printf("FAIL: mmap: %s\n", strerror(errno));
		return 1;
	}
	uint64_t st0[KF_STAT_N];
	for (int i = 0; i < KF_STAT_N; i++)
		st0[i] = stats_sum(stats_fd, i);

	/* Claim a slot. */
	int k = -1;
	uint64_t me = my_owner();
	for (unsigned s = 0; s < KF_SLOTS && k < 0; s++) {
		__u64 z = 0;

		if (__atomic_compare_exchange_n(&slots[s].owner, &z, me, false, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			k = s;
	}
	if (k < 0) {
		printf("FAIL: no free slot\n");
		return 1;
	}
	slots[k].cookie = cookie;

	unsigned slice = ctl.slice, templates = 0, nok = 0, nperm = 0, nnobufs = 0, nother = 0;
	unsigned char *buf = malloc(size), *rbuf = malloc(size + 1);
	double t0 = now_s();
	static unsigned seq;

	for (int r = 0; r < rounds; r++) {
		payload(buf, size, r);
		for (int i = 0; i < n; i++)
			last_status[i] = 0x7eadbeef;
		for (int first = 0; first < n; first += slice) {
			unsigned cnt = n - first < (int)slice ? (unsigned)(n - first) : slice;
			struct sockaddr_storage ss = {0};
			socklen_t sl;
			uint32_t st;

			for (unsigned i = 0; i < cnt; i++) {
				struct kf_dest *d = &dests[k * KF_SLICE_MAX + i];

				memset(d, 0, sizeof(*d));
				memcpy(d->mac, mac, 6);
				d->port = htons(port[first + i]);
				memcpy(&d->addr, addrs[(first + i) % naddr], family == AF_INET ? 4 : 16);
				status[k * KF_SLICE_MAX + i] = 0x7eadbeef;
			}
			seq = (seq + 1) & 0x7fff;
			slots[k].count = cnt;
			slots[k].done = 0;
			__atomic_store_n(&slots[k].state, KF_STATE(seq, KF_ARMED), __ATOMIC_RELEASE);
			if (family == AF_INET) {
				struct sockaddr_in *s4 = (void *)&ss;

				s4->sin_family = AF_INET;
				s4->sin_addr.s_addr = ctl.tmpl4 | htonl(k);
				s4->sin_port = htons(KF_SEQ_PORT(seq));
				sl = sizeof(*s4);
			} else {
				struct sockaddr_in6 *s6 = (void *)&ss;
				uint32_t kk = htonl(k);

				s6->sin6_family = AF_INET6;
				memcpy(&s6->sin6_addr, ctl.tmpl6, 16);
				memcpy(&s6->sin6_addr.s6_addr[12], &kk, 4);
				s6->sin6_port = htons(KF_SEQ_PORT(seq));
				sl = sizeof(*s6);
			}
			if (sendto(tx, buf, size, 0, (void *)&ss, sl) != size) {
				printf("FAIL: sendto the template: %s\n", strerror(errno));
				return 1;
			}
			templates++;
			st = __atomic_load_n(&slots[k].state, __ATOMIC_ACQUIRE);
			if (st != KF_STATE(seq, KF_DONE)) {
				FAIL("round %d slice at %d: state %u seq %u after sendto, not DONE seq %u",
				     r, first, KF_STATE_ST(st), KF_STATE_SEQ(st), seq);
				continue;
			}
			if (slots[k].done != cnt)
				FAIL("done %u, count %u", slots[k].done, cnt);
			for (unsigned i = 0; i < cnt; i++) {
				int64_t v = status[k * KF_SLICE_MAX + i];

				last_status[first + i] = v;
				if (v == 0)
					nok++;
				else if (v == -EPERM)
					nperm++;
				else if (v == -ENOBUFS)
					nnobufs++;
				else
					nother++;
				if (ex == EX_POLICY) {
					bool al_ok = allowed(al, nal, family,
							     addrs[(first + i) % naddr],
							     port[first + i]);

					if (v != (al_ok ? 0 : -EPERM))
						FAIL("destination %d (port %u): status %" PRId64 ", policy "
						     "says %s", first + i, port[first + i], v,
						     al_ok ? "allowed" : "refused");
				} else if ((ex == EX_OK && v) || (ex == EX_EPERM && v != -EPERM) ||
					   (ex == EX_ENOBUFS && v && v != -ENOBUFS)) {
					if (failures < 10)
						FAIL("destination %d: status %" PRId64, first + i, v);
					else
						failures++;
				}
			}
		}
		/* Each round's datagrams, before the next round's (the expected ones, all of
		 * them queued before sendto returned: a duplicate would be queued with them). */
		unsigned want = 0, have = 0;
		for (int i = 0; i < n; i++)
			want += last_status[i] == 0;
		double end = now_s() + 30;
		while (have < want && now_s() < end) {
			if (poll(pf, n, 1000) <= 0)
				continue;
			for (int i = 0; i < n; i++) {
				ssize_t m;

				if (!(pf[i].revents & POLLIN))
					continue;
				while ((m = recv(rx[i], rbuf, size + 1, 0)) >= 0) {
					payload(buf, size, r);
					if (m != size || memcmp(rbuf, buf, size))
						bad[i]++;
					got[i]++;
					have++;
				}
			}
		}
		/* Anything more already there is a duplicate or a stray. */
		for (int i = 0; i < n; i++) {
			ssize_t m;

			while ((m = recv(rx[i], rbuf, size + 1, 0)) >= 0) {
				got[i]++;
				have++;
			}
		}
		unsigned missing = 0, dup = 0, wrong = 0, nobufs_arrived = 0;
		for (int i = 0; i < n; i++) {
			unsigned e = last_status[i] == 0;

			if (got[i] < e)
				missing++;
			if (got[i] > e)
				last_status[i] == -ENOBUFS ? nobufs_arrived++ : dup++;
			wrong += bad[i];
			got[i] = bad[i] = 0;
		}
		if (missing || dup || wrong || nobufs_arrived)
			FAIL("round %d: %u missing, %u duplicated, %u not byte-identical, %u with "
			     "-ENOBUFS arrived (%u expected, %u received)", r, missing, dup, wrong,
			     nobufs_arrived, want, have);
	}
	double t1 = now_s();
	long csum1 = csum_errors(snmp, family);
	if (csum0 < 0 || csum1 != csum0)
		FAIL("receivers' InCsumErrors %ld -> %ld", csum0, csum1);
	uint64_t d[KF_STAT_N];
	for (int i = 0; i < KF_STAT_N; i++)
		d[i] = stats_sum(stats_fd, i) - st0[i];
	/* Counters are per attachment: other users of it would move them too; the tests run
	 * one driver per attachment. */
	if (d[KF_STAT_TEMPLATES] != templates || d[KF_STAT_CLONES] != nok ||
	    d[KF_STAT_POLICY] != nperm || d[KF_STAT_CLONE_ERR] != nnobufs + nother ||
	    d[KF_STAT_NOT_OWNER] || d[KF_STAT_STALE] || d[KF_STAT_MALFORMED])
		FAIL("kf_stats: templates %" PRIu64 " clones %" PRIu64 " clone_err %" PRIu64
		     " policy %" PRIu64 " not_owner %" PRIu64 " stale %" PRIu64
		     " malformed %" PRIu64 "; statuses: templates %u ok %u eperm %u enobufs %u "
		     "other %u", d[0], d[1], d[2], d[3], d[4], d[5], d[6], templates, nok, nperm,
		     nnobufs, nother);
	if (ex == EX_ENOBUFS && !nnobufs)
		FAIL("no -ENOBUFS: the queue never overflowed");
	printf("family %d n %d size %d rounds %d slice %u slot %d: templates %u, statuses ok %u "
	       "eperm %u enobufs %u other %u; csum errors %ld; %.3f s\n",
	       family == AF_INET ? 4 : 6, n, size, rounds, slice, k, templates, nok, nperm,
	       nnobufs, nother, csum1 - csum0, t1 - t0);

	/* Release the slot. */
	slots[k].count = 0;
	slots[k].cookie = 0;
	__atomic_store_n(&slots[k].state, KF_STATE(seq, KF_IDLE), __ATOMIC_RELEASE);
	__atomic_store_n(&slots[k].owner, 0, __ATOMIC_RELEASE);
	munmap(slots, KF_SLOTS * sizeof(*slots));
	munmap(dests, nd * sizeof(*dests));
	munmap(status, nd * sizeof(*status));
	for (int i = 0; i < n; i++)
		close(rx[i]);
	close(tx);
	close(snmp);
	close(ctl_fd);
	close(slots_fd);
	close(dests_fd);
	close(st_fd);
	close(stats_fd);
	free(rx);
	free(port);
	free(got);
	free(bad);
	free(last_status);
	free(pf);
	free(buf);
	free(rbuf);
	return failures ? 1 : 0;
}

/*
 * after IFACE DST COUNT: an administrator's own program on IFACE's egress, last on the tcx
 * hook (BPF_F_AFTER: after kf_egress and its backstop), that counts every packet and passes
 * it on (TCX_NEXT); COUNT UDP datagrams sent to DST:9 from here; its count printed. Exit 0
 * when it saw them all: kf_egress passed what is not a template on to the rest of the hook.
 * Written as raw instructions: the test needs no compiler for it. Exit 77 without tcx.
 */
static int cmd_after(const char *ifname, const char *dst, const char *count)
{
	const int n = atoi(count), ifindex = (int)if_nametoindex(ifname);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)};
	__u32 zero = 0;
	__u64 seen = 0;
	int map, prog, link, fd;

	if (!ifindex || n <= 0 || inet_pton(AF_INET, dst, &to.sin_addr) != 1) {
		fprintf(stderr, "after: bad arguments\n");
		return 2;
	}
	map = bpf_map_create(BPF_MAP_TYPE_ARRAY, "kf_after", 4, 8, 1, NULL);
	if (map < 0) {
		fprintf(stderr, "after: map: %s\n", strerror(errno));
		return 1;
	}
	const struct bpf_insn insns[] = {
		{.code = BPF_ST | BPF_MEM | BPF_W, .dst_reg = BPF_REG_10, .off = -4, .imm = 0},
		{.code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_10},
		{.code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = -4},
		{.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1,
		 .src_reg = BPF_PSEUDO_MAP_FD, .imm = map},
		{0},
		{.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_map_lookup_elem},
		{.code = BPF_JMP | BPF_JEQ | BPF_K, .dst_reg = BPF_REG_0, .off = 2, .imm = 0},
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 1},
		{.code = BPF_STX | BPF_ATOMIC | BPF_DW, .dst_reg = BPF_REG_0, .src_reg = BPF_REG_1,
		 .imm = BPF_ADD},
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = -1}, /* NEXT */
		{.code = BPF_JMP | BPF_EXIT},
	};
	prog = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "kf_after", "Dual MIT/GPL", insns,
			     sizeof(insns) / sizeof(insns[0]), NULL);
	if (prog < 0) {
		fprintf(stderr, "after: program: %s\n", strerror(errno));
		return 1;
	}
	{
		LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = 1u << 4 /* BPF_F_AFTER */);

		link = bpf_link_create(prog, ifindex, 47 /* BPF_TCX_EGRESS */, &lo);
	}
	if (link < 0) {
		printf("after: no tcx here (%s)\n", strerror(errno));
		return 77;
	}
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	for (int i = 0; fd >= 0 && i < n; i++)
		if (sendto(fd, "after", 5, 0, (struct sockaddr *)&to, sizeof(to)) != 5)
			fprintf(stderr, "after: sendto: %s\n", strerror(errno));
	if (fd >= 0)
		close(fd);
	if (bpf_map_lookup_elem(map, &zero, &seen))
		fprintf(stderr, "after: reading the count: %s\n", strerror(errno));
	close(link);
	close(prog);
	close(map);
	printf("after: the program after kf_egress saw %llu of %d datagrams\n",
	       (unsigned long long)seen, n);
	return seen >= (__u64)n ? 0 : 1;
}

int main(int argc, char **argv)
{
	libbpf_set_print(NULL);
	if (argc == 5 && !strcmp(argv[1], "after"))
		return cmd_after(argv[2], argv[3], argv[4]);
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (argc == 3 && !strcmp(argv[1], "open"))
		return cmd_open(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "csum-off"))
		return cmd_csum_off(argv[2]);
	fprintf(stderr, "usage: kf-driver run ... | open IFACE | csum-off IFACE | "
			"after IFACE DST COUNT\n");
	return 2;
}
