/* rg_workers.c - --workers N: one stack context per worker thread, fed by
 * the thread that reads the source (file or live).
 *
 * Shared nothing in the stack: each worker owns its context, its counters
 * and its entry maps; the
 * reading thread maps every frame to a worker with the symmetric RSS hash
 * (rg_rss.h) on the outer addresses (RG_RSS_L3: a connection's IP
 * fragments, its other segments and both directions stay together) and
 * copies it into that worker's ring (rg_ring.h).
 *
 * Idle expiry follows the packet clock of the whole input, as with one
 * context: the reading thread applies the feeder's rule (an expire call at
 * the first frame of every new second of packet time) and puts a clock tick
 * into every ring at that point of the frame order; workers expire on ticks
 * only.  Every instance so sees the expire calls at the same points among
 * its own packets as in a single context, and ends the same way.
 *
 * One NF for all workers, so that its files are those of one context: every
 * observer call reaches it under a mutex, with the instance's uid made
 * unique across workers ((uid - 1) * N + W + 1: the worker is uid - 1
 * modulo N).  The stack work runs in parallel; the NF's is serialised.
 *
 * Multi-queue sources (DPDK, rg_source_ops.queues): the source opens one
 * queue per worker and runs the workers on its own cores (lcores).  With
 * RSS in the NIC, each worker polls its queue and nobody distributes; else
 * this thread (the main lcore) runs the source's pump, which hashes the same
 * way and hands mbufs over in rte_rings.  Either way the frames carry the
 * source's TSC time, one monotonic clock for all workers: each worker's
 * feeder expires on its own frames' times (no ticks).
 *
 * Pinning (file, live): the reader on the first allowed core, worker i on
 * the (i + 1)-th, round-robin; by default only when there are at least
 * workers + 1 allowed cores (pinning more threads than cores together would
 * make them wait for each other), always with --pin. */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_ring.h"
#include "rg/rg_rss.h"
#include "rg/rg_timer.h"
#include "rg_driver.h"
#include "rg_rules_out.h"

#define TICK_DLT  (-1)        /* a ring record that is a clock tick, not a frame */
#define RING_SIZE (16u << 20) /* bytes per worker */

/* The NF the workers share. */
typedef struct shared_nf {
    rg_obs *nf;
    pthread_mutex_t mu;
    unsigned n; /* workers */
} shared_nf;

typedef struct worker {
    const opts *o;
    const rg_stack_desc *stack;
    unsigned id;
    rg_ring ring;
    int ring_ok;
    _Atomic int done; /* the reader has pushed everything */
    rg_counter counter;
    int counter_ok;
    shared_nf *snf;
    rg_obs shim; /* forwards to snf->nf */
    obs_chain ch;
    rg_obs obs;
    void *ctx;
    rg_entry_links lm;
    feeder fd;
    uint64_t *live_per;
    pthread_t thread;
    int started;
    /* multi-queue sources: the queue this worker reads */
    const rg_source_ops *io;
    rg_source *src;
    struct qshared *qs;
    int failed; /* the source reported an error on this queue */
} worker;

/* What the queue workers share: the end, and --count under NIC RSS (frames
 * claimed by all workers together). */
typedef struct qshared {
    _Atomic int done;
    _Atomic uint64_t taken;
    uint64_t limit; /* UINT64_MAX: none */
    int hw;         /* RG_SRCQ_HW: workers poll the NIC and claim frames */
} qshared;

/* f with its uid unique across workers. */
static rg_flow_info remap(const worker *w, const rg_flow_info *f)
{
    rg_flow_info g = *f;
    g.uid = (f->uid - 1) * w->snf->n + w->id + 1;
    return g;
}

static void shim_call(void *self, const rg_call *c)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_call) return;
    rg_call c2 = *c;
    rg_flow_info g;
    if (c->flow) {
        g = remap(w, c->flow);
        c2.flow = &g;
    }
    pthread_mutex_lock(&w->snf->mu);
    nf->on_call(nf->self, &c2);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_open) return;
    rg_flow_info g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_open(nf->self, &g, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_packet) return;
    rg_flow_info g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_packet(nf->self, &g, dir, len, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_close) return;
    rg_flow_info g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_close(nf->self, &g, reason, complete, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                     uint32_t at, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_gap) return;
    rg_flow_info g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_gap(nf->self, &g, dir, seq, len, at, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_clock_jump(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                            int fwd)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_clock_jump) return;
    pthread_mutex_lock(&w->snf->mu);
    nf->on_clock_jump(nf->self, pkt_no, pkt_ts_ns, clock_ns, fwd);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy,
                        uint64_t asked, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_memcap) return;
    rg_flow_info g;
    if (f) g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_memcap(nf->self, f ? &g : NULL, layer, policy, asked, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void shim_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                         uint32_t new_bytes, uint64_t ts_ns)
{
    worker *w = self;
    const rg_obs *nf = w->snf->nf;
    if (!nf->on_overlap) return;
    rg_flow_info g = remap(w, f);
    pthread_mutex_lock(&w->snf->mu);
    nf->on_overlap(nf->self, &g, dir, seq, len, new_bytes, ts_ns);
    pthread_mutex_unlock(&w->snf->mu);
}

static void process(worker *w, const rg_frame *f)
{
    if (f->dlt == TICK_DLT)
        w->stack->expire(w->ctx, f->ts_ns);
    else
        rg_feed(&w->fd, f);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (;;) {
        /* read done first: what was pushed before it was set is drained below */
        int fin = atomic_load_explicit(&w->done, memory_order_acquire);
        unsigned got = 0;
        rg_frame f;
        while (rg_ring_peek(&w->ring, &f)) {
            process(w, &f);
            if (++got % RG_BURST == 0) rg_ring_release(&w->ring);
        }
        rg_ring_release(&w->ring);
        if (!got) {
            if (fin) break;
            sched_yield();
        }
    }
    return NULL;
}

static uint64_t mono_ns(void);

/* A worker reading its own queue of a multi-queue source (on the source's core). */
static int qworker_main(void *arg)
{
    worker *w = arg;
    qshared *qs = w->qs;
    rg_frame burst[RG_BURST];
    for (;;) {
        /* done first: with software distribution, what was handed over before it is drained */
        int fin = atomic_load_explicit(&qs->done, memory_order_acquire);
        if (fin && qs->hw) break; /* the NIC's queues are not ours to drain */
        int n = w->io->next_burst_q(w->src, w->id, burst, RG_BURST);
        if (n < 0) {
            w->failed = n == RG_SRC_ERROR;
            break;
        }
        if (!n) {
            if (fin) break;
            sched_yield(); /* idle: cores may be shared (a busy poll would starve the others) */
            continue;
        }
        unsigned use = (unsigned)n;
        if (qs->hw && qs->limit != UINT64_MAX) {
            uint64_t t = atomic_fetch_add(&qs->taken, (uint64_t)n);
            use = t >= qs->limit ? 0 : qs->limit - t < use ? (unsigned)(qs->limit - t) : use;
        }
        for (unsigned i = 0; i < use; i++) rg_feed(&w->fd, &burst[i]);
    }
    return 0;
}

/* The reader's loop for a multi-queue source: pump (software distribution) or wait. */
static int pump_queues(const opts *o, const rg_source_ops *io, rg_source *src, qshared *qs,
                       volatile sig_atomic_t *stop)
{
    uint64_t left = o->count ? o->count : UINT64_MAX;
    uint64_t t_end = o->duration_ns ? mono_ns() + o->duration_ns : 0;
    for (;;) {
        if (*stop || (t_end && mono_ns() >= t_end)) return RG_SRC_END;
        if (qs->hw) { /* the workers read and count */
            if (atomic_load(&qs->taken) >= qs->limit) return RG_SRC_END;
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            continue;
        }
        if (!left) return RG_SRC_END;
        int n = io->pump(src, left < RG_BURST ? (unsigned)left : RG_BURST);
        if (n < 0) return n;
        if (!n) sched_yield();
        left -= (uint64_t)n;
    }
}

/* Pin the calling thread or t to the k-th allowed core (round-robin). */
static void pin(pthread_t t, const cpu_set_t *allowed, unsigned k)
{
    int n = CPU_COUNT(allowed);
    if (n <= 0) return;
    unsigned want = k % (unsigned)n;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, allowed) && want-- == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(t, sizeof one, &one); /* best effort: a refusal only costs speed */
            return;
        }
}

static int worker_open(worker *w, shared_nf *snf, const rg_linkinfo *li, int mq, char *err,
                       size_t errlen)
{
    const opts *o = w->o;
    const rg_stack_desc *stack = w->stack;
    w->ring_ok = mq || rg_ring_init(&w->ring, RING_SIZE) == RG_OK; /* mq: the source's queues */
    w->counter_ok = w->ring_ok && rg_counter_init(&w->counter, stack) == RG_OK;
    if (!w->counter_ok) {
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    if (rg_entry_links_init(&w->lm, stack, li) != RG_OK) {
        snprintf(err, errlen, "%s: link type %d is not supported", o->capture, li->dlt);
        return 1;
    }
    w->snf = snf;
    w->shim = (rg_obs){w,        shim_call,       shim_open,   shim_packet,
                       shim_close, shim_gap, shim_clock_jump, shim_memcap, shim_overlap};
    w->obs = rg_make_observer(&w->counter, snf->nf ? &w->shim : NULL,
                              strcmp(o->nf, RG_NF_NONE) != 0, &w->ch);
    rg_ctx_cfg cfg = rg_ctx_cfg_of(o, &w->obs);
    w->ctx = stack->ctx_new(&cfg);
    w->live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *w->live_per);
    if (!w->ctx || !w->live_per) {
        snprintf(err, errlen, "cannot create the %s stack context (out of memory?)", stack->name);
        return 1;
    }
    /* expiry comes as ticks from the reader: the feeder never expires by itself; but for
     * multi-queue sources, whose frames carry one monotonic clock */
    rg_feeder_init(&w->fd, stack, &w->lm, w->ctx, mq ? o->no_timeouts : 1, &w->counter.n);
    w->fd.prog = w->id == 0 ? o->prog : NULL; /* warnings once */
    w->fd.capture = o->capture;
    return 0;
}

static void worker_free(worker *w)
{
    if (w->ctx) w->stack->ctx_free(w->ctx);
    free(w->live_per);
    if (w->counter_ok) rg_counter_free(&w->counter);
    if (w->ring_ok && !w->io) rg_ring_free(&w->ring);
}

/* Hand one record to a worker, waiting while its ring is full; 0 or
 * RG_EINVAL (a frame larger than half a ring). */
static int push(worker *w, const rg_frame *f)
{
    int rc;
    while ((rc = rg_ring_push(&w->ring, f)) == 0) sched_yield();
    return rc == 1 ? 0 : rc;
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * NS_PER_S + (uint64_t)t.tv_nsec;
}

/* Read the source and distribute; the source's status (RG_SRC_END/ERROR). */
static int distribute(const opts *o, const rg_source_ops *io, rg_source *src, worker *ws,
                      unsigned nw, volatile sig_atomic_t *stop, uint64_t *per, uint64_t *lost,
                      rg_clock *clk, shared_nf *snf)
{
    static const uint8_t none = 0;
    rg_rss_dist dist;
    rg_rss_dist_init(&dist, nw, RG_RSS_L3);
    uint64_t next_expire = o->no_timeouts ? UINT64_MAX : 0;
    int expire_on = 0;
    uint64_t left = o->count ? o->count : UINT64_MAX;
    uint64_t t_end = o->duration_ns ? mono_ns() + o->duration_ns : 0;
    rg_frame burst[RG_BURST];
    uint64_t frames = 0;
    for (;;) {
        if (!left || *stop || (t_end && mono_ns() >= t_end)) return RG_SRC_END;
        int n = io->next_burst(src, burst, left < RG_BURST ? (unsigned)left : RG_BURST);
        if (n < 0) return n;
        for (int i = 0; i < n; i++) {
            /* the one flow clock of the input (a single context's rule, rg_clock): workers get
             * frames dated in it, so a jump is decided once, here, and every worker's clock
             * follows the same time whichever packets it gets */
            rg_frame *f = &burst[i];
            frames++;
            if (RG_UNLIKELY(rg_clock_packet(clk, f->ts_ns)) && snf->nf && snf->nf->on_clock_jump) {
                pthread_mutex_lock(&snf->mu);
                snf->nf->on_clock_jump(snf->nf->self, frames, f->ts_ns, clk->now, clk->last_fwd);
                pthread_mutex_unlock(&snf->mu);
            }
            f->ts_ns += clk->off;
            if (f->ts_ns >= next_expire) { /* the feeder's expiry rule (rg_feed) */
                if (expire_on) {
                    rg_frame tick = {.data = &none, .ts_ns = f->ts_ns, .dlt = TICK_DLT};
                    for (unsigned k = 0; k < nw; k++) push(&ws[k], &tick);
                }
                expire_on = 1;
                next_expire = f->ts_ns + NS_PER_S;
            }
            unsigned k = rg_rss_dist_worker(&dist, f);
            if (push(&ws[k], f))
                (*lost)++; /* larger than half a ring (8 MB): cannot be handed over */
            else
                per[k]++;
        }
        left -= (uint64_t)n;
    }
}

/* The workers' counts added up, after their flush. */
static void add_counts(rg_counts *t, const rg_counts *c, unsigned nlayers)
{
    t->calls += c->calls;
    t->opened += c->opened;
    t->closed += c->closed;
    t->payload_bytes += c->payload_bytes;
    t->gaps += c->gaps;
    t->gap_bytes += c->gap_bytes;
    for (unsigned i = 0; i < nlayers; i++) {
        t->layer[i].opened += c->layer[i].opened;
        t->layer[i].one_packet += c->layer[i].one_packet;
        for (int r = 0; r < 4; r++) t->layer[i].closed[r] += c->layer[i].closed[r];
    }
}

int rg_run_workers(const opts *o, const rg_stack_desc *stack, volatile sig_atomic_t *stop)
{
    char err[512];
    const rg_source_ops *io = rg_source_find(o->io);
    rg_source_cfg scfg = {.name = o->capture,
                          .filter = o->filter,
                          .snaplen = o->snaplen,
                          .promisc = o->promisc,
                          .buffer_mb = o->buffer_mb,
                          .argc = o->eal_argc,
                          .argv = o->eal_argv,
                          .stop = stop,
                          .queues = io->next_burst_q ? o->workers : 0};
    rg_source *src = io->open(&scfg, err, sizeof err);
    if (!src) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    unsigned nw = o->workers;
    int qmode = io->queues ? io->queues(src) : RG_SRCQ_ONE;
    int mq = qmode != RG_SRCQ_ONE;
    qshared qs = {.limit = o->count && qmode == RG_SRCQ_HW ? o->count : UINT64_MAX,
                  .hw = qmode == RG_SRCQ_HW};
    atomic_init(&qs.done, 0);
    atomic_init(&qs.taken, 0);
    worker *ws = calloc(nw, sizeof *ws);
    uint64_t *per = calloc(nw, sizeof *per);
    uint64_t *live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *live_per);
    rg_counter total;
    int total_ok = rg_counter_init(&total, stack) == RG_OK;
    shared_nf snf = {.n = nw};
    pthread_mutex_init(&snf.mu, NULL);
    int status = 0;
    if (!ws || !per || !live_per || !total_ok) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        status = 1;
    }
    if (!status && o->nfd) {
        rg_nf_cfg ncfg = {o->out, o->nf_flag};
        snf.nf = o->nfd->create(stack, &ncfg, err, sizeof err);
        if (!snf.nf) {
            fprintf(stderr, "%s: --nf %s: %s\n", o->prog, o->nf, err);
            status = 1;
        }
    }
    for (unsigned i = 0; !status && i < nw; i++) {
        ws[i].o = o;
        ws[i].stack = stack;
        ws[i].id = i;
        atomic_init(&ws[i].done, 0);
        if (mq) {
            ws[i].io = io;
            ws[i].src = src;
            ws[i].qs = &qs;
        }
        if (worker_open(&ws[i], &snf, io->link(src), mq, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            status = 1;
        }
    }
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    int pinned = !mq && sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
                 (o->pin || (unsigned)CPU_COUNT(&allowed) >= nw + 1);
    if (pinned) pin(pthread_self(), &allowed, 0);
    for (unsigned i = 0; !status && i < nw; i++) {
        if (mq) {
            if (io->launch(src, i, qworker_main, &ws[i], err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", o->prog, err);
                status = 1;
            } else {
                ws[i].started = 1;
            }
            continue;
        }
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i])) {
            fprintf(stderr, "%s: cannot start worker %u\n", o->prog, i);
            status = 1;
        } else {
            ws[i].started = 1;
            if (pinned) pin(ws[i].thread, &allowed, i + 1);
        }
    }
    uint64_t lost = 0;
    rg_clock clk;
    rg_clock_init(&clk, o->max_clock_jump_ns);
    int n = status ? RG_SRC_END
            : mq   ? pump_queues(o, io, src, &qs, stop)
                   : distribute(o, io, src, ws, nw, stop, per, &lost, &clk, &snf);
    atomic_store_explicit(&qs.done, 1, memory_order_release);
    for (unsigned i = 0; ws && i < nw; i++) {
        atomic_store_explicit(&ws[i].done, 1, memory_order_release);
        if (ws[i].started && mq) io->join(src, i);
        if (ws[i].started && !mq) pthread_join(ws[i].thread, NULL);
        if (mq) per[i] = ws[i].fd.pkts;
        if (ws[i].failed && n != RG_SRC_ERROR) n = RG_SRC_ERROR;
    }
    if (n == RG_SRC_ERROR) {
        /* keep what was read: flush and report it, but fail */
        uint64_t read = lost; /* frames read before the error: the error is at the next one */
        for (unsigned i = 0; i < nw; i++) read += per[i];
        fprintf(stderr, "%s: %s: packet %" PRIu64 ": %s\n", o->prog, o->capture, read + 1,
                io->error(src));
        status = 1;
    }
    if (lost) fprintf(stderr, "%s: %" PRIu64 " frames too large for a worker's ring\n", o->prog, lost);
    if (!status || n == RG_SRC_ERROR) {
        summary s = {.skipped = lost};
        uint64_t live = 0;
        for (unsigned i = 0; i < nw; i++) {
            worker *w = &ws[i];
            const rg_counts *c = &w->counter.n;
            live += c->opened - c->closed;
            rg_live_before_flush(stack, &w->counter.n, w->live_per);
            for (unsigned l = 0; l < stack->nlayers; l++) live_per[l] += w->live_per[l];
            stack->flush(w->ctx);
            add_counts(&total.n, c, stack->nlayers);
            s.pkts += w->fd.pkts;
            s.bytes += w->fd.bytes;
            s.skipped += w->fd.skipped;
            s.skipped_linktype += w->fd.skipped_linktype;
            if (w->fd.linktype_what[0]) s.linktype_what = w->fd.linktype_what;
            const rg_stats *st = stack->stats ? stack->stats(w->ctx) : NULL;
            s.errors += (st ? rg_stats_total_errors(st) : 0) + w->fd.skipped;
        }
        if (snf.nf && o->nfd->finish(snf.nf)) status = 1;
        snf.nf = NULL;
        rg_source_stats sst;
        io->stats(src, &sst);
        s.link = ws[0].lm.m[0].li.name;
        s.opened = total.n.opened;
        s.closed = total.n.closed;
        s.live = live;
        s.calls = total.n.calls;
        s.payload = total.n.payload_bytes;
        s.errors += lost;
        s.n = &total.n;
        s.live_per = live_per;
        /* the workers' counters added up (in a copy of worker 0's: --stats prints each) */
        const rg_stats *st0 = stack->stats ? stack->stats(ws[0].ctx) : NULL;
        rg_stats merged;
        rg_layer_stats *mlayers = NULL;
        if (st0) {
            merged = *st0;
            mlayers = malloc((st0->nlayers ? st0->nlayers : 1) * sizeof *mlayers);
            if (mlayers) {
                memcpy(mlayers, st0->layer, st0->nlayers * sizeof *mlayers);
                merged.layer = mlayers;
                for (unsigned i = 1; i < nw; i++) rg_stats_add(&merged, stack->stats(ws[i].ctx));
            }
        }
        s.st = mlayers ? &merged : st0;
        for (unsigned i = 1; s.st && i < nw; i++) rg_rules_add(s.st, stack->stats(ws[i].ctx));
        if (!s.linktype_what) s.linktype_what = "";
        s.gaps = total.n.gaps;
        s.gap_bytes = total.n.gap_bytes;
        s.li = &ws[0].lm.m[0].li;
        s.has_dropped = io != &rg_source_file;
        s.dropped = sst.dropped;
        s.clock_fwd = clk.jumps_fwd; /* the reading thread's clock decided them */
        s.clock_back = clk.jumps_back;
        s.nworkers = nw;
        s.worker_pkts = per;
        rg_print_summary(o, stack, &s);
        free(mlayers);
        fflush(stdout);
        for (unsigned i = 0; o->stats && stack->stats && i < nw; i++) {
            fprintf(stderr, "worker %u:\n", i);
            rg_stats_print(stack->stats(ws[i].ctx), stderr);
        }
    }
    for (unsigned i = 0; ws && i < nw; i++) worker_free(&ws[i]);
    if (snf.nf) o->nfd->finish(snf.nf); /* a failed start: close what it wrote */
    pthread_mutex_destroy(&snf.mu);
    free(ws);
    free(per);
    free(live_per);
    if (total_ok) rg_counter_free(&total);
    io->close(src);
    return status;
}
