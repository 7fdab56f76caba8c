/* SPDX-License-Identifier: MIT */
/*
 * The only door from the library to the kernel's send calls. Backends call through this table;
 * unit tests replace its entries with fakes, and the preload shim points them at the next
 * definitions in the link chain so that the library's own sends never re-enter the shim.
 * (io_uring goes through liburing, which makes its system calls directly.) The live-counter
 * file's SIGBUS handler (lib/obs/shm.c) is set through it too: the shim's sigaction wrapper
 * shows the program its own handler instead.
 */
#ifndef MS_SYS_H
#define MS_SYS_H

#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>

struct ms__sys {
	ssize_t (*sendto)(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *addr, socklen_t addrlen);
	ssize_t (*sendmsg)(int fd, const struct msghdr *msg, int flags);
	int (*sendmmsg)(int fd, struct mmsghdr *msgs, unsigned int vlen, int flags);
	int (*sigaction)(int sig, const struct sigaction *act, struct sigaction *old);
};

extern struct ms__sys ms__sys;

/* Put back the libc functions (for tests that installed fakes). */
void ms__sys_reset(void);

#endif
