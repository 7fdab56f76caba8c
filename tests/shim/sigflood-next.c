/* SPDX-License-Identifier: MIT */
/*
 * For the sigflood test only: a library preloaded AFTER the shim, so that the shim's "real"
 * sendmmsg (dlsym RTLD_NEXT) is this one. On the program's main thread it raises SIGUSR1 before
 * each sendmmsg: the program's handler then runs while its thread is inside the shim, half way
 * through a flush, which is the moment a handler's sends must queue behind the batch.
 */
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

__attribute__((visibility("default"))) int sendmmsg(int fd, struct mmsghdr *v, unsigned int n,
						    int flags);
int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	static int (*next)(int, struct mmsghdr *, unsigned int, int);

	if (!next)
		next = (int (*)(int, struct mmsghdr *, unsigned int, int))dlsym(RTLD_NEXT,
										 "sendmmsg");
	if (syscall(SYS_gettid) == getpid())
		raise(SIGUSR1);
	return next(fd, v, n, flags);
}
