/* rg_bench_workers.c - --bench --workers N: the in-memory benchmark on N
 * worker threads, each processing the share of the capture a symmetric-RSS
 * NIC would give it.
 *
 * The capture is loaded and split by the symmetric Toeplitz hash of the
 * outer addresses (rg_rss, RG_RSS_L3, as the DPDK and file/live workers
 * split) before any timing, as a NIC splits in hardware, each worker's
 * frames copied into a buffer of its own (a queue's buffers); then every pass
 * starts N threads, each with its own context, pinned to core i of the
 * allowed cores (round-robin), waits until all are ready and releases them
 * together.  Reported: the pass's wall time from the release to the last
 * worker's end (aggregate throughput), and each worker's own thread CPU time
 * (what it would take on a core of its own: robust to other load on a shared
 * machine).  The best pass of each counts, as in --bench. */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_rss.h"
#include "rg_driver.h"

typedef struct bworker {
    const opts *o;
    const rg_stack_desc *stack;
    rg_entry_links *lm;
    rg_frame *frames;
    size_t n;
    unsigned id;
    _Atomic int *ready, *go;
    uint64_t cpu_ns, wall_end;
    uint64_t payload, opened;
    int failed;
} bworker;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * NS_PER_S + (uint64_t)t.tv_nsec;
}

static void pin_self(unsigned k)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) || CPU_COUNT(&allowed) <= 0) return;
    unsigned want = k % (unsigned)CPU_COUNT(&allowed);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && want-- == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
}

static void *bworker_main(void *arg)
{
    bworker *w = arg;
    const opts *o = w->o;
    pin_self(w->id);
    rg_counter counter;
    void *ctx = NULL;
    if (rg_counter_init(&counter, w->stack) == RG_OK) {
        rg_obs obs = rg_make_observer(&counter, NULL, strcmp(o->nf, RG_NF_NONE) != 0, NULL);
        rg_ctx_cfg cfg = rg_ctx_cfg_of(o, &obs);
        ctx = w->stack->ctx_new(&cfg);
        if (ctx) {
            feeder fd;
            rg_feeder_init(&fd, w->stack, w->lm, ctx, o->no_timeouts, &counter.n);
            atomic_fetch_add(w->ready, 1);
            while (!atomic_load_explicit(w->go, memory_order_acquire))
                sched_yield();
            uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            for (size_t i = 0; i < w->n; i += o->burst) { /* bursts as rg_main's --bench */
                const unsigned k = (unsigned)(w->n - i < o->burst ? w->n - i : o->burst);
                rg_feed_prefetch(&fd, &w->frames[i], k);
                rg_feed_burst(&fd, &w->frames[i], k);
            }
            w->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
            w->wall_end = clock_ns(CLOCK_MONOTONIC);
            rg_counter_fold(&counter, w->stack->stats ? w->stack->stats(ctx) : NULL);
            w->stack->flush(ctx);
            w->payload = counter.n.payload_bytes;
            w->opened = counter.n.opened;
            w->stack->ctx_free(ctx);
        }
        rg_counter_free(&counter);
    }
    if (!ctx) {
        w->failed = 1;
        atomic_fetch_add(w->ready, 1);
    }
    return NULL;
}

int rg_bench_workers(const opts *o, const rg_stack_desc *stack, rg_entry_links *lm,
                     const rg_capture *cap)
{
    unsigned nw = o->workers;
    bworker *ws = calloc(nw, sizeof *ws);
    rg_frame *split = calloc(cap->count ? cap->count : 1, sizeof *split);
    size_t *at = calloc(nw + 1, sizeof *at);
    unsigned *of = calloc(cap->count ? cap->count : 1, sizeof *of);
    pthread_t *th = calloc(nw, sizeof *th);
    uint64_t *best_cpu = calloc(nw, sizeof *best_cpu);
    int rc = 0;
    if (!ws || !split || !at || !of || !th || !best_cpu) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        rc = 1;
    }
    /* the NIC's split, before any timing: frames grouped by worker, in capture order */
    rg_rss_dist dist;
    rg_rss_dist_init(&dist, nw, RG_RSS_L3);
    for (size_t i = 0; !rc && i < cap->count; i++) {
        of[i] = rg_rss_dist_worker(&dist, &cap->frames[i]);
        at[of[i] + 1]++;
    }
    for (unsigned k = 0; !rc && k < nw; k++)
        at[k + 1] += at[k];
    for (unsigned k = 0; !rc && k < nw; k++) {
        ws[k].frames = split + at[k];
        ws[k].n = at[k + 1] - at[k];
        best_cpu[k] = UINT64_MAX;
    }
    for (size_t i = 0; !rc && i < cap->count; i++)
        split[at[of[i]]++] = cap->frames[i]; /* at[k]: now worker k's fill cursor */
    /* each worker's frames copied into a buffer of its own, in order, as a NIC writes each
     * queue's packets into that queue's buffers: a worker then reads memory sequentially, not
     * every other frame of the capture's buffer */
    uint8_t **own = calloc(nw, sizeof *own);
    if (!own) rc = 1;
    for (unsigned k = 0; !rc && k < nw; k++) {
        size_t len = 0;
        for (size_t i = 0; i < ws[k].n; i++)
            len += (ws[k].frames[i].caplen + 7u) & ~(size_t)7;
        own[k] = malloc(len ? len : 1);
        if (!own[k]) {
            fprintf(stderr, "%s: out of memory\n", o->prog);
            rc = 1;
            break;
        }
        size_t off = 0;
        for (size_t i = 0; i < ws[k].n; i++) {
            rg_frame *f = &ws[k].frames[i];
            memcpy(own[k] + off, f->data, f->caplen);
            f->data = own[k] + off;
            off += (f->caplen + 7u) & ~(size_t)7;
        }
    }
    uint64_t best_wall = UINT64_MAX, payload = 0, opened = 0;
    for (uint64_t pass = 0; !rc && pass < o->passes; pass++) {
        _Atomic int ready = 0, go = 0;
        unsigned started = 0;
        for (unsigned k = 0; k < nw; k++) {
            ws[k] = (bworker){o, stack, lm, ws[k].frames, ws[k].n, k, &ready, &go, 0, 0, 0, 0, 0};
            if (pthread_create(&th[k], NULL, bworker_main, &ws[k])) {
                fprintf(stderr, "%s: cannot start worker %u\n", o->prog, k);
                rc = 1;
                break;
            }
            started++;
        }
        while (atomic_load(&ready) < (int)started)
            sched_yield();
        uint64_t w0 = clock_ns(CLOCK_MONOTONIC);
        atomic_store_explicit(&go, 1, memory_order_release);
        uint64_t end = w0;
        payload = opened = 0;
        for (unsigned k = 0; k < started; k++) {
            pthread_join(th[k], NULL);
            if (ws[k].failed) {
                fprintf(stderr, "%s: cannot create the %s stack context (out of memory?)\n",
                        o->prog, stack->name);
                rc = 1;
            }
            if (ws[k].wall_end > end) end = ws[k].wall_end;
            if (ws[k].cpu_ns < best_cpu[k]) best_cpu[k] = ws[k].cpu_ns;
            payload += ws[k].payload;
            opened += ws[k].opened;
        }
        if (end - w0 < best_wall) best_wall = end - w0;
    }
    if (!rc) {
        double pkts = cap->count ? (double)cap->count : 1.0;
        uint64_t max_cpu = 0;
        for (unsigned k = 0; k < nw; k++)
            if (best_cpu[k] > max_cpu) max_cpu = best_cpu[k];
        /* aggregate: all packets over the wall time of the parallel phase; "cpu_bound": over
         * the slowest worker's own CPU time (each worker on a core of its own) */
        printf("{\"pkts\":%zu,\"workers\":%u,\"passes\":%" PRIu64 ",\"wall_ns_per_pkt\":%.2f,"
               "\"mpps\":%.3f,\"mpps_cpu_bound\":%.3f,\"payload_bytes\":%" PRIu64
               ",\"flows_opened\":%" PRIu64 ",\"worker_pkts\":[",
               cap->count, nw, o->passes, (double)best_wall / pkts, pkts * 1e3 / (double)best_wall,
               max_cpu ? pkts * 1e3 / (double)max_cpu : 0.0, payload, opened);
        for (unsigned k = 0; k < nw; k++)
            printf("%s%zu", k ? "," : "", ws[k].n);
        fputs("],\"worker_cpu_ns_per_pkt\":[", stdout);
        for (unsigned k = 0; k < nw; k++)
            printf("%s%.2f", k ? "," : "", ws[k].n ? (double)best_cpu[k] / (double)ws[k].n : 0.0);
        fputs("]}\n", stdout);
        fflush(stdout);
    }
    for (unsigned k = 0; own && k < nw; k++)
        free(own[k]);
    free(own);
    free(ws);
    free(split);
    free(at);
    free(of);
    free(th);
    free(best_cpu);
    return rc;
}
