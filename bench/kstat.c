/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kstat.h"

/* /proc/net/snmp has pairs of lines: "Udp: Name1 Name2 ..." then "Udp: v1 v2 ...". Fields are
 * found by name, since kernels append new ones. */
static int read_udp(struct kstat *k)
{
	FILE *f = fopen("/proc/thread-self/net/snmp", "re");
	char names[1024], values[1024];
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(names, sizeof(names), f)) {
		if (strncmp(names, "Udp:", 4))
			continue;
		if (!fgets(values, sizeof(values), f))
			break;
		char *sn, *sv;
		char *n = strtok_r(names + 4, " \n", &sn);
		char *v = strtok_r(values + 4, " \n", &sv);

		for (; n && v; n = strtok_r(NULL, " \n", &sn), v = strtok_r(NULL, " \n", &sv)) {
			uint64_t x = strtoull(v, NULL, 10);

			if (!strcmp(n, "OutDatagrams"))
				k->udp_out = x;
			else if (!strcmp(n, "InErrors"))
				k->udp_in_errors = x;
			else if (!strcmp(n, "RcvbufErrors"))
				k->udp_rcvbuf_errors = x;
			else if (!strcmp(n, "SndbufErrors"))
				k->udp_sndbuf_errors = x;
			else if (!strcmp(n, "NoPorts"))
				k->udp_no_ports = x;
			else if (!strcmp(n, "MemErrors"))
				k->udp_mem_errors = x;
		}
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

/* /proc/net/dev: "  name: rx_bytes rx_packets rx_errs rx_drop ... (8 rx fields) tx_bytes
 * tx_packets tx_errs tx_drop ...": tx_drop is the 12th number. */
static int read_dev(struct kstat *k, const char *dev)
{
	FILE *f = fopen("/proc/thread-self/net/dev", "re");
	char line[512];
	int err = -ENODEV;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		char *name = line;

		if (!colon)
			continue;
		*colon = 0;
		while (*name == ' ')
			name++;
		if (strcmp(name, dev))
			continue;
		uint64_t v[12];
		char *p = colon + 1;
		int i;

		for (i = 0; i < 12; i++) {
			char *end;

			v[i] = strtoull(p, &end, 10);
			if (end == p)
				break;
			p = end;
		}
		if (i == 12) {
			k->dev_tx_dropped = v[11];
			k->dev_tx_packets = v[9];
			err = 0;
		}
		break;
	}
	fclose(f);
	return err;
}

/* /proc/net/softnet_stat: one line per CPU of hexadecimal columns; the second is "dropped". */
static void read_softnet(struct kstat *k)
{
	FILE *f = fopen("/proc/net/softnet_stat", "re");
	char line[512];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long processed, dropped;

		if (sscanf(line, "%llx %llx", &processed, &dropped) == 2)
			k->softnet_dropped += dropped;
	}
	fclose(f);
}

int kstat_read(struct kstat *k, const char *dev)
{
	memset(k, 0, sizeof(*k));
	int err = read_udp(k);

	read_softnet(k);
	if (!err && dev)
		err = read_dev(k, dev);
	return err;
}

void kstat_delta(const struct kstat *a, const struct kstat *b, struct kstat *d)
{
	d->udp_out = a->udp_out - b->udp_out;
	d->udp_in_errors = a->udp_in_errors - b->udp_in_errors;
	d->udp_rcvbuf_errors = a->udp_rcvbuf_errors - b->udp_rcvbuf_errors;
	d->udp_sndbuf_errors = a->udp_sndbuf_errors - b->udp_sndbuf_errors;
	d->udp_no_ports = a->udp_no_ports - b->udp_no_ports;
	d->udp_mem_errors = a->udp_mem_errors - b->udp_mem_errors;
	d->dev_tx_dropped = a->dev_tx_dropped - b->dev_tx_dropped;
	d->dev_tx_packets = a->dev_tx_packets - b->dev_tx_packets;
	d->softnet_dropped = a->softnet_dropped - b->softnet_dropped;
}

void ksoftirqd_find(struct ksoftirqd *k)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	k->n = 0;
	if (!d)
		return;
	while ((e = readdir(d)) && k->n < KSOFTIRQD_MAX) {
		char path[300], comm[64];
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		FILE *f;

		if (*end || pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		if (!(f = fopen(path, "re")))
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "ksoftirqd/", 10))
			k->pid[k->n++] = (int)pid;
		fclose(f);
	}
	closedir(d);
}

uint64_t ksoftirqd_ns(const struct ksoftirqd *k)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < k->n; i++) {
		char path[64];
		unsigned long long ns;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/schedstat", k->pid[i]);
		if (!(f = fopen(path, "re")))
			continue;
		if (fscanf(f, "%llu", &ns) == 1)
			sum += ns;
		fclose(f);
	}
	return sum;
}

uint64_t kstat_udp_drops(const struct kstat *d)
{
	return d->udp_in_errors + d->udp_sndbuf_errors + d->udp_no_ports;
}
