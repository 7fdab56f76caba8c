/* SPDX-License-Identifier: MIT */
/* What a reader needs to judge the numbers: kernel, CPU, cores, clock, load, versions. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static void cpu_info(struct env_info *e)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[1024];

	snprintf(e->cpu_model, sizeof(e->cpu_model), "unknown CPU");
	if (!f)
		return;
	bool model = false;

	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (!colon)
			continue;
		char *v = colon + 1;

		while (*v == ' ' || *v == '\t')
			v++;
		v[strcspn(v, "\n")] = 0;
		if (!model && (!strncmp(line, "model name", 10) || !strncmp(line, "Model", 5))) {
			snprintf(e->cpu_model, sizeof(e->cpu_model), "%s", v);
			model = true;
		}
		if (!strncmp(line, "flags", 5) && strstr(v, " hypervisor"))
			e->hypervisor = true;
	}
	fclose(f);
}

void loadavg_now(char *out, size_t len)
{
	char buf[128];

	out[0] = 0;
	if (!read_file("/proc/loadavg", buf, sizeof(buf))) {
		/* The first three fields: 1, 5 and 15 minute averages. */
		char *p = buf;

		for (int i = 0; i < 3 && (p = strchr(p + 1, ' ')); i++)
			;
		if (p)
			*p = 0;
		snprintf(out, len, "%s", buf);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Wall time of one read of the thread's CPU clock (a system call: no vDSO for CPU clocks). */
static double thread_clock_cost(void)
{
	double run[7];
	for (int r = 0; r < 7; r++) {
		struct timespec a, b, t;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int i = 0; i < 2000; i++)
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		clock_gettime(CLOCK_MONOTONIC, &b);
		run[r] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 2000;
	}
	qsort(run, 7, sizeof(run[0]), cmp_double);
	return run[3];
}

void env_collect(struct env_info *e)
{
	struct utsname u;
	cpu_set_t set;
	struct rlimit rl;

	memset(e, 0, sizeof(*e));
	if (!uname(&u)) {
		snprintf(e->kernel, sizeof(e->kernel), "%s %s %s %s", u.sysname, u.release, u.version,
			 u.machine);
		snprintf(e->host, sizeof(e->host), "%s", u.nodename);
	}
	cpu_info(e);
	e->cores_online = sysconf(_SC_NPROCESSORS_ONLN);
	e->cores_allowed = sched_getaffinity(0, sizeof(set), &set) ? e->cores_online
								   : CPU_COUNT(&set);
	if (read_file("/sys/devices/system/clocksource/clocksource0/current_clocksource",
		      e->clocksource, sizeof(e->clocksource)))
		snprintf(e->clocksource, sizeof(e->clocksource), "unknown");
	loadavg_now(e->loadavg, sizeof(e->loadavg));
	e->thread_clock_ns = thread_clock_cost();
	time_t t = time(NULL);
	struct tm tm;

	if (gmtime_r(&t, &tm))
		strftime(e->date, sizeof(e->date), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(e->lib_version, sizeof(e->lib_version), "%s", ms_version_string());
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		e->nofile = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
}
