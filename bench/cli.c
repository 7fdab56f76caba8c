/* SPDX-License-Identifier: MIT */
/* The command line: --help, parsing, and validation. Bad usage returns -EINVAL with a message
 * (main exits 2); parse_args never exits, and can be called again (tests/fuzz/fuzz-bench-cli). */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "sink.h"

static void usage(FILE *f)
{
	fputs("Usage: multisend-bench [OPTION]...\n"
	      "Measure libmultisend's backends side by side against a plain sendto loop, and plan\n"
	      "capacity. With no options: the default comparison (about one minute).\n"
	      "\n"
	      "What to run:\n"
	      "  -m, --mode LIST        compare (default), sweep, latency, capacity, or all (= sweep,\n"
	      "                         latency, capacity); a comma-separated list runs each, in the\n"
	      "                         order compare, sweep, latency, capacity\n"
	      "                           compare   every backend at fan-outs 1,16,256,1024 and\n"
	      "                                     sizes 64,512 B\n"
	      "                           sweep     a fan-out x size grid (1..1024 x 64..1472 B),\n"
	      "                                     with the fit cost per fan-out = a + b*N\n"
	      "                           latency   a fixed offered rate; each call's latency from\n"
	      "                                     its scheduled start (p50..p99.99, max)\n"
	      "                           capacity  the largest fan-out per core for --rate,\n"
	      "                                     --size, --cpu-budget, --p99-bound\n"
	      "  -b, --backends LIST    raw-sendto,raw-sendmmsg,raw-io_uring,loop,sendmmsg,io_uring,\n"
	      "                         auto, xdp, raw-xdp, kfanout, raw-kfanout, raw-sendto+hook,\n"
	      "                         auto+kfanout, or all (raw-sendto to io_uring);\n"
	      "                         runs interleave in this order.\n"
	      "                         Default: raw-sendto\n"
	      "                         and every available library backend (--callgrind: all).\n"
	      "                         raw-sendto is the baseline every ratio is taken against;\n"
	      "                         raw-sendmmsg and raw-io_uring are the library's sendmmsg\n"
	      "                         and io_uring fan-outs written by hand (opt-in), and add a\n"
	      "                         'vs raw twin' column. xdp (the library's AF_XDP backend)\n"
	      "                         and raw-xdp (its twin by hand) need --sink netns-xdp and\n"
	      "                         are skipped with the reason otherwise. kfanout (the\n"
	      "                         library's kernel fan-out), raw-kfanout (its twin by hand)\n"
	      "                         and raw-sendto+hook (raw-sendto with the fan-out's program\n"
	      "                         on the device) need --sink netns-xdp: the bench attaches\n"
	      "                         the program with multisend-kfanout (the build tree's, else\n"
	      "                         PATH's) for them, and detaches it at the end.\n"
	      "                         auto+kfanout (netns-xdp too) is auto with that program on\n"
	      "                         the device and no capabilities in effect on the sending\n"
	      "                         thread while its context is made and while it sends, as\n"
	      "                         an unprivileged publisher in the pins' group: xdp is\n"
	      "                         refused, kfanout is among AUTO's candidates\n"
	      "  -n, --fanout LIST      destinations per call, e.g. 1,16,256,1024\n"
	      "  -s, --size LIST        message sizes in bytes (1..65507), e.g. 64,512\n"
	      "      --sink NAME        loopback (default): receivers on 127.0.0.1, drained between\n"
	      "                           timed batches; the loopback receive path is in the cost\n"
	      "                         netns-drop: (root) a private namespace whose veth drops\n"
	      "                           every datagram: the sender's cost alone\n"
	      "                         deliver: receiver threads read and verify every datagram;\n"
	      "                           reports sent = received + kernel drops\n"
	      "                         netns-xdp: (root) netns-drop's namespace with the veth's\n"
	      "                           peer up and frames dropped on arrival there, so that\n"
	      "                           xdp and raw-xdp (AF_XDP) can send; every backend of the\n"
	      "                           run pays the same receive side\n"
	      "      --connected        one connected UDP socket per destination (default: one\n"
	      "                         unconnected socket with N addresses)\n"
	      "      --tcp              destinations are N TCP connections over loopback (one\n"
	      "                         connected socket each, TCP_NODELAY) to receiver threads\n"
	      "                         that read and discard every byte; sent bytes = received\n"
	      "                         is checked per run, receiver CPU reported apart. Not with\n"
	      "                         --sink netns-drop or netns-xdp\n"
	      "      --mtu N            netns-drop: the veth's MTU (68..65535; default 1500).\n"
	      "                         Larger datagrams are fragmented, and fragments copied\n"
	      "      --verify-payload   deliver: receivers also compare every payload byte with\n"
	      "                         what was sent (default: length, magic, sequence number)\n"
	      "\n"
	      "How long:\n"
	      "  -t, --duration SEC     each mode's budget for its timed runs (default 60; --quick\n"
	      "                         3): 70% of SEC spread evenly over the mode's runs. Not in\n"
	      "                         it, so a mode can take longer than SEC: each\n"
	      "                         configuration's setup and warm-up; runs that cannot be as\n"
	      "                         short as their share (a throughput run is at least 2 ms; a\n"
	      "                         latency run at least 100 calls at its offered rate, e.g.\n"
	      "                         0.5 s at 200/s, and as long as a backend slower than the\n"
	      "                         rate needs); the capacity mode's check of each backend's\n"
	      "                         answer (about 1.2 s, --quick 0.35 s, a try; up to 6 tries\n"
	      "                         with --p99-bound, --quick 2); --auto-warmup per\n"
	      "                         configuration\n"
	      "  -i, --iterations N     fan-outs per timed run (compare, sweep, capacity), instead of\n"
	      "                         sizing runs from --duration\n"
	      "      --rounds N         interleaved rounds (default 7; latency 3; --quick 3 and 2)\n"
	      "  -q, --quick            a few seconds per mode, fewer fan-outs and sizes (smoke test)\n"
	      "  -r, --rate LIST        latency: offered fan-outs per second (default: 20%, 50% and\n"
	      "                         80% of what raw-sendto sustains); capacity: the message rate\n"
	      "                         (first value, default 10000). Suffixes k and m\n"
	      "      --cpu N            pin the sending thread to CPU N (receivers avoid it)\n"
	      "\n"
	      "Capacity (sweeps --fanout, default 1,4,16,64,256,1024, at the first --size, default\n"
	      "64, then measures latency at the answer):\n"
	      "      --cpu-budget F     fraction of one core the fan-out may use (default 0.7)\n"
	      "      --p99-bound US     bound on the p99 latency of a whole fan-out call, from its\n"
	      "                         scheduled start, in microseconds (default: none)\n"
	      "      --subscribers N    also say how many cores or relay hosts N subscribers need\n"
	      "      --relay-cores N    cores per relay host (default: this host's)\n"
	      "      --segments S       also answer with IP multicast: the subscribers are spread\n"
	      "                         over S network segments, each reached by one group address\n"
	      "                         (one destination per segment and message)\n"
	      "      --unicast U        with --segments: U more subscribers reached by unicast (not\n"
	      "                         on a multicast segment); default 0\n"
	      "\n"
	      "Kernel transmit timestamps (the library's SO_TIMESTAMPING sampling; off by default):\n"
	      "      --ts-sample K      every library backend runs as \"BACKEND+ts/K\": one fan-out in\n"
	      "                         K stamped; adds the skew figures from the kernel's stamps\n"
	      "                         (call to first and to last destination, first to last)\n"
	      "      --ts-compare K     every library backend runs twice, interleaved: plain and\n"
	      "                         +ts/K, with the CPU ratio of the two taken round by round\n"
	      "                         (what sampling costs), and the +ts/K skew figures\n"
	      "      --ts-all           stamp every destination of a sampled fan-out (default: the\n"
	      "                         first and the last)\n"
	      "      --ts-hist          print each +ts backend's whole first-to-last skew histogram\n"
	      "\n"
	      "Send options (what each fan-out asks of the library; off by default):\n"
	      "      --dontwait         every send without waiting: the library's ms_send with\n"
	      "                         MS_SEND_DONTWAIT (io_uring: fire and forget, only failures\n"
	      "                         complete), the baselines' sendto, sendmmsg and io_uring SQEs\n"
	      "                         with MSG_DONTWAIT; a destination refused with EAGAIN counts\n"
	      "                         as failed, like any refusal\n"
	      "      --rotate           the library's contexts with MS_CFG_ROTATE: each fan-out\n"
	      "                         starts one destination later (the baselines are unaffected)\n"
	      "      --compare-dontwait every backend runs twice, interleaved: plain and +dontwait\n"
	      "                         (as --dontwait), with the CPU ratio of the two taken round\n"
	      "                         by round (column 'vs plain')\n"
	      "      --compare-rotate   every library backend runs twice, interleaved: plain and\n"
	      "                         +rotate (as --rotate), with the same ratio; with\n"
	      "                         --compare-dontwait, both variants run\n"
	      "      --lib-connect      the library's contexts with MS_CFG_CONNECT: every address\n"
	      "                         on the unconnected socket gets a connected socket of the\n"
	      "                         library's own (the baselines stay unconnected); not with\n"
	      "                         --connected\n"
	      "      --compare-connect  every library backend runs twice, interleaved: plain and\n"
	      "                         +connect (as --lib-connect), with the same ratio; with\n"
	      "                         the other --compare options, each variant runs; not\n"
	      "                         with --connected (already connected: nothing to compare)\n"
	      "      --zc-min N|never   the library's contexts with zc_min = N (1..65536):\n"
	      "                         io_uring sends messages of N bytes or more with zero\n"
	      "                         copy (SEND_ZC); never (the library's default): none\n"
	      "      --compare-zc       io_uring runs twice, interleaved: plain with zc_min =\n"
	      "                         never and +zc with zc_min = 1 (or --zc-min), with the\n"
	      "                         ratio 'vs plain'; each row notes the library's zc_sends\n"
	      "                         and zc_copied (copied: the kernel copied anyway, and\n"
	      "                         zero copy turned itself off)\n"
	      "\n"
	      "The library's threads (multisend.h, \"Workers and offload\"; off by default):\n"
	      "      --workers K        the library's contexts with workers = K (1..64): each fan-out\n"
	      "                         in K parts sent at once, one by the sending thread, the others\n"
	      "                         by K - 1 threads of the library's\n"
	      "      --offload          the library's contexts with MS_CFG_OFFLOAD, sent with ms_post:\n"
	      "                         it copies the message into a ring and a library thread sends\n"
	      "                         it. Each timed batch ends with ms_ctx_drain, so the rate and\n"
	      "                         the process CPU include the sending; 'caller' is the sending\n"
	      "                         thread's CPU in ms_post alone, and its wait in ms_ctx_drain\n"
	      "                         is not charged to the process either. Latency mode: a\n"
	      "                         call's hand-over\n"
	      "      --compare-offload  every library backend runs twice, interleaved: plain and\n"
	      "                         +offload (as --offload), with the ratio 'vs plain' and\n"
	      "                         'caller vs loop': the +offload caller CPU/dest over the plain\n"
	      "                         library loop's, round by round\n"
	      "      --compare-workers K  every library backend runs twice, interleaved: plain and\n"
	      "                         +wK (as --workers K, K = 2..64). With --ts-sample S or\n"
	      "                         --ts-compare S the +wK variant is stamped too (+wK+ts/S, own\n"
	      "                         sockets) and measured against +ts/S: its 'vs plain' is over\n"
	      "                         +ts/S, and the timestamp block adds 'skew vs 1 thread', its\n"
	      "                         first-to-last skew over the +ts/S one (p50, p99, mean)\n"
	      "      --offload-kib N    the offload ring's size in KiB (ms_config.offload_kib,\n"
	      "                         64..1048576; default the library's, 4096)\n"
	      "      --spin-us US       how long an idle library thread polls for work before it\n"
	      "                         sleeps (ms_config.spin_us, 1..1000000; default the library's,\n"
	      "                         50). A variant's threads still polling after its run are\n"
	      "                         charged to the process CPU of the variant that runs next:\n"
	      "                         keep US far below a run's length\n"
	      "      --cpus LIST        pin the library's threads: the i-th thread of each context to\n"
	      "                         the i-th CPU of LIST (ms_config.cpus); with --cpu N for the\n"
	      "                         sending thread. Without it they run where the scheduler puts\n"
	      "                         them (contexts are made before --cpu pins the sending thread,\n"
	      "                         so they do not inherit its CPU)\n"
	      "\n"
	      "AUTO and background load:\n"
	      "      --backends ...,auto  the library's MS_BACKEND_AUTO beside the fixed backends,\n"
	      "                         as a long-running publisher sees it: a new context and\n"
	      "                         group per configuration, kept across its rounds (and its\n"
	      "                         timeline slices); after the run each configuration's\n"
	      "                         ms_ctx_describe is printed\n"
	      "      --auto-warmup SEC  seconds of real sends AUTO makes before its first measured\n"
	      "                         round in each configuration (0..3600, default 2), reported\n"
	      "                         apart ('auto first SEC s'); needs auto or auto+kfanout\n"
	      "                         in --backends\n"
	      "      --background-load K  K processes (0..64, default 0) that loop on short system\n"
	      "                         calls and walks of an 8 MiB buffer while the bench runs; not\n"
	      "                         the bench's threads, so never in its CPU figures. Killed\n"
	      "                         with the bench (PR_SET_PDEATHSIG) and at their own deadline\n"
	      "                         (the expected run plus a margin); not pinned\n"
	      "      --load-from WHEN   when the load starts: 0 (default, the whole run), seconds\n"
	      "                         after the start, or half (half the expected run; with\n"
	      "                         --timeline, half of each timeline, quiet again before the\n"
	      "                         next); needs --background-load\n"
	      "      --timeline SEC     a mode of its own: for each --fanout x --size (default 256 x\n"
	      "                         64), every backend keeps one context and group for SEC\n"
	      "                         seconds (1..86400) and sends in slices of about 150 ms, in\n"
	      "                         an order rotated every turn; CPU per destination over the\n"
	      "                         whole run and each half, and auto over the best fixed\n"
	      "                         library backend. Not with --mode, --duration, --iterations,\n"
	      "                         --rounds, --quick, --rate, --auto-warmup, --csv, --report\n"
	      "\n"
	      "Instructions (valgrind's callgrind; user space only, so the library's own work):\n"
	      "      --callgrind        run each backend once under valgrind --tool=callgrind at each\n"
	      "                         --fanout (default 256) and --size (default 64), --sink and\n"
	      "                         shape, collecting only its per-fan-out function (ms_send,\n"
	      "                         bench_raw_*_fanout) after a warm-up; prints instructions per\n"
	      "                         destination and each library backend's ratio to its\n"
	      "                         hand-written twin. --iterations sets the counted fan-outs\n"
	      "                         (default: about 65536 destinations' worth; --quick 1/8)\n"
	      "      --callgrind-out DIR  keep the callgrind.out files there (for callgrind_annotate)\n"
	      "\n"
	      "Output (the table always goes to stdout, or to stderr with --json -):\n"
	      "  -J, --json FILE|-      one JSON object per line: env, then one per backend and\n"
	      "                         configuration (all runs' raw figures inside), latency,\n"
	      "                         capacity, skip\n"
	      "      --csv FILE         one row per result\n"
	      "      --report DIR       summary.csv, runs.jsonl, .hgrm histograms, SVG charts\n"
	      "                         (with gnuplot) and index.html\n"
	      "      --no-progress      no progress line (it is shown only on a terminal, for runs\n"
	      "                         longer than a few seconds)\n"
	      "  -h, --help             this text\n"
	      "  -V, --version          versions of the bench and the library\n"
	      "\n"
	      "Exit status: 0 done, 1 failed, 2 bad usage, 130/143 interrupted (cleaned up).\n",
	      f);
}

static int bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "multisend-bench: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'multisend-bench --help'.\n");
	return -EINVAL;
}

static int parse_modes(const char *arg, unsigned *modes)
{
	char buf[128];
	char *save, *tok;

	if (strlen(arg) >= sizeof(buf))
		return bad("--mode: too long: %s", arg);
	strcpy(buf, arg);
	*modes = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "compare"))
			*modes |= MODE_COMPARE;
		else if (!strcmp(tok, "sweep"))
			*modes |= MODE_SWEEP;
		else if (!strcmp(tok, "latency"))
			*modes |= MODE_LATENCY;
		else if (!strcmp(tok, "capacity"))
			*modes |= MODE_CAPACITY;
		else if (!strcmp(tok, "all"))
			*modes |= MODE_SWEEP | MODE_LATENCY | MODE_CAPACITY;
		else
			return bad("--mode: unknown mode '%s' (compare, sweep, latency, capacity, all)",
				   tok);
	}
	return *modes ? 0 : bad("--mode: empty list '%s'", arg);
}

static int parse_backends(const char *arg, struct opts *o)
{
	char buf[128];
	char *save, *tok;
	bool seen[V_COUNT] = { false };

	if (strlen(arg) >= sizeof(buf))
		return bad("--backends: too long: %s", arg);
	strcpy(buf, arg);
	o->nvariants = 0;
	o->backends_given = true;
	if (!strcmp(buf, "all")) {
		for (int v = 0; v < V_PLAIN_COUNT; v++)
			o->order[o->nvariants++] = (enum variant_id)v;
		return 0;
	}
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int v = variant_from_name(tok);

		if (v < 0)
			return bad("--backends: unknown backend '%s' (raw-sendto, raw-sendmmsg, "
				   "raw-io_uring, loop, sendmmsg, io_uring, auto, xdp, raw-xdp, "
				   "kfanout, raw-kfanout, raw-sendto+hook, auto+kfanout, all)",
				   tok);
		if (seen[v])
			return bad("--backends: '%s' given twice", tok);
		seen[v] = true;
		o->order[o->nvariants++] = (enum variant_id)v;
	}
	return o->nvariants ? 0 : bad("--backends: empty list '%s'", arg);
}

/* Turn the library backends in o->order into their "+ts" variants (--ts-sample), or follow
 * each with its "+ts" variant (--ts-compare); follow each backend with its "+dontwait"
 * (--compare-dontwait) and each library backend with its "+rotate" (--compare-rotate),
 * "+connect" (--compare-connect), "+offload" (--compare-offload) and "+wK" variant
 * (--compare-workers; "+wK+ts" with timestamps), and io_uring with its "+zc" (--compare-zc):
 * so a backend and its variants run back to back in every round. -EINVAL if there is no
 * library backend for a variant (for "+zc", no io_uring). */
static int expand_variants(struct opts *o)
{
	enum variant_id order[V_COUNT];
	unsigned n = 0, lib = 0;

	for (unsigned i = 0; i < o->nvariants; i++) {
		enum variant_id v = o->order[i];

		/* AUTO and the kernel-bypass backends have no variants of their own: they run as
		 * they are beside them. */
		if (variant_is_auto(v) || variant_netns_xdp_only(v)) {
			order[n++] = v;
			continue;
		}
		if (!variant_is_raw(v))
			lib++;
		if (variant_is_raw(v) || !o->ts_sample || o->ts_compare)
			order[n++] = v;
		if (!variant_is_raw(v) && o->ts_sample)
			order[n++] = variant_ts(v);
		if (o->compare_dw)
			order[n++] = variant_dw(v);
		if (!variant_is_raw(v) && o->compare_rot)
			order[n++] = variant_rot(v);
		if (!variant_is_raw(v) && o->compare_conn)
			order[n++] = variant_conn(v);
		if (!variant_is_raw(v) && o->compare_off)
			order[n++] = variant_off(v);
		if (!variant_is_raw(v) && o->compare_workers)
			order[n++] = o->ts_sample ? variant_w_ts(v) : variant_w(v);
		if (o->compare_zc && v == V_IO_URING)
			order[n++] = variant_zc(v);
	}
	if (!lib && (o->ts_sample || o->compare_rot || o->compare_conn || o->compare_off ||
		     o->compare_workers || o->compare_zc))
		return -EINVAL;
	/* "+zc" is io_uring's alone: another library backend is not enough. */
	for (unsigned i = 0; o->compare_zc && i <= n; i++)
		if (i == n)
			return -EINVAL;
		else if (order[i] == V_IO_URING_ZC)
			break;
	memcpy(o->order, order, n * sizeof(*order));
	o->nvariants = n;
	return 0;
}

enum {
	OPT_SINK = 256,
	OPT_CONNECTED,
	OPT_ROUNDS,
	OPT_CPU,
	OPT_CSV,
	OPT_REPORT,
	OPT_BUDGET,
	OPT_P99,
	OPT_SUBS,
	OPT_RELAY,
	OPT_SEGMENTS,
	OPT_UNICAST,
	OPT_NO_PROGRESS,
	OPT_VERIFY_PAYLOAD,
	OPT_TS_SAMPLE,
	OPT_TS_COMPARE,
	OPT_TS_ALL,
	OPT_TS_HIST,
	OPT_DONTWAIT,
	OPT_ROTATE,
	OPT_COMPARE_DW,
	OPT_COMPARE_ROT,
	OPT_LIB_CONNECT,
	OPT_COMPARE_CONN,
	OPT_WORKERS,
	OPT_OFFLOAD,
	OPT_COMPARE_OFF,
	OPT_COMPARE_WORKERS,
	OPT_OFFLOAD_KIB,
	OPT_SPIN_US,
	OPT_CPUS,
	OPT_ZC_MIN,
	OPT_COMPARE_ZC,
	OPT_MTU,
	OPT_TCP,
	OPT_CALLGRIND,
	OPT_CALLGRIND_OUT,
	OPT_CALLGRIND_CHILD,
	OPT_AUTO_WARMUP,
	OPT_BG_LOAD,
	OPT_LOAD_FROM,
	OPT_TIMELINE,
};

static const struct option long_opts[] = {
	{ "mode", required_argument, NULL, 'm' },
	{ "backends", required_argument, NULL, 'b' },
	{ "fanout", required_argument, NULL, 'n' },
	{ "size", required_argument, NULL, 's' },
	{ "sink", required_argument, NULL, OPT_SINK },
	{ "connected", no_argument, NULL, OPT_CONNECTED },
	{ "verify-payload", no_argument, NULL, OPT_VERIFY_PAYLOAD },
	{ "duration", required_argument, NULL, 't' },
	{ "iterations", required_argument, NULL, 'i' },
	{ "rounds", required_argument, NULL, OPT_ROUNDS },
	{ "quick", no_argument, NULL, 'q' },
	{ "rate", required_argument, NULL, 'r' },
	{ "cpu", required_argument, NULL, OPT_CPU },
	{ "cpu-budget", required_argument, NULL, OPT_BUDGET },
	{ "p99-bound", required_argument, NULL, OPT_P99 },
	{ "subscribers", required_argument, NULL, OPT_SUBS },
	{ "relay-cores", required_argument, NULL, OPT_RELAY },
	{ "segments", required_argument, NULL, OPT_SEGMENTS },
	{ "unicast", required_argument, NULL, OPT_UNICAST },
	{ "json", required_argument, NULL, 'J' },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "report", required_argument, NULL, OPT_REPORT },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "ts-sample", required_argument, NULL, OPT_TS_SAMPLE },
	{ "ts-compare", required_argument, NULL, OPT_TS_COMPARE },
	{ "ts-all", no_argument, NULL, OPT_TS_ALL },
	{ "ts-hist", no_argument, NULL, OPT_TS_HIST },
	{ "dontwait", no_argument, NULL, OPT_DONTWAIT },
	{ "rotate", no_argument, NULL, OPT_ROTATE },
	{ "compare-dontwait", no_argument, NULL, OPT_COMPARE_DW },
	{ "compare-rotate", no_argument, NULL, OPT_COMPARE_ROT },
	{ "lib-connect", no_argument, NULL, OPT_LIB_CONNECT },
	{ "compare-connect", no_argument, NULL, OPT_COMPARE_CONN },
	{ "workers", required_argument, NULL, OPT_WORKERS },
	{ "offload", no_argument, NULL, OPT_OFFLOAD },
	{ "compare-offload", no_argument, NULL, OPT_COMPARE_OFF },
	{ "compare-workers", required_argument, NULL, OPT_COMPARE_WORKERS },
	{ "offload-kib", required_argument, NULL, OPT_OFFLOAD_KIB },
	{ "spin-us", required_argument, NULL, OPT_SPIN_US },
	{ "cpus", required_argument, NULL, OPT_CPUS },
	{ "zc-min", required_argument, NULL, OPT_ZC_MIN },
	{ "compare-zc", no_argument, NULL, OPT_COMPARE_ZC },
	{ "mtu", required_argument, NULL, OPT_MTU },
	{ "tcp", no_argument, NULL, OPT_TCP },
	{ "callgrind", no_argument, NULL, OPT_CALLGRIND },
	{ "callgrind-out", required_argument, NULL, OPT_CALLGRIND_OUT },
	/* Internal: what --callgrind runs under valgrind (callgrind.c). */
	{ "callgrind-child", required_argument, NULL, OPT_CALLGRIND_CHILD },
	{ "auto-warmup", required_argument, NULL, OPT_AUTO_WARMUP },
	{ "background-load", required_argument, NULL, OPT_BG_LOAD },
	{ "load-from", required_argument, NULL, OPT_LOAD_FROM },
	{ "timeline", required_argument, NULL, OPT_TIMELINE },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

int parse_args(int argc, char **argv, struct opts *o)
{
	uint64_t u;
	int c, n;
	bool auto_warmup_given = false, mode_given = false, unicast_given = false;

	memset(o, 0, sizeof(*o));
	o->modes = MODE_COMPARE;
	o->cpu = -1;
	o->cpu_budget = 0.7;
	o->progress = true;
	o->auto_warmup = 2;
	/* The "+ts" variants join only with --ts-sample or --ts-compare (expand_ts). raw-sendmmsg
	 * and raw-io_uring only when asked for: the default run's time is fixed, and two more
	 * backends would cut every backend's timed runs to two thirds (wider ranges for the
	 * headline ratios) to answer a question --callgrind answers better. */
	for (int v = 0; v < V_PLAIN_COUNT; v++)
		if (!variant_is_raw((enum variant_id)v) || v == V_RAW)
			o->order[o->nvariants++] = (enum variant_id)v;
	opterr = 0;
	optind = 0; /* glibc: start afresh, whatever an earlier call left */
	while ((c = getopt_long(argc, argv, ":m:b:n:s:t:i:qr:J:hV", long_opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o->cg_conflict = "--mode";
			mode_given = true;
			if (parse_modes(optarg, &o->modes))
				return -EINVAL;
			break;
		case 'b':
			if (parse_backends(optarg, o))
				return -EINVAL;
			break;
		case 'n':
			n = parse_u64_list(optarg, 1, 1000000, true, o->fanouts, MAX_LIST);
			if (n < 0)
				return bad("--fanout: expected a list of numbers 1..1000000, got '%s'",
					   optarg);
			o->nfanouts = (unsigned)n;
			break;
		case 's':
			n = parse_u64_list(optarg, 1, 65507, false, o->sizes, MAX_LIST);
			if (n < 0)
				return bad("--size: expected a list of sizes 1..65507 (bytes), got '%s'",
					   optarg);
			o->nsizes = (unsigned)n;
			break;
		case OPT_SINK:
			/* "tcp" is --tcp's, for --callgrind's children (callgrind.c passes the sink
			 * by name). */
			if (!strcmp(optarg, "tcp"))
				o->tcp = true;
			else if (!strcmp(optarg, "loopback"))
				o->sink = SINK_LOOPBACK;
			else if (!strcmp(optarg, "netns-drop"))
				o->sink = SINK_NETNS_DROP;
			else if (!strcmp(optarg, "deliver"))
				o->sink = SINK_DELIVER;
			else if (!strcmp(optarg, "netns-xdp"))
				o->sink = SINK_NETNS_XDP;
			else
				return bad("--sink: unknown sink '%s' (loopback, netns-drop, deliver, "
					   "netns-xdp)",
					   optarg);
			break;
		case OPT_CONNECTED:
			o->connected = true;
			break;
		case OPT_VERIFY_PAYLOAD:
			o->verify_payload = true;
			break;
		case 't':
			o->cg_conflict = "--duration";
			if (parse_double(optarg, 0.1, 86400, &o->duration))
				return bad("--duration: expected seconds 0.1..86400, got '%s'", optarg);
			break;
		case 'i':
			if (parse_u64(optarg, 1, UINT64_C(1) << 40, &o->iterations))
				return bad("--iterations: expected a positive count, got '%s'", optarg);
			break;
		case OPT_ROUNDS:
			o->cg_conflict = "--rounds";
			if (parse_u64(optarg, 1, MAX_ROUNDS, &u))
				return bad("--rounds: expected 1..1000, got '%s'", optarg);
			o->rounds = (unsigned)u;
			break;
		case 'q':
			o->quick = true;
			break;
		case 'r':
			o->cg_conflict = "--rate";
			n = parse_u64_list(optarg, 1, 100000000, true, o->rates, MAX_LIST);
			if (n < 0)
				return bad("--rate: expected a list of rates per second (1..100m), got '%s'",
					   optarg);
			o->nrates = (unsigned)n;
			break;
		case OPT_CPU:
			if (parse_u64(optarg, 0, CPU_SETSIZE - 1, &u))
				return bad("--cpu: expected a CPU number, got '%s'", optarg);
			o->cpu = (int)u;
			break;
		case OPT_BUDGET:
			o->cg_conflict = "--cpu-budget";
			if (parse_double(optarg, 0.001, 1, &o->cpu_budget))
				return bad("--cpu-budget: expected a fraction of a core in (0, 1], got '%s'",
					   optarg);
			break;
		case OPT_P99:
			o->cg_conflict = "--p99-bound";
			if (parse_double(optarg, 0.001, 1e9, &o->p99_bound_us))
				return bad("--p99-bound: expected microseconds > 0, got '%s'", optarg);
			break;
		case OPT_SUBS:
			o->cg_conflict = "--subscribers";
			if (parse_u64(optarg, 1, UINT64_C(1) << 40, &o->subscribers))
				return bad("--subscribers: expected a positive count, got '%s'", optarg);
			break;
		case OPT_RELAY:
			o->cg_conflict = "--relay-cores";
			if (parse_u64(optarg, 1, 4096, &u))
				return bad("--relay-cores: expected 1..4096, got '%s'", optarg);
			o->relay_cores = (unsigned)u;
			break;
		case OPT_SEGMENTS:
			o->cg_conflict = "--segments";
			if (parse_u64(optarg, 1, UINT64_C(1) << 40, &o->segments))
				return bad("--segments: expected a positive count, got '%s'", optarg);
			break;
		case OPT_UNICAST:
			o->cg_conflict = "--unicast";
			unicast_given = true;
			if (parse_u64(optarg, 0, UINT64_C(1) << 40, &o->unicast))
				return bad("--unicast: expected a count (0 or more), got '%s'", optarg);
			break;
		case 'J':
			o->json = optarg;
			break;
		case OPT_CSV:
			o->cg_conflict = "--csv";
			o->csv = optarg;
			break;
		case OPT_REPORT:
			o->cg_conflict = "--report";
			o->report = optarg;
			break;
		case OPT_NO_PROGRESS:
			o->progress = false;
			break;
		case OPT_TS_SAMPLE:
		case OPT_TS_COMPARE:
			o->cg_conflict = c == OPT_TS_SAMPLE ? "--ts-sample" : "--ts-compare";
			/* The library's range for ms_config.ts_sample. */
			if (parse_u64(optarg, 0, 1000000000, &u))
				return bad("%s: expected one in K fan-outs, K = 1..1000000000 (0: off)",
					   c == OPT_TS_SAMPLE ? "--ts-sample" : "--ts-compare");
			if (o->ts_sample && u && o->ts_compare != (c == OPT_TS_COMPARE))
				return bad("--ts-sample and --ts-compare exclude each other%s", "");
			o->ts_sample = (uint32_t)u;
			o->ts_compare = u && c == OPT_TS_COMPARE;
			break;
		case OPT_TS_ALL:
			o->cg_conflict = "--ts-all";
			o->ts_all = true;
			break;
		case OPT_TS_HIST:
			o->cg_conflict = "--ts-hist";
			o->ts_hist = true;
			break;
		case OPT_DONTWAIT:
			o->dontwait = true;
			break;
		case OPT_ROTATE:
			o->rotate = true;
			break;
		case OPT_COMPARE_DW:
			o->cg_conflict = "--compare-dontwait";
			o->compare_dw = true;
			break;
		case OPT_COMPARE_ROT:
			o->cg_conflict = "--compare-rotate";
			o->compare_rot = true;
			break;
		case OPT_LIB_CONNECT:
			o->lib_connect = true;
			break;
		case OPT_COMPARE_CONN:
			o->cg_conflict = "--compare-connect";
			o->compare_conn = true;
			break;
		case OPT_WORKERS:
			o->cg_conflict = "--workers";
			if (parse_u64(optarg, 1, 64, &u))
				return bad("--workers: expected 1..64 threads per fan-out, got '%s'",
					   optarg);
			o->workers = (uint32_t)u;
			break;
		case OPT_OFFLOAD:
			o->cg_conflict = "--offload";
			o->offload = true;
			break;
		case OPT_COMPARE_OFF:
			o->cg_conflict = "--compare-offload";
			o->compare_off = true;
			break;
		case OPT_COMPARE_WORKERS:
			o->cg_conflict = "--compare-workers";
			if (parse_u64(optarg, 2, 64, &u))
				return bad("--compare-workers: expected 2..64 threads per fan-out, "
					   "got '%s'",
					   optarg);
			o->compare_workers = (uint32_t)u;
			break;
		case OPT_OFFLOAD_KIB:
			o->cg_conflict = "--offload-kib";
			if (parse_u64(optarg, 64, 1048576, &u))
				return bad("--offload-kib: expected 64..1048576 (KiB), got '%s'",
					   optarg);
			o->offload_kib = (uint32_t)u;
			break;
		case OPT_SPIN_US:
			o->cg_conflict = "--spin-us";
			if (parse_u64(optarg, 1, 1000000, &u))
				return bad("--spin-us: expected 1..1000000 microseconds, got '%s'",
					   optarg);
			o->spin_us = (uint32_t)u;
			break;
		case OPT_CPUS: {
			uint64_t list[MAX_LIST];

			o->cg_conflict = "--cpus";
			n = parse_u64_list(optarg, 0, CPU_SETSIZE - 1, false, list, MAX_LIST);
			if (n < 0)
				return bad("--cpus: expected a list of CPU numbers, e.g. 1 or 2,3, "
					   "got '%s'",
					   optarg);
			o->ncpus = (unsigned)n;
			for (int k = 0; k < n; k++)
				o->cpus[k] = (int)list[k];
			break;
		}
		case OPT_ZC_MIN:
			o->cg_conflict = "--zc-min";
			/* The library's range: one buffer of at most 64 KiB; never: 0, the
			 * library's default, said explicitly. */
			if (!strcmp(optarg, "never"))
				o->zc_min = 0, o->zc_never = true;
			else if (parse_u64(optarg, 1, 65536, &u))
				return bad("--zc-min: expected bytes 1..65536 or 'never', got '%s'",
					   optarg);
			else
				o->zc_min = (uint32_t)u, o->zc_never = false;
			break;
		case OPT_COMPARE_ZC:
			o->cg_conflict = "--compare-zc";
			o->compare_zc = true;
			break;
		case OPT_MTU:
			/* What a veth takes: IPv4's minimum to ETH_MAX_MTU. */
			if (parse_u64(optarg, 68, 65535, &u))
				return bad("--mtu: expected 68..65535 bytes, got '%s'", optarg);
			o->mtu = (uint32_t)u;
			break;
		case OPT_TCP:
			o->tcp = true;
			break;
		case OPT_CALLGRIND:
			o->callgrind = true;
			break;
		case OPT_CALLGRIND_OUT:
			o->callgrind_out = optarg;
			break;
		case OPT_CALLGRIND_CHILD:
			if (parse_u64(optarg, 0, UINT64_C(1) << 40, &o->cg_warmup))
				return bad("--callgrind-child: expected a warm-up count, got '%s'", optarg);
			o->cg_child = true;
			break;
		case OPT_AUTO_WARMUP:
			o->cg_conflict = "--auto-warmup";
			if (parse_double(optarg, 0, 3600, &o->auto_warmup))
				return bad("--auto-warmup: expected seconds 0..3600, got '%s'", optarg);
			auto_warmup_given = true;
			break;
		case OPT_BG_LOAD:
			o->cg_conflict = "--background-load";
			if (parse_u64(optarg, 0, 64, &u))
				return bad("--background-load: expected 0..64 load processes, got '%s'",
					   optarg);
			o->bg_load = (unsigned)u;
			break;
		case OPT_LOAD_FROM:
			o->cg_conflict = "--load-from";
			o->load_from_given = true;
			if (!strcmp(optarg, "half"))
				o->load_from_half = true, o->load_from = 0;
			else if (parse_double(optarg, 0, 86400, &o->load_from))
				return bad("--load-from: expected seconds 0..86400 or 'half', got '%s'",
					   optarg);
			else
				o->load_from_half = false;
			break;
		case OPT_TIMELINE:
			o->cg_conflict = "--timeline";
			if (parse_double(optarg, 1, 86400, &o->timeline))
				return bad("--timeline: expected seconds 1..86400, got '%s'", optarg);
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf("multisend-bench %s, libmultisend %s\n", BENCH_VERSION,
			       ms_version_string());
			return 1;
		case ':':
			return bad("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt)
				fprintf(stderr, "multisend-bench: unknown option '-%c'\n", optopt);
			else
				fprintf(stderr, "multisend-bench: unknown option '%s'\n",
					argv[optind - 1]);
			fprintf(stderr, "Try 'multisend-bench --help'.\n");
			return -EINVAL;
		}
	}
	if (optind < argc)
		return bad("unexpected argument '%s' (options only)", argv[optind]);
	if (o->callgrind_out && !o->callgrind)
		return bad("--callgrind-out needs --callgrind%s", "");
	if (o->callgrind && o->cg_child)
		return bad("--callgrind and --callgrind-child exclude each other%s", "");
	if (o->callgrind && o->cg_conflict)
		return bad("--callgrind counts instructions over a fixed number of fan-outs; %s has no "
			   "use there",
			   o->cg_conflict);
	if (o->callgrind && !o->backends_given) {
		/* Every backend, so that each library backend meets its hand-written twin. */
		o->nvariants = 0;
		for (int v = 0; v < V_PLAIN_COUNT; v++)
			o->order[o->nvariants++] = (enum variant_id)v;
	}
	if (o->cg_child && (o->nvariants != 1 || o->nfanouts != 1 || o->nsizes != 1 ||
			    !o->iterations || o->ts_sample || o->modes != MODE_COMPARE))
		return bad("--callgrind-child is internal to --callgrind: one backend, one --fanout, one "
			   "--size, --iterations%s",
			   "");
	for (unsigned i = 0; o->callgrind && i < o->nvariants; i++)
		if (variant_is_auto(o->order[i]))
			return bad("--callgrind and --backends %s exclude each other (AUTO chooses by "
				   "timing its sends, which valgrind distorts)",
				   variant_name(o->order[i]));
	bool want_auto = false;

	for (unsigned i = 0; i < o->nvariants; i++)
		want_auto |= variant_is_auto(o->order[i]);
	if (auto_warmup_given && !want_auto)
		return bad("--auto-warmup needs auto or auto+kfanout in --backends%s", "");
	if (unicast_given && !o->segments)
		return bad("--unicast counts the subscribers beside --segments' groups: it needs "
			   "--segments S%s",
			   "");
	if (o->segments && !(o->modes & MODE_CAPACITY))
		return bad("--segments answers in the capacity mode: it needs --mode capacity (or "
			   "all)%s",
			   "");
	if (o->segments && o->subscribers && o->segments + o->unicast > o->subscribers)
		return bad("--segments S and --unicast U: S + U destinations for fewer "
			   "--subscribers; each segment and each unicast subscriber holds at "
			   "least one subscriber%s",
			   "");
	if (o->load_from_given && !o->bg_load)
		return bad("--load-from needs --background-load K (K = 1..64)%s", "");
	if (o->timeline > 0) {
		if (mode_given)
			return bad("--timeline is a mode of its own: not with --mode%s", "");
		if (o->duration > 0 || o->iterations || o->rounds || o->quick)
			return bad("--timeline SECONDS sets the run's length: not with --duration, "
				   "--iterations, --rounds or --quick%s",
				   "");
		if (o->nrates)
			return bad("--rate is for the latency and capacity modes, not --timeline%s",
				   "");
		if (o->csv || o->report)
			return bad("--timeline writes its figures to the table and --json, not to %s",
				   o->csv ? "--csv" : "--report");
		if (auto_warmup_given)
			return bad("--auto-warmup and --timeline exclude each other (the timeline "
				   "counts AUTO from its first send, as each half is reported)%s",
				   "");
		/* o->modes keeps its default: --timeline replaces the modes (main.c). */
	}
	if ((o->ts_all || o->ts_hist) && !o->ts_sample)
		return bad("%s needs --ts-sample K or --ts-compare K",
			   o->ts_all ? "--ts-all" : "--ts-hist");
	if (o->dontwait && o->compare_dw)
		return bad("--dontwait and --compare-dontwait exclude each other (the latter runs both)%s",
			   "");
	if (o->rotate && o->compare_rot)
		return bad("--rotate and --compare-rotate exclude each other (the latter runs both)%s",
			   "");
	if (o->lib_connect && o->compare_conn)
		return bad("--lib-connect and --compare-connect exclude each other (the latter "
			   "runs both)%s",
			   "");
	if (o->connected && (o->lib_connect || o->compare_conn))
		return bad("%s needs the unconnected shape: with --connected every destination "
			   "already has its own connected socket (nothing to compare)",
			   o->compare_conn ? "--compare-connect" : "--lib-connect");
	if (o->ts_sample && (o->compare_dw || o->compare_rot || o->compare_conn || o->compare_off))
		return bad("--ts-sample/--ts-compare and --compare-dontwait/--compare-rotate/"
			   "--compare-connect/--compare-offload exclude each other (one kind of "
			   "variant per run; --compare-workers is stamped with them)%s",
			   "");
	if (o->workers && o->compare_workers)
		return bad("--workers and --compare-workers exclude each other (the latter runs "
			   "plain and +wK)%s",
			   "");
	if (o->offload && o->compare_off)
		return bad("--offload and --compare-offload exclude each other (the latter runs "
			   "both)%s",
			   "");
	if (o->offload_kib && !o->offload && !o->compare_off)
		return bad("--offload-kib needs --offload or --compare-offload%s", "");
	/* The library's threads: only with workers or offload are there any to tune or pin. */
	if ((o->spin_us || o->ncpus) && o->workers < 2 && !o->compare_workers && !o->offload &&
	    !o->compare_off)
		return bad("%s: the library starts no thread without --workers 2 or more, "
			   "--compare-workers, --offload or --compare-offload",
			   o->ncpus ? "--cpus" : "--spin-us");
	if (o->compare_zc && o->zc_never)
		return bad("--compare-zc needs zero copy: --zc-min never leaves +zc nothing to "
			   "compare%s",
			   "");
	if (o->compare_zc && (o->ts_sample || o->compare_dw || o->compare_rot || o->compare_conn ||
			      o->compare_off || o->compare_workers))
		return bad("--compare-zc and the other --compare options, --ts-sample and "
			   "--ts-compare exclude each other (one kind of variant per run)%s",
			   "");
	if (o->mtu && o->sink != SINK_NETNS_DROP)
		return bad("--mtu sets the netns-drop sink's veth: it needs --sink netns-drop%s",
			   "");
	if (o->tcp) {
		if (sink_netns(o->sink))
			return bad("--tcp needs a receiving side: its connections end at "
				   "receiver threads on 127.0.0.1, which --sink %s has not (use "
				   "the default sink)",
				   sink_name(o->sink));
		if (o->verify_payload)
			return bad("--verify-payload checks datagrams; --tcp receivers count bytes "
				   "only%s",
				   "");
		if (o->lib_connect || o->compare_conn)
			return bad("%s needs the unconnected UDP shape; --tcp is connected",
				   o->compare_conn ? "--compare-connect" : "--lib-connect");
		/* The receivers accept one connection per destination: sockets of a stamped
		 * variant's own would never be read. */
		if (o->ts_sample)
			return bad("--tcp and --ts-sample/--ts-compare exclude each other (the "
				   "stamped variants' own connections)%s",
				   "");
		/* A send that does not wait may take part of a message and cut the stream, which
		 * the bench would count as sent whole. */
		if (o->dontwait || o->compare_dw)
			return bad("--tcp and %s exclude each other (a partial send would cut "
				   "the stream)",
				   o->dontwait ? "--dontwait" : "--compare-dontwait");
		/* Loopback and deliver alike: a TCP sender blocks rather than drops, so its
		 * receivers must read while it sends. */
		o->sink = SINK_TCP;
		o->connected = true;
	}
	if ((o->ts_sample || o->compare_dw || o->compare_rot || o->compare_conn ||
	     o->compare_off || o->compare_workers || o->compare_zc) &&
	    expand_variants(o)) {
		if (o->compare_zc)
			return bad("--compare-zc needs io_uring in --backends (the only backend "
				   "that sends with zero copy)%s",
				   "");
		return bad("%s needs a library backend (loop, sendmmsg, io_uring) in --backends",
			   o->ts_sample	       ? "--ts-sample/--ts-compare"
			   : o->compare_rot    ? "--compare-rotate"
			   : o->compare_conn   ? "--compare-connect"
			   : o->compare_off    ? "--compare-offload"
					       : "--compare-workers");
	}
	if (o->verify_payload && o->sink != SINK_DELIVER)
		return bad("--verify-payload needs --sink deliver%s", "");
	if (o->sink == SINK_DELIVER)
		for (unsigned i = 0; i < o->nsizes; i++)
			if (o->sizes[i] < sizeof(struct msg_head)) {
				char num[24];

				snprintf(num, sizeof(num), "%llu", (unsigned long long)o->sizes[i]);
				return bad("--sink deliver needs messages of at least 16 bytes (sequence "
					   "number and magic), not %s",
					   num);
			}
	if (o->cpu >= 0 || o->ncpus) {
		cpu_set_t set;

		if (!sched_getaffinity(0, sizeof(set), &set)) {
			char num[16];

			snprintf(num, sizeof(num), "%d", o->cpu);
			if (o->cpu >= 0 && !CPU_ISSET(o->cpu, &set))
				return bad("--cpu %s: that CPU is not available to this process",
					   num);
			for (unsigned k = 0; k < o->ncpus; k++) {
				snprintf(num, sizeof(num), "%d", o->cpus[k]);
				if (!CPU_ISSET(o->cpus[k], &set))
					return bad("--cpus: CPU %s is not available to this process",
						   num);
			}
		}
	}
	return 0;
}
