/* SPDX-License-Identifier: MIT */
/*
 * A signal handler that sends. A timer fires every 50 us; its handler sends the next message
 * to the last subscriber, while the main loop sends to all the others, so the signal often
 * lands while the main thread is inside the shim (holding its batch lock, half way through an
 * append). The shim must neither deadlock nor lose, duplicate or reorder anything.
 */
#include <signal.h>
#include <sys/time.h>

#include "shimtest.h"

static struct st_args a;
static int fd;
static volatile sig_atomic_t handler_seq; /* last message the handler sent */
static volatile sig_atomic_t stop;

static void on_alarm(int sig)
{
	int saved = errno;
	(void)sig;
	if (!stop && (uint64_t)handler_seq < a.m) {
		st_send(fd, &a, (uint64_t)handler_seq + 1, a.n - 1, true);
		handler_seq = handler_seq + 1;
	}
	errno = saved;
}

int main(int argc, char **argv)
{
	st_args(argc, argv, &a);
	if (a.n < 2)
		st_die("needs at least 2 subscribers");
	fd = st_udp();

	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { .it_interval = { 0, 50 }, .it_value = { 0, 50 } };
	setitimer(ITIMER_REAL, &it, NULL);

	for (uint64_t seq = 1; seq <= a.m; seq++)
		for (uint32_t i = 0; i + 1 < a.n; i++)
			st_send(fd, &a, seq, i, true);
	/* Let the handler finish its share; pause() is no call the shim sees. */
	while ((uint64_t)handler_seq < a.m)
		pause();
	stop = 1;
	it = (struct itimerval){ 0 };
	setitimer(ITIMER_REAL, &it, NULL);
	printf("sigsend: main sent %llu x %u, the handler %llu\n", (unsigned long long)a.m, a.n - 1,
	       (unsigned long long)handler_seq);
	return 0;
}
