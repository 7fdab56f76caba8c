/* SPDX-License-Identifier: MIT */
/*
 * The setuid case. ld.so ignores LD_PRELOAD for a set-user-ID program (unless the library is
 * in a trusted directory and itself set-user-ID), so what can be shown is what the shim does
 * if it is loaded into such a process anyway: this program, installed set-user-ID by the
 * driver and run by an unprivileged user (AT_SECURE set), dlopen()s the shim and sends
 * through it. The shim must ignore every MULTISEND_* variable (secure_getenv): its report goes
 * to stderr, says the environment was ignored, and the mode is the default, metrics.
 * Exit 77 when AT_SECURE is not set (a nosuid mount, say): nothing to show then.
 */
#include <dlfcn.h>
#include <sys/auxv.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: setuid-probe SHIM\n");
		return 2;
	}
	if (!getauxval(AT_SECURE)) {
		printf("setuid-probe: AT_SECURE is not set: skipped\n");
		return 77;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h)
		st_die("dlopen %s: %s", argv[1], dlerror());
	ssize_t (*shim_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t) =
		(ssize_t (*)(int, const void *, size_t, int, const struct sockaddr *, socklen_t))
			dlsym(h, "sendto");
	if (!shim_sendto)
		st_die("no sendto in the shim");
	int rx = st_udp(), tx = st_udp();
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(to);
	if (bind(rx, (struct sockaddr *)&to, sizeof(to)) || getsockname(rx, (struct sockaddr *)&to, &l))
		st_die("bind: %s", strerror(errno));
	for (int k = 0; k < 10; k++)
		if (shim_sendto(tx, "probe", 5, 0, (struct sockaddr *)&to, sizeof(to)) != 5)
			st_die("sendto through the shim: %s", strerror(errno));
	char buf[16];
	for (int k = 0; k < 10; k++)
		if (recv(rx, buf, sizeof(buf), 0) != 5)
			st_die("recv: %s", strerror(errno));
	printf("setuid-probe: AT_SECURE, 10 datagrams through the shim\n");
	return 0; /* the shim reports at exit */
}
