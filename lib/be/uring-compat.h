/* SPDX-License-Identifier: MIT */
/*
 * What liburing 2.3 (Debian 12) lacks, in one place. Everything here is detected at run time
 * by its caller; nothing assumes the running kernel matches the headers.
 */
#ifndef MS_URING_COMPAT_H
#define MS_URING_COMPAT_H

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <liburing.h>

/* liburing 2.3 declares io_uring_enable_rings but does not export it from the shared library. */
static inline int ms__uring_enable_rings(struct io_uring *ring)
{
	long r = syscall(__NR_io_uring_register, ring->ring_fd, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
	return r < 0 ? -errno : 0;
}

/* SEND_ZC's notification reports whether the kernel copied the data after all (Linux 6.2);
 * liburing 2.3 lacks both names. */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

#endif
