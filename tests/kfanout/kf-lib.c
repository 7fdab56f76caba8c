/* SPDX-License-Identifier: MIT */
/*
 * The kfanout backend through the library's API (issue 27), checked against what arrives at
 * real sockets in another network namespace. kfanout-test.sh attaches the program with
 * multisend-kfanout first and runs this in the sender's namespace's terms:
 *
 *   kf-lib run --rx-ns PATH --tx-ns PATH --family 4|6 --dst ADDR[,ADDR...] --n N --slice K
 *              [--size B] [--rounds R] [--as UID:GID[:GROUP]] [--refuse ADDR]
 *              [--enobufs] [--mixed] [--churn] [--csum-zero] [--auto] [--detach CMD]
 *     In the receivers' namespace: N UDP sockets bound to port 0 of the addresses given (in
 *     turn). In the sender's namespace (as UID:GID with the supplementary GROUP, if given): a
 *     context with MS_BACKEND_KFANOUT and MS_CFG_NO_FALLBACK, one unconnected UDP socket, a
 *     group of its N destinations; one warm-up call, then R calls. Per call: every status is
 *     the message's length (or -EPERM exactly for --refuse's address, or with --enobufs
 *     -ENOBUFS exactly for the destinations that received nothing), and every receiver gets
 *     exactly one byte-identical copy of each message it should get and nothing else; the
 *     receivers' UDP InCsumErrors do not move. ms_stats agree with the statuses
 *     (kfanout_clones, kfanout_refused, kfanout_clone_err, dests_accepted), the templates
 *     are R * ceil(N / K) (plain runs; ms_stats.syscalls at least that).
 *       --mixed   one destination in 16 is a connected socket of its own, one in 16 is on the
 *                 kernel's path (ms_group_kernel_path): both go by the kernel's path, counted
 *                 in kfanout_fallback_other; the rest by templates
 *       --churn   before call r, the destinations i with i % 4 == r % 4 leave the group and the
 *                 ones that left before come back: exactly the members receive
 *       --csum-zero  the message's first two bytes make the first destination's UDP
 *                 checksum zero (sent as 0xffff): what an incremental update must not leave
 *                 at 0x0000 (IPv6 receivers drop it as a checksum error)
 *       --auto    MS_BACKEND_AUTO instead: it must measure kfanout beside the others
 *                 (auto_ns_kfanout) and send with it at times; results as above
 *       --detach  a thread runs CMD (multisend-kfanout detach) while the calls go on; calls
 *                 continue until it is done and 3 more after: no loss, no duplicate, and the
 *                 kernel's path carried the calls after it (kfanout_reclaimed + fallbacks)
 *   kf-lib eacces --tx-ns PATH --as UID:GID
 *     As that user: ms_ctx_new with MS_BACKEND_KFANOUT and MS_CFG_NO_FALLBACK is -EACCES; and
 *     without NO_FALLBACK (MULTISEND_SHOW_BACKEND=1 set by the caller) the context falls back
 *     to another backend and works (the reason is on stderr, which the script checks).
 * Exit 0 pass, 1 fail, 2 usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <multisend.h>

static int failures;

#define FAIL(...)                                                                          \
	do {                                                                               \
		if (failures++ < 20) {                                                     \
			printf("FAIL: " __VA_ARGS__);                                      \
			putchar('\n');                                                     \
		}                                                                          \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
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
	char *hdr = p + 6, *vals = strstr(hdr, "\nUdp: ");
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
	return strtol(vals, NULL, 10);
}

static int enter_ns(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
		printf("FAIL: setns %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int become(const char *as)
{
	unsigned uid, gid, sup;
	int k = sscanf(as, "%u:%u:%u", &uid, &gid, &sup);
	gid_t g = sup;

	if (k < 2 || setgroups(k == 3 ? 1 : 0, &g) < 0 || setresgid(gid, gid, gid) < 0 ||
	    setresuid(uid, uid, uid) < 0) {
		printf("FAIL: --as %s: %s\n", as, strerror(errno));
		return -1;
	}
	return 0;
}

static void payload(unsigned char *b, size_t n, unsigned round)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 7 + round * 13 + 1);
}

/* The 16-bit one's complement sum of n bytes, added to s (not folded). */
static uint32_t sum16(uint32_t s, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i + 1 < n; i += 2)
		s += (uint32_t)b[i] << 8 | b[i + 1];
	if (n & 1)
		s += (uint32_t)b[n - 1] << 8;
	return s;
}

/*
 * --csum-zero: make the message's first two bytes such that the datagram from src to dst
 * sums to 0xffff, so that its UDP checksum is zero: the stack writes 0xffff for it (0 means
 * "none" in IPv4 and is forbidden in IPv6), and an incremental update from another
 * destination's checksum lands on 0x0000 unless it says otherwise (BPF_F_MARK_MANGLED_0).
 */
static void csum_zero(unsigned char *buf, size_t size, const struct sockaddr_storage *src,
		      const struct sockaddr_storage *dst)
{
	uint32_t s = 17 + 2 * (uint32_t)(size + 8); /* protocol, UDP length (pseudo and header) */

	if (src->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)src, *b = (const void *)dst;

		s = sum16(s, &a->sin_addr, 4);
		s = sum16(s, &b->sin_addr, 4);
		s = sum16(s, &a->sin_port, 2);
		s = sum16(s, &b->sin_port, 2);
	} else {
		const struct sockaddr_in6 *a = (const void *)src, *b = (const void *)dst;

		s = sum16(s, &a->sin6_addr, 16);
		s = sum16(s, &b->sin6_addr, 16);
		s = sum16(s, &a->sin6_port, 2);
		s = sum16(s, &b->sin6_port, 2);
	}
	buf[0] = buf[1] = 0;
	s = sum16(s, buf, size);
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	const uint16_t w = (uint16_t)(0xffff - s);
	buf[0] = (unsigned char)(w >> 8);
	buf[1] = (unsigned char)w;
}

static struct ms_ctx *ctx_auto(int *err)
{
	struct ms_config c = {.size = sizeof(c), .backend = MS_BACKEND_AUTO};
	struct ms_ctx *ctx = NULL;

	*err = ms_ctx_new(&ctx, &c);
	return *err ? NULL : ctx;
}

static struct ms_ctx *ctx_kfanout(bool no_fallback, int *err)
{
	struct ms_config c = {.size = sizeof(c), .backend = MS_BACKEND_KFANOUT};
	struct ms_ctx *ctx = NULL;

	if (no_fallback)
		c.flags |= MS_CFG_NO_FALLBACK;
	*err = ms_ctx_new(&ctx, &c);
	return *err ? NULL : ctx;
}

static int cmd_eacces(int argc, char **argv)
{
	static const struct option opts[] = {
		{"tx-ns", required_argument, NULL, 't'}, {"as", required_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	const char *txns = NULL, *as = NULL;
	int c, err;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't': txns = optarg; break;
		case 'u': as = optarg; break;
		default: return 2;
		}
	}
	if (!txns || !as)
		return 2;
	if (enter_ns(txns) < 0 || become(as) < 0)
		return 1;
	struct ms_ctx *ctx = ctx_kfanout(true, &err);
	printf("NO_FALLBACK: %s\n", err ? ms_strerror(err) : "made");
	if (err != -EACCES)
		FAIL("ms_ctx_new(kfanout, NO_FALLBACK) as %s: %d (%s), not -EACCES", as, err,
		     ms_strerror(err));
	ms_ctx_free(ctx);
	fflush(stdout);
	ctx = ctx_kfanout(false, &err);
	if (err) {
		FAIL("ms_ctx_new(kfanout) with fallback: %s", ms_strerror(err));
		return 1;
	}
	printf("fallback: %s\n", ms_backend_name(ms_ctx_backend(ctx)));
	if (ms_ctx_backend(ctx) == MS_BACKEND_KFANOUT)
		FAIL("kfanout chosen by a user who may not open the pins");
	/* The context works: one destination on loopback, sent and received. */
	int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	struct ms_group *g = NULL;
	struct ms_result r;
	char m[4] = "abc", in[8];

	if (rx < 0 || tx < 0 || bind(rx, (void *)&a, sizeof(a)) ||
	    getsockname(rx, (void *)&a, &al) || ms_group_new(ctx, &g) ||
	    ms_group_add(g, &(struct ms_dest){.fd = tx, .addr = (void *)&a, .addrlen = al}) < 0 ||
	    ms_send(g, m, 3, 0, &r) != 1 || recv(rx, in, sizeof(in), 0) != 3)
		FAIL("the fallback context does not send: %s", strerror(errno));
	ms_group_free(g);
	ms_ctx_free(ctx);
	close(rx);
	close(tx);
	return failures ? 1 : 0;
}

struct detacher {
	const char *cmd;
	int status;
	bool done;
};

static void *detach_thread(void *p)
{
	struct detacher *d = p;

	d->status = system(d->cmd);
	__atomic_store_n(&d->done, true, __ATOMIC_RELEASE);
	return NULL;
}

enum kind { K_TMPL, K_CONN, K_OPTOUT };

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"rx-ns", required_argument, NULL, 'r'},  {"tx-ns", required_argument, NULL, 't'},
		{"family", required_argument, NULL, 'f'}, {"dst", required_argument, NULL, 'd'},
		{"n", required_argument, NULL, 'n'},      {"size", required_argument, NULL, 's'},
		{"rounds", required_argument, NULL, 'R'}, {"as", required_argument, NULL, 'u'},
		{"slice", required_argument, NULL, 'k'},  {"refuse", required_argument, NULL, 'x'},
		{"enobufs", no_argument, NULL, 'E'},      {"mixed", no_argument, NULL, 'M'},
		{"churn", no_argument, NULL, 'C'},        {"detach", required_argument, NULL, 'D'},
		{"csum-zero", no_argument, NULL, 'Z'},    {"auto", no_argument, NULL, 'A'},
		{NULL, 0, NULL, 0},
	};
	const char *rxns = NULL, *txns = NULL, *as = NULL, *detach = NULL;
	char *dsts = NULL, *refuse_s = NULL;
	unsigned char addrs[64][16], refuse[16];
	int family = AF_INET, naddr = 0, n = 1, size = 16, rounds = 1, slice = 0, c;
	bool enobufs = false, mixed = false, churn = false, czero = false, autob = false;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': rxns = optarg; break;
		case 't': txns = optarg; break;
		case 'f': family = atoi(optarg) == 6 ? AF_INET6 : AF_INET; break;
		case 'd': dsts = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		case 'R': rounds = atoi(optarg); break;
		case 'u': as = optarg; break;
		case 'k': slice = atoi(optarg); break;
		case 'x': refuse_s = optarg; break;
		case 'E': enobufs = true; break;
		case 'M': mixed = true; break;
		case 'C': churn = true; break;
		case 'D': detach = optarg; break;
		case 'Z': czero = true; break;
		case 'A': autob = true; break;
		default: return 2;
		}
	}
	if (!rxns || !txns || !dsts || n < 1 || n > 16384 || size < 1 || size > 65000 ||
	    rounds < 1 || rounds > 1000 || slice < 1 || slice > 256 || (czero && size < 2)) {
		fprintf(stderr, "kf-lib run: missing or bad options\n");
		return 2;
	}
	for (char *t = strtok(dsts, ","); t && naddr < 64; t = strtok(NULL, ","))
		if (inet_pton(family, t, addrs[naddr++]) != 1)
			return 2;
	if (refuse_s && inet_pton(family, refuse_s, refuse) != 1)
		return 2;
	const size_t alen = family == AF_INET ? 4 : 16;

	/* Enough descriptors for the receivers and the mixed group's connected sockets. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)2 * n + 64) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)2 * n + 64 ? rl.rlim_max : (rlim_t)2 * n + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	/* Receivers, in their namespace. */
	if (enter_ns(rxns) < 0)
		return 1;
	int snmp = open(family == AF_INET6 ? "/proc/self/net/snmp6" : "/proc/self/net/snmp",
			O_RDONLY | O_CLOEXEC);
	int *rx = calloc(n, sizeof(int)), *ids = calloc(n, sizeof(int)), *cfd = calloc(n, sizeof(int));
	struct sockaddr_storage *ra = calloc(n, sizeof(*ra));
	socklen_t *ral = calloc(n, sizeof(*ral));
	unsigned *got = calloc(n, sizeof(unsigned)), *bad = calloc(n, sizeof(unsigned));
	int *st = calloc(n, sizeof(int));
	bool *member = calloc(n, sizeof(bool)), *refused = calloc(n, sizeof(bool));
	enum kind *kind = calloc(n, sizeof(*kind));
	struct pollfd *pf = calloc(n, sizeof(*pf));
	struct ms_result *res = calloc(n, sizeof(*res));
	if (snmp < 0 || !rx || !ids || !cfd || !ra || !ral || !got || !bad || !st || !member ||
	    !refused || !kind || !pf || !res) {
		printf("FAIL: setup: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		int big = 1 << 20;
		const unsigned char *ad = addrs[i % naddr];

		rx[i] = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (rx[i] < 0) {
			printf("FAIL: receiver %d: socket: %s (ulimit -n?)\n", i, strerror(errno));
			return 1;
		}
		memset(&ra[i], 0, sizeof(ra[i]));
		if (family == AF_INET) {
			struct sockaddr_in *s4 = (void *)&ra[i];

			s4->sin_family = AF_INET;
			memcpy(&s4->sin_addr, ad, 4);
			ral[i] = sizeof(*s4);
		} else {
			struct sockaddr_in6 *s6 = (void *)&ra[i];

			s6->sin6_family = AF_INET6;
			memcpy(&s6->sin6_addr, ad, 16);
			ral[i] = sizeof(*s6);
		}
		setsockopt(rx[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
		if (rx[i] < 0 || bind(rx[i], (void *)&ra[i], ral[i]) < 0 ||
		    getsockname(rx[i], (void *)&ra[i], &ral[i]) < 0) {
			printf("FAIL: receiver %d: %s (ulimit -n?)\n", i, strerror(errno));
			return 1;
		}
		pf[i].fd = rx[i];
		pf[i].events = POLLIN;
		refused[i] = refuse_s && !memcmp(ad, refuse, alen);
		kind[i] = !mixed ? K_TMPL : i % 16 == 5 ? K_CONN : i % 16 == 9 ? K_OPTOUT : K_TMPL;
	}
	long csum0 = csum_errors(snmp, family);

	/* The sender, in its namespace, maybe as another user. */
	if (enter_ns(txns) < 0)
		return 1;
	int tx = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (tx < 0) {
		printf("FAIL: sender socket: %s\n", strerror(errno));
		return 1;
	}
	/* --csum-zero: the source address and port known before the first send (bound). */
	struct sockaddr_storage src = {0};
	if (czero) {
		socklen_t sl = sizeof(src);
		int t = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		if (t < 0 || connect(t, (void *)&ra[0], ral[0]) || getsockname(t, (void *)&src, &sl) ||
		    (((struct sockaddr_in *)&src)->sin_port = 0, bind(tx, (void *)&src, sl)) ||
		    getsockname(tx, (void *)&src, &sl)) {
			printf("FAIL: --csum-zero: the source address: %s\n", strerror(errno));
			return 1;
		}
		close(t);
	}
	for (int i = 0; i < n; i++) {
		cfd[i] = -1;
		if (kind[i] != K_CONN)
			continue;
		cfd[i] = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (cfd[i] < 0 || connect(cfd[i], (void *)&ra[i], ral[i]) < 0) {
			printf("FAIL: connected socket %d: %s\n", i, strerror(errno));
			return 1;
		}
	}
	if (as && become(as) < 0)
		return 1;
	int err;
	struct ms_ctx *ctx = autob ? ctx_auto(&err) : ctx_kfanout(true, &err);
	if (!ctx) {
		printf("FAIL: ms_ctx_new(%s): %s\n", autob ? "auto" : "kfanout, NO_FALLBACK",
		       ms_strerror(err));
		return 1;
	}
	struct ms_group *g = NULL;
	if (ms_group_new(ctx, &g)) {
		printf("FAIL: ms_group_new\n");
		return 1;
	}
	int members = 0;
	for (int i = 0; i < n; i++) {
		struct ms_dest d = {.fd = tx, .addr = (void *)&ra[i], .addrlen = ral[i]};

		if (kind[i] == K_CONN)
			d = (struct ms_dest){.fd = cfd[i]};
		ids[i] = ms_group_add(g, &d);
		if (ids[i] < 0 || (kind[i] == K_OPTOUT && ms_group_kernel_path(g, ids[i], 1))) {
			printf("FAIL: ms_group_add %d: %s\n", i, ms_strerror(ids[i]));
			return 1;
		}
		member[i] = true;
		members++;
	}
	/* Which receiver a destination id is. */
	int *rcv_of = malloc(sizeof(int) * (size_t)(2 * n + 1));
	if (!rcv_of)
		return 1;

	unsigned char *buf = malloc(size), *rbuf = malloc(size + 1);
	struct ms_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
	uint64_t nok = 0, nperm = 0, nnobufs = 0, ntmpl_ok = 0, nfb = 0, want_tmpl = 0;
	struct detacher dt = {.cmd = detach};
	pthread_t th;
	bool th_started = false;
	int after_detach = 0, r;
	double t0 = now_s();

	/* Round 0 is the warm-up (the plan, the slots, the routes): not in the counts. */
	for (r = 0; r <= rounds || (detach && after_detach < 3); r++) {
		if (r > rounds + 2000) {
			FAIL("the detach did not finish within 2000 calls");
			break;
		}
		if (r == 1 && ms_ctx_stats(ctx, &s0))
			FAIL("ms_ctx_stats");
		if (detach && r == 1 + rounds / 4 && !th_started) {
			if (pthread_create(&th, NULL, detach_thread, &dt)) {
				FAIL("pthread_create");
				break;
			}
			th_started = true;
		}
		if (th_started && __atomic_load_n(&dt.done, __ATOMIC_ACQUIRE))
			after_detach++;
		if (churn && r > 0) {
			for (int i = 0; i < n; i++) {
				bool in = i % 4 != r % 4;

				if (in && !member[i]) {
					ids[i] = ms_group_add(g, &(struct ms_dest){
						.fd = tx, .addr = (void *)&ra[i], .addrlen = ral[i]});
					if (ids[i] < 0)
						FAIL("churn: add %d: %s", i, ms_strerror(ids[i]));
					member[i] = ids[i] >= 0;
					members += member[i];
				} else if (!in && member[i]) {
					if (ms_group_remove(g, ids[i]))
						FAIL("churn: remove %d", i);
					member[i] = false;
					members--;
				}
			}
		}
		for (int i = 0; i < 2 * n + 1; i++)
			rcv_of[i] = -1;
		for (int i = 0; i < n; i++) {
			st[i] = 0x7eadbeef;
			if (member[i] && ids[i] <= 2 * n)
				rcv_of[ids[i]] = i;
		}
		if ((int)ms_group_size(g) != members)
			FAIL("group size %zu, %d members", ms_group_size(g), members);
		payload(buf, size, r);
		if (czero)
			csum_zero(buf, size, &src, &ra[0]);
		int acc = ms_send(g, buf, size, 0, res);
		int ok = 0;
		for (int k = 0; k < members; k++) {
			int i = res[k].id >= 0 && res[k].id <= 2 * n ? rcv_of[res[k].id] : -1;

			if (i < 0) {
				FAIL("call %d: result %d has id %d, not a member's", r, k, res[k].id);
				continue;
			}
			st[i] = res[k].status;
			ok += st[i] == size;
			if (r == 0)
				continue;
			if (st[i] == size) {
				nok++;
			} else if (st[i] == -EPERM) {
				nperm++;
			} else if (st[i] == -ENOBUFS) {
				nnobufs++;
			}
			if (refused[i] && kind[i] == K_TMPL) {
				if (st[i] != -EPERM)
					FAIL("call %d destination %d (refused by the policy): status %d", r,
					     i, st[i]);
			} else if (enobufs) {
				if (st[i] != size && st[i] != -ENOBUFS)
					FAIL("call %d destination %d: status %d", r, i, st[i]);
			} else if (st[i] != size) {
				FAIL("call %d destination %d: status %d (%s), not %d", r, i, st[i],
				     ms_strerror(st[i] < 0 ? st[i] : 0), size);
			}
			if (kind[i] == K_TMPL && !th_started) {
				want_tmpl++;
				ntmpl_ok += st[i] == size;
			} else if (kind[i] != K_TMPL) {
				nfb++;
			}
		}
		if (acc != ok)
			FAIL("call %d: ms_send returned %d, %d statuses are the length", r, acc, ok);

		/* This call's datagrams, before the next call's (all of them were queued to the
		 * receivers' device before sendto returned: a duplicate would be with them). */
		unsigned want = 0, have = 0;
		for (int i = 0; i < n; i++)
			want += member[i] && st[i] == size;
		double end = now_s() + 30;
		while (have < want && now_s() < end) {
			if (poll(pf, n, 1000) <= 0)
				continue;
			for (int i = 0; i < n; i++) {
				ssize_t m;

				if (!(pf[i].revents & POLLIN))
					continue;
				while ((m = recv(rx[i], rbuf, size + 1, 0)) >= 0) {
					if (m != size || memcmp(rbuf, buf, size))
						bad[i]++;
					got[i]++;
					have++;
				}
			}
		}
		/* Anything more already there is a duplicate or a stray. */
		for (int i = 0; i < n; i++) {
			while (recv(rx[i], rbuf, size + 1, 0) >= 0) {
				got[i]++;
				have++;
			}
		}
		unsigned missing = 0, dup = 0, wrong = 0, nobufs_arrived = 0;
		for (int i = 0; i < n; i++) {
			unsigned e = member[i] && st[i] == size;

			if (got[i] < e)
				missing++;
			if (got[i] > e)
				member[i] && st[i] == -ENOBUFS ? nobufs_arrived++ : dup++;
			wrong += bad[i];
			got[i] = bad[i] = 0;
		}
		if (missing || dup || wrong || nobufs_arrived)
			FAIL("call %d: %u missing, %u duplicated, %u not byte-identical, %u with "
			     "-ENOBUFS arrived (%u expected, %u received)", r, missing, dup, wrong,
			     nobufs_arrived, want, have);
	}
	const int calls = r - 1;
	double t1 = now_s();
	if (th_started) {
		pthread_join(th, NULL);
		if (dt.status != 0)
			FAIL("'%s': status %d", detach, dt.status);
	}
	if (ms_ctx_stats(ctx, &s1))
		FAIL("ms_ctx_stats");
	long csum1 = csum_errors(snmp, family);
	if (csum0 < 0 || csum1 != csum0)
		FAIL("receivers' InCsumErrors %ld -> %ld", csum0, csum1);

#define D(f) (s1.f - s0.f)
	const uint64_t fb = D(kfanout_fallback_local) + D(kfanout_fallback_iface) +
			    D(kfanout_fallback_mtu) + D(kfanout_fallback_route) +
			    D(kfanout_fallback_neigh) + D(kfanout_fallback_other);
	printf("family %d n %d size %d calls %d slice %d%s%s%s%s%s: statuses ok %" PRIu64
	       " eperm %" PRIu64 " enobufs %" PRIu64 "; ms_stats templates %" PRIu64
	       " clones %" PRIu64 " refused %" PRIu64 " clone_err %" PRIu64 " reclaimed %" PRIu64
	       " fallback %" PRIu64 " (local %" PRIu64 " iface %" PRIu64 " mtu %" PRIu64
	       " route %" PRIu64 " neigh %" PRIu64 " other %" PRIu64 ") accepted %" PRIu64
	       " syscalls %" PRIu64 "; csum errors %ld; %.3f s\n",
	       family == AF_INET ? 4 : 6, n, size, calls, slice, mixed ? " mixed" : "",
	       churn ? " churn" : "", detach ? " detach" : "", as ? " as-user" : "",
	       czero ? " csum-zero" : "", nok, nperm,
	       nnobufs, D(kfanout_templates), D(kfanout_clones), D(kfanout_refused),
	       D(kfanout_clone_err), D(kfanout_reclaimed), fb, D(kfanout_fallback_local),
	       D(kfanout_fallback_iface), D(kfanout_fallback_mtu), D(kfanout_fallback_route),
	       D(kfanout_fallback_neigh), D(kfanout_fallback_other), D(dests_accepted),
	       D(syscalls), csum1 - csum0, t1 - t0);
	if (D(dests_accepted) != nok)
		FAIL("dests_accepted %" PRIu64 ", %" PRIu64 " statuses are the length",
		     D(dests_accepted), nok);
	if (D(kfanout_refused) != nperm)
		FAIL("kfanout_refused %" PRIu64 ", %" PRIu64 " statuses -EPERM", D(kfanout_refused),
		     nperm);
	if (D(kfanout_clone_err) != nnobufs || D(err_nobufs) != nnobufs)
		FAIL("kfanout_clone_err %" PRIu64 " err_nobufs %" PRIu64 ", %" PRIu64
		     " statuses -ENOBUFS", D(kfanout_clone_err), D(err_nobufs), nnobufs);
	if (enobufs && !nnobufs)
		FAIL("no -ENOBUFS: the queue never overflowed");
	if (autob) {
		/* AUTO measured kfanout beside the others (and sent some calls with it). */
		char desc[1024];

		ms_ctx_describe(ctx, desc, sizeof(desc));
		printf("auto: backend %s, auto_ns_kfanout %" PRIu64 " sendmmsg %" PRIu64
		       " loop %" PRIu64 "; %s\n", ms_backend_name(ms_ctx_backend(ctx)),
		       s1.auto_ns_kfanout, s1.auto_ns_sendmmsg, s1.auto_ns_loop, desc);
		if (!s1.auto_ns_kfanout || !s1.kfanout_templates)
			FAIL("AUTO did not measure kfanout (auto_ns_kfanout %" PRIu64
			     ", templates %" PRIu64 ")", s1.auto_ns_kfanout, s1.kfanout_templates);
	} else if (!detach) {
		/* Every template destination by a template; the rest by the kernel's path. */
		if (D(kfanout_clones) != ntmpl_ok || D(kfanout_clones) + D(kfanout_refused) +
								  D(kfanout_clone_err) != want_tmpl)
			FAIL("kfanout_clones %" PRIu64 ", %" PRIu64 " template destinations, %" PRIu64
			     " of them ok", D(kfanout_clones), want_tmpl, ntmpl_ok);
		if (fb != nfb || D(kfanout_fallback_other) != nfb || D(kfanout_reclaimed))
			FAIL("fallbacks %" PRIu64 " (other %" PRIu64 "), reclaimed %" PRIu64
			     ", %" PRIu64 " destinations on the kernel's path",
			     fb, D(kfanout_fallback_other), D(kfanout_reclaimed), nfb);
	} else if (D(kfanout_reclaimed) + fb == 0) {
		FAIL("after the detach no call went by the kernel's path");
	}
	if (!mixed && !churn && !detach && !autob) {
		/* One template per slice, one system call per template. */
		uint64_t per = ((uint64_t)n + slice - 1) / slice;

		if (D(kfanout_templates) != per * calls)
			FAIL("templates %" PRIu64 ", not %d calls x ceil(%d / %d) = %" PRIu64,
			     D(kfanout_templates), calls, n, slice, per * calls);
		/* ms_stats.syscalls also counts the backend's reads of rtnetlink (at most one
		 * per 5 ms) and of its sockets' options (once a second): at least the templates
		 * here; kfanout-test.sh counts the sends themselves with strace. */
		if (D(syscalls) < per * calls)
			FAIL("system calls %" PRIu64 ", fewer than %d calls x ceil(%d / %d) = %" PRIu64,
			     D(syscalls), calls, n, slice, per * calls);
	}

	ms_group_free(g);
	ms_ctx_free(ctx);
	for (int i = 0; i < n; i++) {
		close(rx[i]);
		if (cfd[i] >= 0)
			close(cfd[i]);
	}
	close(tx);
	close(snmp);
	free(rx);
	free(ids);
	free(cfd);
	free(ra);
	free(ral);
	free(got);
	free(bad);
	free(st);
	free(member);
	free(refused);
	free(kind);
	free(pf);
	free(res);
	free(rcv_of);
	free(buf);
	free(rbuf);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "eacces"))
		return cmd_eacces(argc - 1, argv + 1);
	fprintf(stderr, "usage: kf-lib run|eacces ...\n");
	return 2;
}
