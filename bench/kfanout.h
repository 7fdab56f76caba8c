/* SPDX-License-Identifier: MIT */
/*
 * The kernel fan-out in the bench (--sink netns-xdp): kfanout, raw-kfanout and
 * raw-sendto+hook need the program of lib/be/kfanout attached to the namespace's veth.
 *
 * main (root) attaches it before the sending thread starts, by running the administrator's
 * tool in the namespace: nsenter --net=/run/netns/NAME multisend-kfanout attach msb0, then
 * policy add msb0 NETNS_REMOTE/32 NETNS_FIRST_PORT-65535 (exactly the sink's destinations).
 * Which tool: the one of the build tree the bench runs from (<bench's directory>/../tools/
 * multisend-kfanout, with --object <bench's directory>/../kfanout.bpf.o), else
 * multisend-kfanout on PATH (an installed one loads its installed object). main detaches it
 * after the sending thread ended, on every exit path (SIGINT/SIGTERM/SIGHUP too), before the
 * namespace is deleted. The pins are named after the interface (KF_PIN_ROOT/msb0), so one
 * bench at a time can measure the kernel fan-out; another gets the tool's "already
 * attached" as the reason.
 *
 * The sending thread keeps the program off the device but for the variants that need it
 * (kf_hook): the tool's link is detached once, then the pinned program is attached and
 * detached with BPF_PROG_ATTACH/DETACH (tcx, Linux 6.6) between timed runs, never inside
 * one. The maps stay, so the library's context and raw-kfanout's slots stay valid. Every
 * other backend therefore runs as without kfanout, and raw-sendto+hook against raw-sendto
 * is what the program costs a datagram that is not a template.
 */
#ifndef BENCH_KFANOUT_H
#define BENCH_KFANOUT_H

#include "bench.h"
#include "netns.h"

/* main, after netns_create: attach when a kfanout variant is wanted (else nothing).
 * s->kf.attached, or s->kf.why says why not. */
void kf_setup(struct session *s, const struct netns *ns);
/* main, before netns_destroy: detach what kf_setup attached. 0, or -1 after saying what is
 * left and how to remove it. */
int kf_teardown(struct session *s);
/* Sending thread (in the namespace), in variants_open: open the pinned program and link so
 * that the hook can be switched. false with s->kf.hook_why when it cannot. */
bool kf_hook_open(struct session *s);
/* Sending thread: the program on the device when v needs it, off otherwise (a no-op when it
 * is already so, or when nothing is attached). 0 or -errno. */
int kf_hook(struct kf_bench *kf, enum variant_id v);
/* Sending thread, at its end: the program off, the descriptors closed (capabilities back
 * first, kf_unpriv). */
void kf_hook_close(struct session *s);
/* Sending thread: auto+kfanout's credentials. on: the effective capability set cleared (the
 * permitted set kept), as a publisher with no capabilities has it; off: the set restored.
 * Capabilities are per thread (capset(2) on the calling thread only): the bench's other
 * threads keep theirs, and threads the library starts meanwhile (ms_ctx_new's workers)
 * inherit the cleared set for their life. kf_hook switches them with the hook, before each
 * timed batch or call: on for auto+kfanout, off for every other variant; rig_open and
 * rig_close switch them off. 0 or -errno (nothing changed). */
int kf_unpriv(struct kf_bench *kf, bool on);
/* Sending thread, with kf_unpriv on, after auto+kfanout's context was made: what this thread
 * may do with AF_XDP now (socket(2), and ms_ctx_new of the xdp backend alone with cfg's xdp
 * settings), kept in kf->unpriv_* for the report. */
void kf_unpriv_check(struct kf_bench *kf, const struct ms_config *cfg);

/* bpf(2) without libbpf (the bench does not link it): cmd's result, or -errno; and a pinned
 * object opened by its path (BPF_OBJ_GET). For the hook here and raw-kfanout's maps. */
union bpf_attr;
int kf_bpf(int cmd, union bpf_attr *a);
int kf_pin_get(const char *path);

#endif
