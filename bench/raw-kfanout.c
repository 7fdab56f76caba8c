/* SPDX-License-Identifier: MIT */
/*
 * raw-kfanout: the library's kfanout backend written by hand, without the library, over the
 * attachment the bench made on the namespace's veth (kfanout.h), following the contract of
 * lib/be/kfanout/abi.h step by step:
 *   when the rig opens: the pins opened with BPF_OBJ_GET (the raw bpf(2) call, as the backend
 *   does: no libbpf), kf_ctl read, kf_slots, kf_dests and kf_status mmap'ed; one slot claimed
 *   per slice of ctl.slice destinations (compare-and-swap of its owner from 0), the sending
 *   socket's SO_COOKIE and the slice's destinations (the neighbour's MAC, address, port)
 *   written in it;
 *   per fan-out and slice: the state armed with the slice's next sequence number (a release
 *   store), one sendmsg(2) of the message on the rig's unconnected socket to the slot's
 *   template address (tmpl4 | slot, port KF_SEQ_PORT(seq)) naming the attachment's
 *   interface (IP_PKTINFO, as abi.h asks), then the state: DONE with that
 *   sequence number, the statuses are the results (a non-zero one is a failed destination);
 *   still ARMED, the program did not run: taken back to IDLE and the whole slice counted as
 *   failed (the library would send it by the kernel's path; a baseline only counts).
 * One system call per slice, as the library's: what the library adds is its bookkeeping.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/bpf.h>

#include "kfanout.h"
#include "netns.h"
#include "raw.h"
#include "../lib/be/kfanout/abi.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

#define PINS KF_PIN_ROOT "/" NETNS_DEV
#define WAIT_DONE_NS (1000ull * 1000 * 1000)

enum { M_SLOTS, M_DESTS, M_STATUS };

struct raw_kf {
	int fd[3];
	unsigned char *map[3];
	size_t len[3];
	struct kf_ctl ctl;
	uint32_t slice, nslices;
	uint32_t *slot;       /* per slice: its slot */
	uint16_t *seq;        /* per slice: the last call's sequence number */
	uint64_t owner;
	struct sockaddr_in *tmpl; /* per slice: its template address (the port set per call) */
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct in_pktinfo))];
	} oif; /* IP_PKTINFO: the template's outgoing interface, ctl.ifindex */
};

bool raw_kfanout_probe(const struct session *s, char *detail, size_t len)
{
	if (s->o->connected) {
		snprintf(detail, len,
			 "unavailable: raw-kfanout sends templates on the one unconnected socket "
			 "(not with --connected)");
		return false;
	}
	snprintf(detail, len,
		 "hand-written kernel fan-out, no library: slots and destinations written in the "
		 "attachment's mmap'ed maps once, then per slice one sendmsg of the message to the "
		 "slot's template address and its statuses read back (lib/be/kfanout/abi.h)");
	return true;
}

/* Our claim's value, as the library makes it: (pid << 32) | the low 32 bits of our start
 * time in clock ticks (/proc/self/stat field 22), so that a claim a killed bench left is
 * recognised by the library and taken over. */
static uint64_t owner_value(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	uint32_t t = 0;

	if (fd >= 0)
		close(fd);
	if (n > 0) {
		buf[n] = '\0';
		const char *p = strrchr(buf, ')');
		int field = 2;

		for (; p && *p && field < 22; p++)
			if (*p == ' ')
				field++;
		if (p)
			t = (uint32_t)strtoull(p, NULL, 10);
	}
	uint64_t v = (uint64_t)(uint32_t)getpid() << 32 | t;

	return v == 0 || v == KF_OWNER_GROUP ? v | 2 : v;
}

static struct kf_slot *slot_at(const struct raw_kf *k, uint32_t slot)
{
	return (struct kf_slot *)(k->map[M_SLOTS] + (size_t)slot * sizeof(struct kf_slot));
}

void raw_kfanout_close(struct rig *r)
{
	struct raw_kf *k = r->raw_kf;

	if (!k)
		return;
	for (uint32_t j = 0; k->slot && k->map[M_SLOTS] && j < k->nslices; j++) {
		if (k->slot[j] == UINT32_MAX)
			continue;
		struct kf_slot *sl = slot_at(k, k->slot[j]);
		uint64_t cur = k->owner;

		__atomic_store_n(&sl->count, 0, __ATOMIC_RELAXED);
		(void)__atomic_compare_exchange_n(&sl->owner, &cur, 0, false, __ATOMIC_ACQ_REL,
						  __ATOMIC_RELAXED);
	}
	for (int m = 0; m < 3; m++) {
		if (k->map[m])
			munmap(k->map[m], k->len[m]);
		if (k->fd[m] >= 0)
			close(k->fd[m]);
	}
	free(k->slot);
	free(k->seq);
	free(k->tmpl);
	free(k);
	r->raw_kf = NULL;
}

int raw_kfanout_open(const struct session *s, struct rig *r, char *err, size_t errlen)
{
	static const char *const names[3] = { KF_MAP_SLOTS, KF_MAP_DESTS, KF_MAP_STATUS };
	const size_t entries[3] = { KF_SLOTS, (size_t)KF_SLOTS * KF_SLICE_MAX,
				    (size_t)KF_SLOTS * KF_SLICE_MAX };
	const size_t stride[3] = { sizeof(struct kf_slot), sizeof(struct kf_dest), 8 };
	const long page = sysconf(_SC_PAGESIZE);
	struct raw_kf *k = calloc(1, sizeof(*k));
	union bpf_attr a;
	int fd, e;

	(void)s;
	if (!k) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r->raw_kf = k;
	k->fd[0] = k->fd[1] = k->fd[2] = -1;
	fd = kf_pin_get(PINS "/" KF_MAP_CTL);
	if (fd < 0) {
		snprintf(err, errlen, "raw-kfanout: pin %s/%s: %s", PINS, KF_MAP_CTL, strerror(-fd));
		return fd;
	}
	uint32_t key = 0;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)fd;
	a.key = (uintptr_t)&key;
	a.value = (uintptr_t)&k->ctl;
	e = kf_bpf(BPF_MAP_LOOKUP_ELEM, &a);
	close(fd);
	if (e || k->ctl.abi != KF_ABI_VERSION || !(k->ctl.flags & KF_CTL_V4) || !k->ctl.slice) {
		snprintf(err, errlen, "raw-kfanout: %s/%s: %s", PINS, KF_MAP_CTL,
			 e ? strerror(-e) : "not ABI 1 with an IPv4 template route");
		return e ? e : -EPROTO;
	}
	for (int m = 0; m < 3; m++) {
		char path[128];

		snprintf(path, sizeof(path), "%s/%s", PINS, names[m]);
		k->fd[m] = kf_pin_get(path);
		if (k->fd[m] < 0) {
			snprintf(err, errlen, "raw-kfanout: pin %s: %s", path, strerror(-k->fd[m]));
			return k->fd[m];
		}
		k->len[m] = (entries[m] * stride[m] + (size_t)page - 1) & ~((size_t)page - 1);
		void *p = mmap(NULL, k->len[m], PROT_READ | PROT_WRITE, MAP_SHARED, k->fd[m], 0);

		if (p == MAP_FAILED) {
			e = -errno;
			snprintf(err, errlen, "raw-kfanout: mmap of %s: %s", path, strerror(-e));
			return e;
		}
		k->map[m] = p;
	}
	k->slice = k->ctl.slice < KF_SLICE_MAX ? k->ctl.slice : KF_SLICE_MAX;
	k->nslices = (uint32_t)((r->n + k->slice - 1) / k->slice);
	k->slot = malloc(k->nslices * sizeof(*k->slot));
	k->seq = calloc(k->nslices, sizeof(*k->seq));
	k->tmpl = calloc(k->nslices, sizeof(*k->tmpl));
	if (!k->slot || !k->seq || !k->tmpl) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < k->nslices; j++)
		k->slot[j] = UINT32_MAX;
	memset(&k->oif, 0, sizeof(k->oif));
	k->oif.h.cmsg_level = IPPROTO_IP;
	k->oif.h.cmsg_type = IP_PKTINFO;
	k->oif.h.cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
	{
		struct in_pktinfo pi = { .ipi_ifindex = (int)k->ctl.ifindex };

		memcpy(CMSG_DATA(&k->oif.h), &pi, sizeof(pi));
	}
	uint64_t cookie = 0;
	socklen_t cl = sizeof(cookie);

	if (r->shared < 0 || getsockopt(r->shared, SOL_SOCKET, SO_COOKIE, &cookie, &cl)) {
		snprintf(err, errlen, "raw-kfanout: SO_COOKIE: %s", strerror(errno));
		return -errno;
	}
	unsigned char mac[6];

	if (sscanf(NETNS_REMOTE_MAC, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2],
		   &mac[3], &mac[4], &mac[5]) != 6) {
		snprintf(err, errlen, "raw-kfanout: bad MAC " NETNS_REMOTE_MAC);
		return -EINVAL;
	}
	k->owner = owner_value();
	uint32_t next = 0;

	for (uint32_t j = 0; j < k->nslices; j++) {
		for (; next < KF_SLOTS; next++) {
			uint64_t zero = 0;

			if (__atomic_compare_exchange_n(&slot_at(k, next)->owner, &zero, k->owner,
							false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				break;
		}
		if (next == KF_SLOTS) {
			snprintf(err, errlen, "raw-kfanout: no free slot for slice %u of %u", j + 1,
				 k->nslices);
			return -EBUSY;
		}
		const uint32_t slot = next++;
		struct kf_slot *sl = slot_at(k, slot);
		const uint64_t first = (uint64_t)j * k->slice;
		const uint32_t cnt = (uint32_t)(r->n - first < k->slice ? r->n - first : k->slice);
		struct kf_dest *d = (struct kf_dest *)(k->map[M_DESTS] +
						       (size_t)slot * KF_SLICE_MAX * sizeof(*d));

		k->slot[j] = slot;
		for (uint32_t i = 0; i < cnt; i++) {
			memset(&d[i], 0, sizeof(d[i]));
			memcpy(d[i].mac, mac, 6);
			d[i].port = r->dests[first + i].sin_port;
			d[i].addr.v4 = r->dests[first + i].sin_addr.s_addr;
		}
		sl->cookie = cookie;
		sl->count = cnt;
		__atomic_store_n(&sl->state, KF_STATE(0, KF_IDLE), __ATOMIC_RELEASE);
		k->tmpl[j].sin_family = AF_INET;
		k->tmpl[j].sin_addr.s_addr = htonl(ntohl(k->ctl.tmpl4) | slot);
	}
	return 0;
}

uint64_t bench_raw_kfanout_fanout(struct rig *r)
{
	struct raw_kf *k = r->raw_kf;
	uint64_t failed = 0;

	for (uint32_t j = 0; j < k->nslices; j++) {
		const uint32_t slot = k->slot[j];
		struct kf_slot *sl = slot_at(k, slot);
		const uint32_t cnt = sl->count;
		const uint16_t seq = (uint16_t)((k->seq[j] + 1) & 0x7fffu);

		k->seq[j] = seq;
		__atomic_store_n(&sl->state, KF_STATE(seq, KF_ARMED), __ATOMIC_RELEASE);
		k->tmpl[j].sin_port = htons(KF_SEQ_PORT(seq));
		r->raw_syscalls++;
		struct iovec iov = { .iov_base = r->msg, .iov_len = r->size };
		struct msghdr m = { .msg_name = &k->tmpl[j], .msg_namelen = sizeof(k->tmpl[j]),
				    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &k->oif,
				    .msg_controllen = sizeof(k->oif) };
		(void)sendmsg(r->shared, &m, r->raw_flags);
		uint32_t st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE);

		if (st != KF_STATE(seq, KF_DONE)) {
			uint32_t armed = KF_STATE(seq, KF_ARMED);

			if (__atomic_compare_exchange_n(&sl->state, &armed, KF_STATE(seq, KF_IDLE),
							false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				failed += cnt; /* the program did not run */
				continue;
			}
			/* Running on another CPU (the send was deferred): wait for DONE. */
			const uint64_t until = now_ns() + WAIT_DONE_NS;

			while ((st = __atomic_load_n(&sl->state, __ATOMIC_ACQUIRE)) !=
				       KF_STATE(seq, KF_DONE) &&
			       now_ns() < until)
				;
			if (st != KF_STATE(seq, KF_DONE)) {
				failed += cnt;
				continue;
			}
		}
		const __s64 *status = (const __s64 *)(k->map[M_STATUS] +
						      (size_t)slot * KF_SLICE_MAX * sizeof(__s64));

		for (uint32_t i = 0; i < cnt; i++)
			failed += status[i] != 0;
	}
	return failed;
}
