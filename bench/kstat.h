/* SPDX-License-Identifier: MIT */
/*
 * The kernel's own drop counters, read in the network namespace of the calling thread: the
 * UDP MIB (/proc/thread-self/net/snmp) and, for one device, its transmit drops
 * (/proc/thread-self/net/dev). "thread-self" matters: the netns-drop sink moves only the
 * sending thread into its namespace, and /proc/self/net would show the main thread's.
 */
#ifndef BENCH_KSTAT_H
#define BENCH_KSTAT_H

#include <stdint.h>

struct kstat {
	uint64_t udp_out;          /* OutDatagrams */
	uint64_t udp_in_errors;    /* InErrors (includes RcvbufErrors and MemErrors) */
	uint64_t udp_rcvbuf_errors;
	uint64_t udp_sndbuf_errors;
	uint64_t udp_no_ports;
	uint64_t udp_mem_errors;
	uint64_t dev_tx_dropped;   /* of the device named at kstat_read, else 0 */
	uint64_t dev_tx_packets;   /* of that device: what it handed on (netns-xdp: to its peer) */
	/* Packets dropped because a CPU's input backlog was full (/proc/net/softnet_stat, second
	 * column, all CPUs). Machine-wide, whatever the namespace: loopback traffic passes through
	 * that backlog before any UDP socket or counter sees it, so this is the one place such a
	 * drop shows. */
	uint64_t softnet_dropped;
};

/* Read the counters; dev may be NULL. Returns 0 or -errno. */
int kstat_read(struct kstat *k, const char *dev);

/* after - before, field by field. */
void kstat_delta(const struct kstat *after, const struct kstat *before, struct kstat *d);

/* Datagrams the kernel dropped on the UDP paths: InErrors + SndbufErrors + NoPorts. */
uint64_t kstat_udp_drops(const struct kstat *d);

/*
 * CPU time of the ksoftirqd threads. Softirq work (the loopback receive path) normally runs in
 * the sending task and is charged to it, but under load the kernel defers it to ksoftirqd,
 * where the process's CPU clocks no longer see it. Measuring it says how much went missing.
 */
#define KSOFTIRQD_MAX 256
struct ksoftirqd {
	int pid[KSOFTIRQD_MAX];
	unsigned n;
};
/* Find the ksoftirqd threads (once). */
void ksoftirqd_find(struct ksoftirqd *k);
/* Their total CPU time so far, in ns (from /proc/<pid>/schedstat). */
uint64_t ksoftirqd_ns(const struct ksoftirqd *k);

#endif
