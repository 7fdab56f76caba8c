/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fake-sys.h"
#include "sys.h"

#define FAKE_MAX_FD 4096
#define FAKE_UIO_MAXIOV 1024 /* the kernel's clamp of sendmmsg's vlen */

struct fake_kernel fk;

/* handle + 1, 0: none */
static int by_port[65536];
static int peer_of_fd[FAKE_MAX_FD];

/* ---- destinations ------------------------------------------------------------------------- */

static bool same_addr(const struct fake_dest *d, const struct sockaddr *a, socklen_t len)
{
	return d->addrlen == len && memcmp(&d->addr, a, len) == 0;
}

static struct fake_dest *lookup(int fd, const struct sockaddr *a, socklen_t len)
{
	struct fake_dest *d = NULL;
	if (!a) {
		if (fd >= 0 && fd < FAKE_MAX_FD && peer_of_fd[fd])
			d = &fk.d[peer_of_fd[fd] - 1];
		return d && d->fd == fd ? d : NULL;
	}
	if (a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		int h = by_port[ntohs(((const struct sockaddr_in *)a)->sin_port)];
		if (h)
			d = &fk.d[h - 1];
	} else {
		for (size_t i = 0; i < fk.n && !d; i++)
			if (fk.d[i].addrlen && same_addr(&fk.d[i], a, len))
				d = &fk.d[i];
	}
	return d && d->fd == fd && same_addr(d, a, len) ? d : NULL;
}

int fake_add(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	if (fk.n == fk.cap) {
		fk.cap = fk.cap ? fk.cap * 2 : 256;
		fk.d = realloc(fk.d, fk.cap * sizeof(*fk.d));
		assert_non_null(fk.d);
	}
	int h = (int)fk.n++;
	struct fake_dest *d = &fk.d[h];
	memset(d, 0, sizeof(*d));
	d->fd = fd;
	d->accept_bytes = -1;
	d->first_seq = -1;
	if (addr) {
		assert_true(addrlen > 0 && addrlen <= sizeof(d->addr));
		memcpy(&d->addr, addr, addrlen);
		d->addrlen = addrlen;
		if (addr->sa_family == AF_INET) {
			uint16_t port = ntohs(((const struct sockaddr_in *)addr)->sin_port);
			assert_int_equal(by_port[port], 0); /* one destination per port */
			by_port[port] = h + 1;
		}
	} else {
		assert_true(fd >= 0 && fd < FAKE_MAX_FD);
		assert_int_equal(peer_of_fd[fd], 0);
		peer_of_fd[fd] = h + 1;
	}
	return h;
}

void fake_fail(int h, int err, int times)
{
	fk.d[h].fail_errno = err;
	fk.d[h].fail_left = times;
}

void fake_accept_bytes(int h, long bytes)
{
	fk.d[h].accept_bytes = bytes;
}

void fake_clear_scripts(void)
{
	for (size_t i = 0; i < fk.n; i++) {
		fk.d[i].fail_errno = 0;
		fk.d[i].fail_left = 0;
		fk.d[i].accept_bytes = -1;
	}
	fk.caps = NULL;
	fk.ncaps = 0;
	fk.cap_every = 0;
}

void fake_new_round(void)
{
	for (size_t i = 0; i < fk.n; i++) {
		fk.d[i].attempts = 0;
		fk.d[i].delivered = 0;
		fk.d[i].first_seq = -1;
	}
	fk.sendto_calls = fk.sendmsg_calls = fk.sendmmsg_calls = 0;
	fk.ncalls = 0;
	fk.max_vlen = 0;
	fk.strays = fk.bad_headers = fk.bad_payloads = fk.bad_flags = 0;
	fk.next_seq = 0;
}

unsigned fake_syscalls(void)
{
	return fk.sendto_calls + fk.sendmsg_calls + fk.sendmmsg_calls;
}

/* ---- one message through the fake kernel --------------------------------------------------- */

/* Bytes accepted, or -errno. */
static long deliver(int fd, const struct sockaddr *a, socklen_t alen, size_t len)
{
	struct fake_dest *d = lookup(fd, a, alen);
	if (!d) {
		fk.strays++;
		return (long)len;
	}
	d->attempts++;
	if (d->first_seq < 0)
		d->first_seq = fk.next_seq++;
	if (d->fail_left) {
		if (d->fail_left > 0)
			d->fail_left--;
		return -d->fail_errno;
	}
	d->delivered++;
	if (d->accept_bytes >= 0 && (size_t)d->accept_bytes < len)
		return d->accept_bytes;
	return (long)len;
}

static void check_flags(int flags)
{
	if (flags != fk.expect_flags)
		fk.bad_flags++;
}

/* A flat buffer against the expected message (its iovecs concatenated). */
static void check_flat(const void *buf, size_t len)
{
	if (!fk.expect_iov)
		return;
	const unsigned char *p = buf;
	size_t off = 0;
	for (int k = 0; k < fk.expect_iovcnt; k++) {
		size_t l = fk.expect_iov[k].iov_len;
		if (off + l > len || (l && memcmp(p + off, fk.expect_iov[k].iov_base, l))) {
			fk.bad_payloads++;
			return;
		}
		off += l;
	}
	if (off != len)
		fk.bad_payloads++;
}

/* A message header: no control data, a consistent name, and exactly the expected iovecs. */
static size_t check_msghdr(const struct msghdr *m)
{
	size_t len = 0;
	if (m->msg_control || m->msg_controllen || (!m->msg_name && m->msg_namelen) ||
	    (m->msg_name && !m->msg_namelen) || (m->msg_iovlen && !m->msg_iov))
		fk.bad_headers++;
	for (size_t k = 0; k < m->msg_iovlen; k++)
		len += m->msg_iov[k].iov_len;
	if (!fk.expect_iov)
		return len;
	if (m->msg_iovlen != (size_t)fk.expect_iovcnt) {
		fk.bad_payloads++;
		return len;
	}
	for (int k = 0; k < fk.expect_iovcnt; k++) {
		size_t l = fk.expect_iov[k].iov_len;
		if (m->msg_iov[k].iov_len != l ||
		    (l && memcmp(m->msg_iov[k].iov_base, fk.expect_iov[k].iov_base, l))) {
			fk.bad_payloads++;
			break;
		}
	}
	return len;
}

/* ---- the fakes ---------------------------------------------------------------------------- */

static ssize_t fake_sendto(int fd, const void *buf, size_t len, int flags,
			   const struct sockaddr *addr, socklen_t addrlen)
{
	fk.sendto_calls++;
	check_flags(flags);
	if (!addr && addrlen)
		fk.bad_headers++;
	check_flat(buf, len);
	long r = deliver(fd, addr, addr ? addrlen : 0, len);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static ssize_t fake_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	fk.sendmsg_calls++;
	check_flags(flags);
	size_t len = check_msghdr(msg);
	long r = deliver(fd, msg->msg_name, msg->msg_namelen, len);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static int fake_sendmmsg(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags)
{
	unsigned call = fk.sendmmsg_calls++;
	if (fk.ncalls == fk.capcalls) {
		fk.capcalls = fk.capcalls ? fk.capcalls * 2 : 64;
		fk.calls = realloc(fk.calls, fk.capcalls * sizeof(*fk.calls));
		assert_non_null(fk.calls);
	}
	struct fake_mmsg_call *log = &fk.calls[fk.ncalls++];
	log->fd = fd;
	log->vlen = vlen;
	log->flags = flags;
	if (vlen > fk.max_vlen)
		fk.max_vlen = vlen;
	check_flags(flags);

	unsigned n = vlen > FAKE_UIO_MAXIOV ? FAKE_UIO_MAXIOV : vlen;
	unsigned cap = call < fk.ncaps ? fk.caps[call] : fk.cap_every;
	unsigned sent = 0;
	int err = 0;
	for (unsigned i = 0; i < n && !(cap && sent == cap); i++) {
		size_t len = check_msghdr(&msgs[i].msg_hdr);
		long r = deliver(fd, msgs[i].msg_hdr.msg_name, msgs[i].msg_hdr.msg_namelen, len);
		if (r < 0) {
			err = (int)-r;
			break;
		}
		msgs[i].msg_len = (unsigned)r;
		sent++;
	}
	for (unsigned i = sent; i < vlen; i++)
		msgs[i].msg_len = FAKE_MSG_LEN_POISON;
	if (err && !sent) {
		log->ret = -1;
		errno = err;
		return -1;
	}
	log->ret = (int)sent;
	return (int)sent;
}

/* ---- installation ------------------------------------------------------------------------- */

void fake_install(void)
{
	free(fk.d);
	free(fk.calls);
	memset(&fk, 0, sizeof(fk));
	memset(by_port, 0, sizeof(by_port));
	memset(peer_of_fd, 0, sizeof(peer_of_fd));
	fk.expect_flags = MSG_NOSIGNAL;
	ms__sys.sendto = fake_sendto;
	ms__sys.sendmsg = fake_sendmsg;
	ms__sys.sendmmsg = fake_sendmmsg;
}

void fake_uninstall(void)
{
	ms__sys_reset();
	free(fk.d);
	free(fk.calls);
	memset(&fk, 0, sizeof(fk));
}
