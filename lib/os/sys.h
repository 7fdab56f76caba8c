/* SPDX-License-Identifier: MIT */
/*
 * The only door from the library to the kernel's send calls. Backends call through this table;
 * unit tests replace its entries with fakes, and the preload shim points them at the next
 * definitions in the link chain so that the library's own sends never re-enter the shim.
 * (io_uring goes through liburing, which makes its system calls directly.)
 */
#ifndef MS_SYS_H
#define MS_SYS_H

#include <sys/socket.h>
#include <sys/types.h>

struct ms__sys {
	ssize_t (*sendto)(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t addrlen);
	ssize_t (*sendmsg)(int fd, const struct msghdr *msg, int flags);
	int (*sendmmsg)(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags);
};

extern struct ms__sys ms__sys;

/* Put back the libc functions (for tests that installed fakes). */
void ms__sys_reset(void);

#endif
