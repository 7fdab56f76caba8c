/* SPDX-License-Identifier: MIT */
/*
 * A signal handler that sends far more than the shim's signal ring holds while its thread is
 * inside the shim. libshim-sigflood-next.so (preloaded after the shim: this program re-executes
 * itself to put it there) raises SIGUSR1 inside the shim's flush; the handler then sends the
 * next FLOOD messages to the last subscriber at once. The batch may hold earlier messages for
 * that socket, so none of them may go straight to the kernel: all must wait behind the batch,
 * in order, however many there are. The main loop sends to all the other subscribers.
 *
 *   shim-sigflood PORT N M NEXT_LIBRARY
 */
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#include "shimtest.h"

#define FLOOD 200u

static struct st_args a;
static int fd;
static volatile uint64_t main_seq;   /* the fan-out the main loop is in */
static volatile uint64_t flooded_at; /* the fan-out of the last flood */
static volatile uint64_t handler_seq; /* last message sent to the last subscriber */
static volatile unsigned floods;

static void on_usr1(int sig)
{
	int saved = errno;
	(void)sig;
	/* One flood every FLOOD fan-outs, the last one during the last fan-out, so that the
	 * age flusher (not a later send of the main loop) has to move it. */
	if (main_seq % FLOOD == 0 && flooded_at != main_seq && handler_seq < a.m) {
		flooded_at = main_seq;
		for (unsigned k = 0; k < FLOOD && handler_seq < a.m; k++) {
			st_send(fd, &a, handler_seq + 1, a.n - 1, true);
			handler_seq = handler_seq + 1;
		}
		floods = floods + 1;
	}
	errno = saved;
}

int main(int argc, char **argv)
{
	int x = st_args(argc, argv, &a);
	if (a.n < 2 || argc <= x)
		st_die("usage: shim-sigflood PORT N(>=2) M NEXT_LIBRARY");
	const char *next = argv[x], *pre = getenv("LD_PRELOAD");
	if (!pre || !strstr(pre, next)) {
		char buf[4096];
		snprintf(buf, sizeof(buf), "%s %s", pre ? pre : "", next);
		setenv("LD_PRELOAD", buf, 1);
		execv("/proc/self/exe", argv);
		st_die("execv: %s", strerror(errno));
	}
	fd = st_udp();
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);

	for (uint64_t seq = 1; seq <= a.m; seq++) {
		main_seq = seq;
		for (uint32_t i = 0; i + 1 < a.n; i++)
			st_send(fd, &a, seq, i, true);
	}
	/* A sleep the shim does not see: only its age flusher can move the last flood. */
	struct timespec ts = { 0, 200000000 };
	syscall(SYS_nanosleep, &ts, NULL);
	unsigned f = floods;
	/* Whatever no flood carried (a flush that did not use sendmmsg) is sent here. */
	while (handler_seq < a.m) {
		st_send(fd, &a, handler_seq + 1, a.n - 1, true);
		handler_seq = handler_seq + 1;
	}
	printf("sigflood: main sent %llu x %u, %u floods of up to %u from the handler\n",
	       (unsigned long long)a.m, a.n - 1, f, FLOOD);
	return 0;
}
