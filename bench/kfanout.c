/* SPDX-License-Identifier: MIT */
/* The kernel fan-out's attachment for the bench: see kfanout.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <net/if.h>

#include "kfanout.h"
#include "../lib/be/kfanout/abi.h"

/* enum bpf_attach_type's BPF_TCX_EGRESS (Linux 6.6; Debian 12's linux/bpf.h predates it, as
 * tools/multisend-kfanout.c says). */
#define KFB_TCX_EGRESS 47
/* tcx's order (Linux 6.6's BPF_F_BEFORE and BPF_F_AFTER, not in Debian 12's linux/bpf.h):
 * with no relative program, first and last on the hook. */
#define KFB_F_BEFORE (1u << 3)
#define KFB_F_AFTER (1u << 4)

#define KFB_PINS KF_PIN_ROOT "/" NETNS_DEV

static bool exe_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);

	if (n <= 0)
		return false;
	buf[n] = '\0';
	char *slash = strrchr(buf, '/');

	if (!slash)
		return false;
	*slash = '\0';
	return true;
}

/* Where multisend-kfanout is: the build tree's (beside the bench: ../tools/, and its object
 * ../kfanout.bpf.o), else PATH's. false with the reason in why. */
static bool find_tool(struct kf_bench *kf)
{
	char dir[PATH_MAX];

	kf->object[0] = '\0';
	if (exe_dir(dir, sizeof(dir))) {
		char tool[PATH_MAX + 32], obj[PATH_MAX + 32];

		snprintf(tool, sizeof(tool), "%s/../tools/multisend-kfanout", dir);
		snprintf(obj, sizeof(obj), "%s/../kfanout.bpf.o", dir);
		if (!access(tool, X_OK) && !access(obj, R_OK) &&
		    (size_t)snprintf(kf->tool, sizeof(kf->tool), "%s", tool) < sizeof(kf->tool) &&
		    (size_t)snprintf(kf->object, sizeof(kf->object), "%s", obj) < sizeof(kf->object))
			return true;
		kf->object[0] = '\0';
	}
	if (have_program("multisend-kfanout")) {
		snprintf(kf->tool, sizeof(kf->tool), "multisend-kfanout");
		return true;
	}
	snprintf(kf->why, sizeof(kf->why),
		 "unavailable: multisend-kfanout not found (neither ../tools/ of the build tree the "
		 "bench runs from nor on PATH)");
	return false;
}

/* The last non-empty line of a file, for the tool's message. */
static void last_line(const char *path, char *buf, size_t len)
{
	char all[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, all, sizeof(all) - 1) : -1;

	if (fd >= 0)
		close(fd);
	buf[0] = '\0';
	if (n <= 0)
		return;
	all[n] = '\0';
	while (n > 0 && (all[n - 1] == '\n' || all[n - 1] == ' '))
		all[--n] = '\0';
	char *p = strrchr(all, '\n');

	p = p ? p + 1 : all;
	size_t l = strlen(p) < len - 1 ? strlen(p) : len - 1;

	memcpy(buf, p, l);
	buf[l] = '\0';
}

/* Run the tool in the namespace; 0, or its status with its last line of output in msg. */
static int tool_run(struct kf_bench *kf, char *const args[], char *msg, size_t msglen)
{
	char log[] = "/tmp/multisend-bench-kf-XXXXXX", net[160];
	char *argv[16];
	int n = 0, fd = mkstemp(log);

	msg[0] = '\0';
	if (fd < 0) {
		snprintf(msg, msglen, "mkstemp: %s", strerror(errno));
		return -errno;
	}
	close(fd);
	snprintf(net, sizeof(net), "--net=%s", kf->nspath);
	argv[n++] = "nsenter";
	argv[n++] = net;
	argv[n++] = kf->tool;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	int rc = run_command(argv, NULL, log);

	if (rc)
		last_line(log, msg, msglen);
	unlink(log);
	return rc;
}

void kf_setup(struct session *s, const struct netns *ns)
{
	struct kf_bench *kf = &s->kf;
	char msg[200];
	struct stat st;

	kf->prog_fd = kf->link_fd = kf->bprog_fd = kf->blink_fd = -1;
	kf->wanted = false;
	for (unsigned i = 0; i < s->o->nvariants; i++)
		kf->wanted |= variant_is_kfanout(s->o->order[i]);
	if (!kf->wanted || s->o->sink != SINK_NETNS_XDP || !ns)
		return;
#ifdef BENCH_HAVE_KFANOUT
	const bool built = true;
#else
	const bool built = false;
#endif
	if (!built) {
		snprintf(kf->why, sizeof(kf->why),
			 "unavailable: built without the kernel fan-out (-Dkfanout: libbpf or clang "
			 "-target bpf not found, or disabled)");
		return;
	}
	if (!find_tool(kf))
		return;
	if (!have_program("nsenter")) {
		snprintf(kf->why, sizeof(kf->why),
			 "unavailable: nsenter (util-linux) not found: multisend-kfanout runs in "
			 "the namespace through it");
		return;
	}
	if (!lstat(KFB_PINS, &st)) {
		snprintf(kf->why, sizeof(kf->why),
			 "unavailable: " KFB_PINS " exists: another multisend-bench is measuring "
			 "the kernel fan-out (one at a time: the pins are named after the "
			 "interface), or one that was killed left it (if none runs: rm -r " KFB_PINS
			 ")");
		return;
	}
	snprintf(kf->nspath, sizeof(kf->nspath), "%s", ns->path);
	char ports[32];

	snprintf(ports, sizeof(ports), "%u-65535", NETNS_FIRST_PORT);
	char *attach[] = { "attach", NETNS_DEV, kf->object[0] ? "--object" : NULL, kf->object,
			   NULL };
	char *policy[] = { "policy", "add", NETNS_DEV, NETNS_REMOTE "/32", ports, NULL };
	uint64_t t0 = now_ns();
	int rc = tool_run(kf, attach, msg, sizeof(msg));

	if (rc) {
		snprintf(kf->why, sizeof(kf->why),
			 "unavailable: %.100s attach " NETNS_DEV " failed (status %d): %.150s", kf->tool, rc,
			 msg[0] ? msg : "no message");
		return;
	}
	kf->attached = true;
	rc = tool_run(kf, policy, msg, sizeof(msg));
	kf->attach_ns = now_ns() - t0;
	if (rc) {
		snprintf(kf->why, sizeof(kf->why),
			 "unavailable: %.80s policy add " NETNS_DEV " " NETNS_REMOTE "/32 %s failed "
			 "(status %d): %.100s",
			 kf->tool, ports, rc, msg[0] ? msg : "no message");
		kf_teardown(s);
	}
}

int kf_teardown(struct session *s)
{
	struct kf_bench *kf = &s->kf;
	char msg[200];
	char *detach[] = { "detach", NETNS_DEV, NULL };

	if (!kf->attached)
		return 0;
	uint64_t t0 = now_ns();
	int rc = tool_run(kf, detach, msg, sizeof(msg));

	kf->detach_ns = now_ns() - t0;
	kf->attached = false;
	if (rc) {
		fprintf(stderr,
			"multisend-bench: %s detach " NETNS_DEV " failed (status %d): %s; remove its "
			"pins with: rm -r " KFB_PINS "\n",
			kf->tool, rc, msg);
		return -1;
	}
	return 0;
}

/* ---- the hook, on the sending thread ---------------------------------------------------- */

int kf_bpf(int cmd, union bpf_attr *a)
{
	long r = syscall(__NR_bpf, cmd, a, sizeof(*a));

	return r < 0 ? -errno : (int)r;
}

int kf_pin_get(const char *path)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.pathname = (uintptr_t)path;
	return kf_bpf(BPF_OBJ_GET, &a);
}

/* One program on or off the device's tcx egress: first on the hook, or last. */
static int tcx_prog(struct kf_bench *kf, int prog_fd, bool on, bool first)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)kf->ifindex; /* tcx: the device's index, in this namespace */
	a.attach_bpf_fd = (uint32_t)prog_fd;
	a.attach_type = KFB_TCX_EGRESS;
	if (on)
		a.attach_flags = first ? KFB_F_BEFORE : KFB_F_AFTER;
	return kf_bpf(on ? BPF_PROG_ATTACH : BPF_PROG_DETACH, &a);
}

/* The hook as the tool leaves it (the backstop last, then the program first), or off (the
 * program, then the backstop). */
static int prog_attach(struct kf_bench *kf, bool on)
{
	int err;

	if (on) {
		if ((err = tcx_prog(kf, kf->bprog_fd, true, false)))
			return err;
		if ((err = tcx_prog(kf, kf->prog_fd, true, true)))
			(void)tcx_prog(kf, kf->bprog_fd, false, false);
		return err;
	}
	if ((err = tcx_prog(kf, kf->prog_fd, false, true)))
		return err;
	return tcx_prog(kf, kf->bprog_fd, false, false);
}

static int link_detach(int link_fd)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.link_detach.link_fd = (uint32_t)link_fd;
	return kf_bpf(BPF_LINK_DETACH, &a);
}

/* The backstop's link pin and its program (by the link's program id). */
static int backstop_get(struct kf_bench *kf)
{
	struct bpf_link_info li;
	union bpf_attr a;
	int err;

	kf->blink_fd = kf_pin_get(KFB_PINS "/kf_backstop");
	if (kf->blink_fd < 0)
		return kf->blink_fd;
	memset(&li, 0, sizeof(li));
	memset(&a, 0, sizeof(a));
	a.info.bpf_fd = (uint32_t)kf->blink_fd;
	a.info.info_len = sizeof(li);
	a.info.info = (uintptr_t)&li;
	if ((err = kf_bpf(BPF_OBJ_GET_INFO_BY_FD, &a)))
		return err;
	memset(&a, 0, sizeof(a));
	a.prog_id = li.prog_id;
	kf->bprog_fd = kf_bpf(BPF_PROG_GET_FD_BY_ID, &a);
	return kf->bprog_fd < 0 ? kf->bprog_fd : 0;
}

bool kf_hook_open(struct session *s)
{
	struct kf_bench *kf = &s->kf;
	int err;

	if (kf->hook_ready || kf->hook_fixed)
		return true;
	if (!kf->attached)
		return false;
	kf->hook_on = true; /* the tool's link */
	kf->ifindex = (int)if_nametoindex(NETNS_DEV);
	kf->prog_fd = kf_pin_get(KFB_PINS "/kf_prog");
	kf->link_fd = kf_pin_get(KFB_PINS "/kf_link");
	if (kf->prog_fd < 0 || !kf->ifindex) {
		snprintf(kf->hook_why, sizeof(kf->hook_why), "pin " KFB_PINS "/kf_prog: %s",
			 strerror(kf->prog_fd < 0 ? -kf->prog_fd : errno));
		kf->hook_fixed = true;
		return false;
	}
	if (kf->link_fd < 0) {
		/* A clsact filter (a kernel before 6.6): the bench does not take it off. */
		snprintf(kf->hook_why, sizeof(kf->hook_why),
			 "the program is attached with a clsact filter (no tcx link: a kernel before "
			 "6.6), which the bench leaves on the device for the whole run, so every "
			 "backend on the kernel's path passes it");
		kf->hook_fixed = true;
		return false;
	}
	if ((err = backstop_get(kf))) {
		snprintf(kf->hook_why, sizeof(kf->hook_why),
			 "the backstop's link or program (" KFB_PINS "/kf_backstop): %s (the program "
			 "stays on the device for the whole run)",
			 strerror(-err));
		kf->hook_fixed = true;
		return false;
	}
	/* The program's link, then the backstop's (no template is sent meanwhile: the bench is
	 * not sending); the program put back if the second fails. */
	const char *what = NULL;
	if ((err = link_detach(kf->link_fd))) {
		what = "the tool's link";
	} else if ((err = link_detach(kf->blink_fd))) {
		(void)tcx_prog(kf, kf->prog_fd, true, true);
		what = "the backstop's link";
	}
	if (what) {
		snprintf(kf->hook_why, sizeof(kf->hook_why),
			 "BPF_LINK_DETACH of %s: %s (the program stays on the device for the whole "
			 "run)",
			 what, strerror(-err));
		kf->hook_fixed = true;
		return false;
	}
	kf->hook_on = false;
	kf->hook_ready = true;
	return true;
}

/* ---- auto+kfanout's credentials, on the sending thread -------------------------------------- */

#ifndef AF_XDP
#define AF_XDP 44
#endif

/* capget/capset on the calling thread (pid 0), the version with 64-bit sets. */
static int caps_io(bool set, struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };

	return syscall(set ? SYS_capset : SYS_capget, &h, d) ? -errno : 0;
}

int kf_unpriv(struct kf_bench *kf, bool on)
{
	struct __user_cap_data_struct d[2];
	int err;

	if (kf->unpriv_on == on)
		return 0;
	if ((err = caps_io(false, d)))
		goto fail;
	if (on) {
		kf->unpriv_saved[0] = d[0].effective;
		kf->unpriv_saved[1] = d[1].effective;
		d[0].effective = d[1].effective = 0;
	} else {
		d[0].effective = kf->unpriv_saved[0];
		d[1].effective = kf->unpriv_saved[1];
	}
	if ((err = caps_io(true, d)))
		goto fail;
	kf->unpriv_on = on;
	if (!on)
		return 0;
	/* What the thread has in effect now, as the kernel says it. */
	if ((err = caps_io(false, d)))
		goto fail;
	kf->unpriv_eff_seen |= (uint64_t)d[1].effective << 32 | d[0].effective;
	kf->unpriv_drops++;
	return 0;
fail:
	fprintf(stderr, "multisend-bench: %s the sending thread's capabilities (auto+kfanout): %s\n",
		on ? "clearing" : "restoring", strerror(-err));
	return err;
}

void kf_unpriv_check(struct kf_bench *kf, const struct ms_config *cfg)
{
	int fd = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	struct ms_config x = *cfg;
	struct ms_ctx *ctx = NULL;

	kf->unpriv_xsk_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	/* The xdp backend alone, as AUTO's context would have set it up among its candidates. */
	x.backend = MS_BACKEND_XDP;
	x.flags |= MS_CFG_NO_FALLBACK;
	x.workers = 0;
	x.flags &= ~(uint32_t)MS_CFG_OFFLOAD;
	kf->unpriv_xdp_err = ms_ctx_new(&ctx, &x);
	ms_ctx_free(ctx);
	kf->unpriv_checked = true;
}

int kf_hook(struct kf_bench *kf, enum variant_id v)
{
	const bool on = variant_is_kfanout(v);
	int err;

	/* The bench's capabilities back before it touches the device (and for every variant
	 * but auto+kfanout); cleared again after. */
	if (v != V_AUTO_KF && (err = kf_unpriv(kf, false)))
		return err;
	if (kf->hook_ready && kf->hook_on != on) {
		uint64_t t0 = now_ns();

		if ((err = prog_attach(kf, on))) {
			fprintf(stderr, "multisend-bench: %s the kernel fan-out's program %s " NETNS_DEV
					": %s\n",
				on ? "attaching" : "detaching", on ? "to" : "from", strerror(-err));
			return err;
		}
		kf->toggle_ns += now_ns() - t0;
		kf->toggles++;
		kf->hook_on = on;
	}
	return v == V_AUTO_KF ? kf_unpriv(kf, true) : 0;
}

void kf_hook_close(struct session *s)
{
	struct kf_bench *kf = &s->kf;

	(void)kf_unpriv(kf, false);
	if (!kf->attached)
		return; /* nothing was opened */
	if (kf->hook_ready && kf->hook_on)
		(void)prog_attach(kf, false);
	kf->hook_on = false;
	kf->hook_ready = false;
	if (kf->prog_fd >= 0)
		close(kf->prog_fd);
	if (kf->link_fd >= 0)
		close(kf->link_fd);
	if (kf->bprog_fd >= 0)
		close(kf->bprog_fd);
	if (kf->blink_fd >= 0)
		close(kf->blink_fd);
	kf->prog_fd = kf->link_fd = kf->bprog_fd = kf->blink_fd = -1;
}
