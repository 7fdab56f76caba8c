/* SPDX-License-Identifier: MIT */
/*
 * sendmmsg(2) exactly once per message: the step the sendmmsg backend and the preload shim's
 * flush both loop on, and the loop's rule.
 *
 * The kernel returns how many messages went out and reports an error only when the FIRST
 * message of the call failed. So the caller sends from its first unsent message on, and each
 * step (one system call) either sends some messages (> 0: the first that many went out,
 * msg_len says how much of each) or fails for that first message alone (-errno): the caller
 * records the error for it and moves past it, except -EINTR (nothing was sent: step again) and,
 * if it chooses, -EAGAIN after waiting for room. A message is sent again only when the kernel
 * said it was not sent: nothing goes twice, nothing is skipped. A return the kernel cannot give
 * (0, or more than asked) blames only the message we cannot vouch for (-EIO). At most
 * MS__MMSG_MAX messages per call.
 *
 *	for (uint32_t off = 0; off < n;) {
 *		calls++;
 *		int r = ms__sendmmsg_step(fd, m + off, n - off, flags);
 *		if (r > 0) { ...messages [off, off + r) sent...; off += r; }
 *		else if (r != -EINTR) { ...message off failed with r...; off++; }
 *	}
 */
#ifndef MS_MMSG_H
#define MS_MMSG_H

#include <errno.h>
#include <stdint.h>

#include "sys.h"

#ifndef MS__MMSG_MAX
#define MS__MMSG_MAX 1024u /* UIO_MAXIOV: the kernel's limit per sendmmsg call */
#endif

static inline int ms__sendmmsg_step(int fd, struct mmsghdr *m, uint32_t n, int flags)
{
	if (n > MS__MMSG_MAX)
		n = MS__MMSG_MAX;
	int r = ms__sys.sendmmsg(fd, m, n, flags);
	if (__builtin_expect(r > 0 && (uint32_t)r <= n, 1))
		return r;
	return r < 0 ? -errno : -EIO;
}

#endif
