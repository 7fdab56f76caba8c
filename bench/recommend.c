/* SPDX-License-Identifier: MIT */
/* The capacity recommendation's rule (recommend.h): nothing here reads a clock or a socket. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "recommend.h"

bool rec_within_noise(uint64_t a, uint64_t b, double sa, double sb)
{
	double hi = (double)(a > b ? a : b), lo = (double)(a > b ? b : a);
	double noise = sa > sb ? sa : sb;

	if (!(noise >= 0))
		noise = 0;
	return hi == lo || hi - lo <= noise * hi;
}

/* Whether row i goes before row j among tied rows: the rule's order. */
static bool before(const struct rec_row *rows, unsigned i, unsigned j, bool by_p99)
{
	const struct rec_row *a = &rows[i], *b = &rows[j];

	if (by_p99 && a->measured != b->measured)
		return a->measured;
	if (by_p99 && a->measured && a->p99_us != b->p99_us)
		return a->p99_us < b->p99_us;
	if (a->simplicity != b->simplicity)
		return a->simplicity < b->simplicity;
	return i < j;
}

void recommend(const struct rec_row *rows, unsigned n, bool by_p99, struct rec_result *out)
{
	int top = -1;

	memset(out, 0, sizeof(*out));
	out->best = -1;
	out->rule = REC_NONE;
	if (n > 64)
		n = 64;
	for (unsigned i = 0; i < n; i++)
		if (rows[i].eligible && rows[i].n && (top < 0 || rows[i].n > rows[top].n))
			top = (int)i;
	if (top < 0)
		return;
	for (unsigned i = 0; i < n; i++) {
		if (!rows[i].eligible || !rows[i].n ||
		    !rec_within_noise(rows[i].n, rows[top].n, rows[i].spread, rows[top].spread))
			continue;
		out->tied[i] = true;
		out->ntied++;
		if (rows[i].spread > out->noise)
			out->noise = rows[i].spread;
		if (out->best < 0 || before(rows, i, (unsigned)out->best, by_p99))
			out->best = (int)i;
	}
	if (out->ntied == 1)
		out->rule = REC_MOST;
	else if (by_p99 && rows[out->best].measured)
		out->rule = REC_TIE_P99;
	else
		out->rule = REC_TIE_SIMPLE;
}

const char *rec_rule_text(const struct rec_result *r, char *buf, size_t len)
{
	switch (r->rule) {
	case REC_NONE:
		snprintf(buf, len, "%s", "");
		break;
	case REC_MOST:
		snprintf(buf, len, "it serves the most subscribers, by more than this run's noise "
				   "(each backend's noise: its CPU min-max spread over rounds or its fit's "
				   "deviation, the larger)");
		break;
	case REC_TIE_P99:
		snprintf(buf, len, "%u backends are within this run's noise (%.0f%%: CPU min-max "
				   "spread over rounds or fit deviation, the larger) of the largest N, "
				   "which one run cannot tell apart; of those, the rule takes the lowest "
				   "measured p99 at its N",
			 r->ntied, r->noise * 100);
		break;
	case REC_TIE_SIMPLE:
		snprintf(buf, len, "%u backends are within this run's noise (%.0f%%: CPU min-max "
				   "spread over rounds or fit deviation, the larger) of the largest N, "
				   "which one run cannot tell apart; of those, the rule takes the simplest "
				   "(loop < sendmmsg < io_uring < xdp < kfanout < auto)",
			 r->ntied, r->noise * 100);
		break;
	}
	return buf;
}
