/* srcdump.c - test tool: read frames from a packet source (rg_source.h) and
 * write them to a pcap file, so a test can compare what a live interface or
 * a DPDK port delivered with the capture replayed into it.
 *
 *   srcdump --io live|packet|afxdp|dpdk [--name IF|PORTS] [--filter BPF] [--snaplen N]
 *           [--promisc] [--count N] [--duration S] [--queues N] -w OUT.pcap
 *           [--opt NAME=VALUE]... [-- EAL ARGS]
 *
 * --opt: a source's own option (rg_source_opt_get), e.g. packet's fanout=l3.
 *
 * --queues N (N > 1, multi-queue sources: DPDK, packet): the source is opened with N
 * queues, as for N workers, and queue q's frames go to OUT.pcap.q (one
 * thread pumps and reads every queue in turn): what each worker would get.
 * packet: N sockets in one PACKET_FANOUT group.
 *
 * Prints "ready" on stderr once the source is open, and at the end one line
 * "frames=N bytes=B dropped=D" (and "detail=..." if the source says how it read).  SIGINT/SIGTERM
 * stop it (the file is complete). */
#include <pcap/pcap.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_source.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void dump_frames(pcap_dumper_t *dump, const rg_frame *fr, int n)
{
    for (int k = 0; k < n; k++) {
        struct pcap_pkthdr h;
        h.ts.tv_sec = (time_t)(fr[k].ts_ns / 1000000000u);
        h.ts.tv_usec = (suseconds_t)(fr[k].ts_ns % 1000000000u); /* nanoseconds: see open */
        h.caplen = fr[k].caplen;
        h.len = fr[k].len;
        pcap_dump((u_char *)dump, &h, fr[k].data);
    }
}

/* The line "frames=N bytes=B dropped=D" and, if the source says how it reads, "detail=...". */
static void print_stats(const rg_source_ops *ops, const rg_source *s)
{
    rg_source_stats st;
    ops->stats(s, &st);
    fprintf(stderr, "frames=%llu bytes=%llu dropped=%llu\n", (unsigned long long)st.frames,
            (unsigned long long)st.bytes, (unsigned long long)st.dropped);
    if (ops->detail) {
        char d[256];
        ops->detail(s, d, sizeof d);
        fprintf(stderr, "detail=%s\n", d);
    }
}

/* --queues N: every queue's frames into OUT.pcap.q; the status. */
static int dump_queues(const rg_source_ops *ops, rg_source *s, pcap_t *dead, const char *out,
                       unsigned nq, unsigned long long count, double duration)
{
    if (!ops->queues || nq > 64) {
        fprintf(stderr, "srcdump: --queues: the %s source has no queues\n", ops->name);
        ops->close(s);
        return 1;
    }
    int mode = ops->queues(s);
    pcap_dumper_t *d[64];
    for (unsigned q = 0; q < nq; q++) {
        char name[4096];
        snprintf(name, sizeof name, "%s.%u", out, q);
        d[q] = pcap_dump_open(dead, name);
        if (!d[q]) {
            fprintf(stderr, "srcdump: %s: %s\n", name, pcap_geterr(dead));
            for (unsigned k = 0; k < q; k++)
                pcap_dump_close(d[k]);
            ops->close(s);
            return 1;
        }
    }
    fprintf(stderr, "ready\nmode=%s\n", mode == RG_SRCQ_HW ? "hw" : "sw");
    double t0 = now_s();
    unsigned long long got = 0;
    int rc = 0, end = 0;
    rg_frame fr[RG_BURST];
    while (!end && (!count || got < count)) {
        if (duration > 0 && now_s() - t0 >= duration) break;
        if (mode == RG_SRCQ_SW) {
            unsigned want = RG_BURST;
            if (count && count - got < want) want = (unsigned)(count - got);
            int n = ops->pump(s, want);
            if (n < 0) break;
        }
        for (unsigned q = 0; q < nq; q++) {
            int n;
            while ((n = ops->next_burst_q(s, q, fr, RG_BURST)) > 0) {
                dump_frames(d[q], fr, n);
                got += (unsigned long long)n;
                if (mode == RG_SRCQ_SW) break; /* the ring gets more with the next pump */
            }
            if (n == RG_SRC_ERROR) {
                fprintf(stderr, "srcdump: %s\n", ops->error(s));
                rc = 1;
                end = 1;
            }
        }
    }
    print_stats(ops, s);
    for (unsigned q = 0; q < nq; q++)
        pcap_dump_close(d[q]);
    ops->close(s);
    return rc;
}

int main(int argc, char **argv)
{
    const char *io = "live", *out_path = NULL;
    rg_source_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.stop = &stop_flag;
    unsigned long long count = 0;
    double duration = 0;
    rg_source_kv kv[16];
    char *kvbuf[16];
    unsigned nkv = 0;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--promisc")) {
            cfg.promisc = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "srcdump: %s wants a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--io"))
            io = v;
        else if (!strcmp(a, "--name"))
            cfg.name = v;
        else if (!strcmp(a, "--filter"))
            cfg.filter = v;
        else if (!strcmp(a, "--snaplen"))
            cfg.snaplen = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--count"))
            count = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--duration"))
            duration = strtod(v, NULL);
        else if (!strcmp(a, "--queues"))
            cfg.queues = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "-w"))
            out_path = v;
        else if (!strcmp(a, "--opt") && strchr(v, '=') && nkv < 16) { /* NAME=VALUE */
            kvbuf[nkv] = strdup(v);
            *strchr(kvbuf[nkv], '=') = 0;
            kv[nkv] = (rg_source_kv){kvbuf[nkv], kvbuf[nkv] + strlen(kvbuf[nkv]) + 1};
            nkv++;
        } else {
            fprintf(stderr, "srcdump: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    cfg.kv = kv;
    cfg.nkv = nkv;
    cfg.argc = argc - i;
    cfg.argv = argv + i;
    /* the registry's sources (DPDK's only when linked: srcdump links it if built) */
    const rg_source_ops *ops = rg_source_find(io);
#ifdef RG_HAVE_DPDK
    if (!strcmp(io, "dpdk")) ops = &rg_source_dpdk;
#endif
    if (!ops) {
        fprintf(stderr, "srcdump: no source \"%s\" in this build\n", io);
        return 2;
    }
    if (!out_path) {
        fprintf(stderr, "srcdump: -w OUT.pcap is required\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char err[512];
    rg_source *s = ops->open(&cfg, err, sizeof err);
    if (!s) {
        fprintf(stderr, "srcdump: %s\n", err);
        return 1;
    }
    const rg_linkinfo *li = ops->link(s);
    pcap_t *dead =
        pcap_open_dead_with_tstamp_precision(li->dlt, 262144, PCAP_TSTAMP_PRECISION_NANO);
    pcap_dumper_t *dump = dead ? pcap_dump_open(dead, out_path) : NULL;
    if (!dump) {
        fprintf(stderr, "srcdump: %s: %s\n", out_path, dead ? pcap_geterr(dead) : "pcap");
        ops->close(s);
        return 1;
    }
    if (cfg.queues > 1) {
        int rc = dump_queues(ops, s, dead, out_path, cfg.queues, count, duration);
        pcap_dump_close(dump);
        pcap_close(dead);
        return rc;
    }
    fprintf(stderr, "ready\n");
    double t0 = now_s();
    unsigned long long got = 0;
    int rc = 0;
    rg_frame fr[RG_BURST];
    while (!count || got < count) {
        if (duration > 0 && now_s() - t0 >= duration) break;
        unsigned want = RG_BURST;
        if (count && count - got < want) want = (unsigned)(count - got);
        int n = ops->next_burst(s, fr, want);
        if (n == RG_SRC_END) break;
        if (n == RG_SRC_ERROR) {
            fprintf(stderr, "srcdump: %s\n", ops->error(s));
            rc = 1;
            break;
        }
        for (int k = 0; k < n; k++) {
            struct pcap_pkthdr h;
            h.ts.tv_sec = (time_t)(fr[k].ts_ns / 1000000000u);
            h.ts.tv_usec = (suseconds_t)(fr[k].ts_ns % 1000000000u); /* nanoseconds: see open */
            h.caplen = fr[k].caplen;
            h.len = fr[k].len;
            pcap_dump((u_char *)dump, &h, fr[k].data);
        }
        got += (unsigned long long)n;
    }
    print_stats(ops, s);
    pcap_dump_close(dump);
    pcap_close(dead);
    ops->close(s);
    return rc;
}
