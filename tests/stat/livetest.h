/* SPDX-License-Identifier: MIT */
/*
 * What the live-counter file's test programs (livefile.c, liveedge.c) share: the failure
 * macro, a loopback receiver, the lock test and a few sends. Each program defines
 * LIVETEST_NAME before including this, and sets `mode` to the mode it runs.
 */
#ifndef LIVETEST_H
#define LIVETEST_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <multisend.h>

static const char *mode = "";

#define CHECK(c, ...)                                                                  \
	do {                                                                           \
		if (!(c)) {                                                            \
			fprintf(stderr, LIVETEST_NAME " %s: FAIL: %s (line %d): ", mode, \
				#c, __LINE__);                                         \
			fprintf(stderr, __VA_ARGS__);                                  \
			fputc('\n', stderr);                                           \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

/* A UDP receiver on 127.0.0.1 (an ephemeral port) and its address. */
static inline int receiver(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)a, sizeof(*a)) == 0 &&
		      getsockname(fd, (struct sockaddr *)a, &len) == 0,
	      "receiver: %s", strerror(errno));
	int big = 1 << 22;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	return fd;
}

/* Does an open file description hold a write lock on path? */
static inline bool write_locked(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
	CHECK(fcntl(fd, F_OFD_GETLK, &l) == 0, "F_OFD_GETLK: %s", strerror(errno));
	close(fd);
	return l.l_type != F_UNLCK;
}

static inline void send_n(struct ms_group *g, int n)
{
	for (int k = 0; k < n; k++)
		CHECK(ms_send(g, "live", 4, 0, NULL) == 1, "ms_send");
}

#endif
