/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: multisend-bench's command line (bench/cli.c's parse_args, with the rest of the
 * bench linked in as the binary has it).
 *
 * Input: the arguments after the program name, separated by NUL bytes (an argument cannot
 * hold one; the last needs no terminator), at most 256 of them.
 *
 * Checks, for every input: no crash or sanitizer report; parse_args returns 0, 1 (--help,
 * --version) or -EINVAL, and never exits the process (bad usage is the caller's to act on);
 * on 0 the options hold what main relies on: the interleaving order is non-empty, of known
 * variants, without repeats, and has each variant kind only with the option that asks for
 * it; every list is within MAX_LIST and its documented range; the sink agrees with --tcp and
 * --sink deliver's minimum size; every variant has a printable name; and parsing the same
 * arguments again gives the same result (no state kept from one call to the next).
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "sink.h"

#define CHECK(c)                                                                              \
	do {                                                                                  \
		if (!(c)) {                                                                   \
			fprintf(real_stderr, "fuzz-bench-cli: check failed: %s (line %d)\n", #c, \
				__LINE__);                                                    \
			abort();                                                              \
		}                                                                             \
	} while (0)

enum { MAXARGS = 256 };

static FILE *real_stderr;

/* parse_args with stdout and stderr sent to /dev/null (usage and error messages, millions of
 * them); sanitizer reports write to descriptor 2 directly and are still seen. */
static int parse_quiet(int argc, char **argv, struct opts *o)
{
	static FILE *null;
	FILE *out = stdout, *err = stderr;

	if (!null)
		null = fopen("/dev/null", "w");
	if (null)
		stdout = stderr = null;
	int rc = parse_args(argc, argv, o);
	stdout = out;
	stderr = err;
	return rc;
}

static bool in_list(const uint64_t *v, unsigned n, uint64_t lo, uint64_t hi)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] < lo || v[i] > hi)
			return false;
	return true;
}

static void check_opts(const struct opts *o)
{
	bool seen[V_COUNT] = { false }, io_uring_zc = false;

	CHECK(o->modes && !(o->modes & ~(unsigned)(MODE_COMPARE | MODE_SWEEP | MODE_LATENCY |
						   MODE_CAPACITY)));
	CHECK(o->nvariants >= 1 && o->nvariants <= V_COUNT);
	for (unsigned i = 0; i < o->nvariants; i++) {
		enum variant_id v = o->order[i];

		CHECK((unsigned)v < V_COUNT);
		CHECK(!seen[v]);
		seen[v] = true;
		CHECK(!variant_is_ts(v) || o->ts_sample);
		CHECK(!variant_is_dw(v) || o->compare_dw);
		CHECK(!variant_is_rot(v) || o->compare_rot);
		CHECK(!variant_is_conn(v) || o->compare_conn);
		CHECK(!variant_is_off(v) || o->compare_off);
		CHECK(!variant_is_zc(v) || (o->compare_zc && v == V_IO_URING_ZC));
		CHECK(!variant_is_w(v) || o->compare_workers);
		CHECK(!variant_is_w_ts(v) || o->ts_sample);
		io_uring_zc |= v == V_IO_URING_ZC;
		const char *name = variant_name(v);
		CHECK(name && *name && strcmp(name, "?") && strlen(name) < 40);
	}
	CHECK(!o->compare_zc || io_uring_zc);
	CHECK(o->nfanouts <= MAX_LIST && in_list(o->fanouts, o->nfanouts, 1, 1000000));
	CHECK(o->nsizes <= MAX_LIST && in_list(o->sizes, o->nsizes, 1, 65507));
	CHECK(o->nrates <= MAX_LIST && in_list(o->rates, o->nrates, 1, 100000000));
	CHECK(o->ncpus <= MAX_LIST);
	for (unsigned i = 0; i < o->ncpus; i++)
		CHECK(o->cpus[i] >= 0 && o->cpus[i] < CPU_SETSIZE);
	CHECK(o->cpu >= -1 && o->cpu < CPU_SETSIZE);
	CHECK(o->rounds <= MAX_ROUNDS);
	CHECK(o->workers <= 64 && (o->compare_workers == 0 || o->compare_workers >= 2));
	CHECK(o->compare_workers <= 64);
	CHECK(o->cpu_budget > 0 && o->cpu_budget <= 1);
	CHECK(o->duration == 0 || (o->duration >= 0.1 && o->duration <= 86400));
	CHECK(!o->mtu || (o->sink == SINK_NETNS_DROP && o->mtu >= 68 && o->mtu <= 65535));
	CHECK(!o->tcp || (o->sink == SINK_TCP && o->connected));
	CHECK(o->sink != SINK_TCP || o->tcp);
	CHECK(!o->verify_payload || o->sink == SINK_DELIVER);
	/* AUTO and background load: the ranges and dependencies --help states. */
	CHECK(o->auto_warmup >= 0 && o->auto_warmup <= 3600);
	CHECK(o->bg_load <= 64);
	CHECK(!o->load_from_given || o->bg_load);
	CHECK(o->load_from >= 0);
	CHECK(o->timeline == 0 || (o->timeline >= 1 && o->timeline <= 86400));
	if (o->sink == SINK_DELIVER)
		CHECK(in_list(o->sizes, o->nsizes, sizeof(struct msg_head), 65507));
	CHECK(!(o->dontwait && o->compare_dw) && !(o->rotate && o->compare_rot));
	CHECK(!(o->offload && o->compare_off) && !(o->workers && o->compare_workers));
	CHECK(!o->callgrind_out || o->callgrind);
	CHECK(!(o->callgrind && o->cg_child));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	char *argv[MAXARGS + 2], *again[MAXARGS + 2];
	int argc = 0;
	struct opts o1, o2;

	if (!real_stderr)
		real_stderr = stderr;
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[argc++] = "multisend-bench";
	for (size_t i = 0; i < size && argc <= MAXARGS;) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	argv[argc] = NULL;
	/* getopt_long permutes argv: the second run gets the same arguments in their order. */
	memcpy(again, argv, sizeof(argv));

	int rc = parse_quiet(argc, argv, &o1);
	CHECK(rc == 0 || rc == 1 || rc == -EINVAL);
	if (rc == 0) {
		variants_name(&o1);
		check_opts(&o1);
	}
	int rc2 = parse_quiet(argc, again, &o2);
	CHECK(rc2 == rc);
	if (rc == 0) {
		CHECK(o1.modes == o2.modes && o1.nvariants == o2.nvariants && o1.sink == o2.sink);
		CHECK(!memcmp(o1.order, o2.order, o1.nvariants * sizeof(o1.order[0])));
		CHECK(o1.nfanouts == o2.nfanouts && o1.nsizes == o2.nsizes && o1.nrates == o2.nrates);
	}
	free(buf);
	return 0;
}
