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
 * NFs: every worker runs its own chain (rg_nfchain.h: --nf, --chain, and the
 * --control requests, which every worker applies between two of its packets),
 * with its per-flow NF state in it: nothing is locked on the packet path.
 * The ring records carry the input's frame number, which the NFs see as the
 * packet number; uids are unique in the run (worker K of N: (i - 1) * N + K + 1,
 * rg_uid_global).  The NFs' line records go to one shared file per output as
 * they are written (rg_out.c); what else they write goes into OUT/.rg-worker-K,
 * gathered at the end (rg_wmerge.c).
 * --write and --inline (live): the reading thread keeps a copy of every frame
 * and writes / sends on those that pass, in input order, once their workers
 * have stored their verdicts (wwrite).  --inline on DPDK queues: each worker
 * sends its own burst on through its TX queue (rg_source_ops.forward_q).
 *
 * Multi-queue sources (DPDK, rg_source_ops.queues): the source opens one
 * queue per worker and runs the workers on its own cores (lcores).  With
 * RSS in the NIC, each worker polls its queue and nobody distributes; else
 * this thread (the main lcore) runs the source's pump, which hashes the same
 * way and hands mbufs over in rte_rings.  Either way the frames carry the
 * source's TSC time, one monotonic clock for all workers: each worker's
 * feeder expires on its own frames' times (no ticks).  The packet source
 * (AF_PACKET) is fed the same way as NIC RSS queues: one socket per worker in
 * a PACKET_FANOUT group, each worker on a thread the source starts, frames
 * stamped by the kernel's clock.
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
#include "rg/rg_trace.h"
#include "rg_live.h"
#include "rg_nfchain.h"
#include "rg_rules_out.h"
#include "rg_wmerge.h"

#define TICK_DLT  (-1)        /* a ring record that is a clock tick, not a frame */
#define RING_SIZE (16u << 20) /* bytes per worker */

typedef struct worker {
    const opts *o;
    const rg_stack_desc *stack;
    unsigned id;
    rg_ring ring;
    int ring_ok;
    _Atomic int done; /* the reader has pushed everything */
    rg_counter counter;
    int counter_ok;
    rg_chain *chain;     /* this worker's NFs (NULL: the counters alone) */
    rg_control *ctl;     /* --control: shared by the workers, each applies every request */
    rg_live *live;       /* ctl stats/flows, --stats-interval, --metrics: shared (rg_live.h) */
    rg_flowtab *ft;      /* --control: this worker's open instances (ctl flows) */
    _Atomic uint8_t *wv; /* --write: the verdict slots (wwrite), NULL: none */
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

/* A clock jump the reader saw at a frame: told to the NFs of the worker that gets the frame,
 * as the stack of one context would (ring record with dlt CLOCK_DLT, ts_ns = the flow clock). */
#define CLOCK_DLT (-2)
/* A ring record with the reading thread's new clock offset (data: a uint64_t), sent to every
 * worker before the frame that changed it, when the stack takes one (rg_stack_desc.clock_offset):
 * frames then keep their own timestamps and each worker's clock adds the offset. */
#define OFFSET_DLT (-3)
typedef struct clock_rec {
    uint64_t pkt_ts;
    uint32_t fwd, pad;
} clock_rec;

/* --write with workers: the reading thread keeps a copy of every frame in input order (pend)
 * and writes each once its worker has set its verdict slot: the frames that pass, in input
 * order, as one context writes them.  The slots outnumber the frames pend can hold (16 MB of
 * records of 32 bytes at least), so a slot is free again before its next use. */
enum {
    WV_SIZE = 1u << 20,
    WV_PASS = 1,
    WV_DROP = 2,
    WV_NONE = 3,   /* too large: not kept */
    WV_REJECT = 4, /* 4..7: RG_REJECT + its flags: dropped and answered (rg_rejector) */
    WV_CODE = 0x0f,
    WV_INJECT = 4 /* the NFs' injections (RG_INJECT_*) in the bits above the code */
};
typedef struct wwrite {
    rg_writer w;
    int write;               /* --write: w is open */
    const rg_source_ops *io; /* --inline: the frames go on through io->forward_one */
    rg_source *src;
    rg_ring pend;
    _Atomic uint8_t *v;
    rg_rejector rj; /* the replies of rejected frames, written and sent here, in order */
    uint64_t next;  /* the frame number to write next */
    uint64_t last;  /* the last frame number handed over */
} wwrite;

/* Write the frames whose verdicts are in, in order; wait: until the last one handed over. */
static void write_ready(wwrite *ww, int wait)
{
    while (ww->next <= ww->last) {
        _Atomic uint8_t *slot = &ww->v[ww->next & (WV_SIZE - 1)];
        uint8_t v = atomic_load_explicit(slot, memory_order_acquire);
        if (!v) {
            if (!wait) return;
            sched_yield();
            continue;
        }
        const unsigned inj = (unsigned)v >> WV_INJECT;
        v &= WV_CODE;
        if (v != WV_NONE) {
            rg_frame f;
            uint64_t seq;
            rg_ring_peek_seq(&ww->pend, &f, &seq); /* pushed before its worker got it */
            if (v == WV_PASS && ww->write) rg_writer_put(&ww->w, &f);
            if (ww->io) ww->io->forward_one(ww->src, &f, (unsigned)(seq >> 63), v != WV_PASS);
            if (v >= WV_REJECT) { /* the replies right after the frame's place */
                rg_rejector_answer(&ww->rj, &f, RG_REJECT + (v - WV_REJECT),
                                   ww->write ? &ww->w : NULL, ww->io ? (int)(seq >> 63) : -1);
            }
            if (inj)
                rg_rejector_inject(&ww->rj, &f, inj, ww->write ? &ww->w : NULL,
                                   ww->io ? (int)(seq >> 63) : -1);
            if (ww->rj.nq) rg_rejector_flush(&ww->rj, ww->src, ww->io);
            rg_ring_release(&ww->pend);
        }
        atomic_store_explicit(slot, 0, memory_order_relaxed);
        ww->next++;
    }
}

/* One ring record; seq: the input's frame number (a tick: the frames before it). */
static void process(worker *w, const rg_frame *f, uint64_t seq)
{
    if (f->dlt == TICK_DLT) {
        if (w->chain) rg_chain_set_pkt(w->chain, seq);
        w->stack->expire(w->ctx, f->ts_ns);
        if (w->chain) rg_chain_batch_end(w->chain);
    } else if (f->dlt == OFFSET_DLT) {
        uint64_t off;
        memcpy(&off, f->data, sizeof off);
        w->stack->clock_offset(w->ctx, off);
    } else if (f->dlt == CLOCK_DLT) {
        clock_rec c;
        memcpy(&c, f->data, sizeof c);
        if (w->obs.on_clock_jump)
            w->obs.on_clock_jump(w->obs.self, seq, c.pkt_ts, f->ts_ns, (int)c.fwd);
    } else {
        if (w->chain) rg_chain_set_pkt(w->chain, seq);
        int fed = rg_feed(&w->fd, f);
        if (w->wv) { /* the verdict one context gives (run_capture) */
            const int v = rg_frame_verdict(w->stack, w->ctx, w->chain, fed);
            const unsigned code = v >= RG_REJECT ? WV_REJECT + (RG_REJECT_FLAGS(v) & 3u)
                                  : v >= RG_DROP ? WV_DROP
                                                 : WV_PASS;
            const unsigned inj = rg_chain_take_inject(w->chain) & 3u;
            const uint8_t wv = (uint8_t)(code | inj << WV_INJECT);
            atomic_store_explicit(&w->wv[seq & (WV_SIZE - 1)], wv, memory_order_release);
        }
    }
}

/* Bursts of up to --burst ring records, each in the two stages of rg_main (stage 1 over the
 * frames: ticks and clock records have no link type it takes), released together: a peeked
 * record stays valid until rg_ring_release. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    rg_frame f[RG_BURST_MAX];
    uint64_t seq[RG_BURST_MAX];
    const unsigned nb = (unsigned)w->o->burst;
    rg_trace_thread(w->id, w->chain ? rg_trace_chain_nfs : NULL, w->chain); /* ctl trace */
    for (;;) {
        /* read done first: what was pushed before it was set is drained below */
        int fin = atomic_load_explicit(&w->done, memory_order_acquire);
        unsigned got = 0, n;
        do {
            /* chain changes apply here, between bursts (an idle worker gets here too) */
            if (w->ctl) rg_control_poll_worker(w->ctl, w->chain, w->id, w->stack->stats(w->ctx));
            rg_live_poll(w->live, w->id);
            n = 0;
            while (n < nb && rg_ring_peek_seq(&w->ring, &f[n], &seq[n]))
                n++;
            rg_feed_prefetch(&w->fd, f, n);
            for (unsigned i = 0; i < n; i++)
                process(w, &f[i], seq[i]);
            rg_ring_release(&w->ring);
            got += n;
        } while (n);
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
        if (w->ctl) rg_control_poll_worker(w->ctl, w->chain, w->id, w->stack->stats(w->ctx));
        rg_live_poll(w->live, w->id);
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
        uint8_t drop[RG_BURST];
        rg_feed_prefetch(&w->fd, burst, use);
        for (unsigned i = 0; i < use; i++) {
            int fed = rg_feed(&w->fd, &burst[i]);
            if (w->o->inline_mode) { /* the verdict one context gives (run_capture) */
                const int v = rg_frame_verdict(w->stack, w->ctx, w->chain, fed);
                drop[i] = v >= RG_DROP;
            }
        }
        /* inline: this worker's frames go on through its own TX queue */
        if (w->o->inline_mode) w->io->forward_q(w->src, w->id, drop, use);
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
            pthread_setaffinity_np(t, sizeof one,
                                   &one); /* best effort: a refusal only costs speed */
            return;
        }
}

static int worker_open(worker *w, rg_wdirs *dirs, rg_control *ctl, const rg_linkinfo *li, int mq,
                       char *err, size_t errlen)
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
    w->ctl = ctl;
    /* the worker's chain writes into the worker's part of --out */
    if (o->nfd || o->nf_is_path || o->chain_file || o->control || o->ipfix) {
        w->chain = rg_chain_open(o, stack, w->id, dirs, err, errlen);
        if (!w->chain) return 1;
    }
    rg_obs cobs;
    if (w->chain) cobs = rg_chain_obs(w->chain);
    w->obs = rg_make_observer(&w->counter, w->chain ? &cobs : NULL, strcmp(o->nf, RG_NF_NONE) != 0,
                              &w->ch);
    if (o->control) { /* ctl flows: the open instances, seen around the chain */
        w->ft = rg_flowtab_new(stack, w->id, o->workers, &w->obs);
        if (!w->ft) {
            snprintf(err, errlen, "out of memory");
            return 1;
        }
        w->obs = *rg_flowtab_obs(w->ft);
    }
    rg_ctx_cfg cfg = rg_ctx_cfg_of(o, &w->obs);
    /* the reading thread guards the one clock and sends its offset (distribute) */
    if (stack->clock_offset && !mq) cfg.max_clock_jump_ns = UINT64_MAX;
    w->ctx = stack->ctx_new(&cfg);
    w->live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *w->live_per);
    if (!w->ctx || !w->live_per) {
        snprintf(err, errlen, "cannot create the %s stack context (out of memory?)", stack->name);
        return 1;
    }
    if (rg_memcap_room(stack, w->ctx, err, errlen)) return 1;
    /* expiry comes as ticks from the reader: the feeder never expires by itself; but for
     * multi-queue sources, whose frames carry one monotonic clock */
    rg_feeder_init(&w->fd, stack, &w->lm, w->ctx, mq ? o->no_timeouts : 1, &w->counter.n);
    w->fd.prog = w->id == 0 ? o->prog : NULL; /* warnings once */
    w->fd.capture = o->capture;
    if (w->chain) {
        w->fd.batch_end = rg_chain_batch_end;
        w->fd.batch_self = w->chain;
    }
    if (w->ft) { /* ctl flows: the copies of the instances a packet touched, after it */
        rg_flowtab_chain_end(w->ft, w->fd.batch_end, w->fd.batch_self);
        w->fd.batch_end = rg_flowtab_packet_end;
        w->fd.batch_self = w->ft;
    }
    return 0;
}

static void worker_free(worker *w)
{
    if (w->chain) rg_chain_free(w->chain, w->o->prog); /* a failed start: close what it wrote */
    if (w->ctx) w->stack->ctx_free(w->ctx);
    rg_flowtab_free(w->ft);
    free(w->live_per);
    if (w->counter_ok) rg_counter_free(&w->counter);
    if (w->ring_ok && !w->io) rg_ring_free(&w->ring);
}

/* Hand one record to a worker, waiting while its ring is full; 0 or
 * RG_EINVAL (a frame larger than half a ring). */
static int push(worker *w, const rg_frame *f, uint64_t seq)
{
    int rc;
    while ((rc = rg_ring_push_seq(&w->ring, f, seq)) == 0)
        sched_yield();
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
                      rg_clock *clk, wwrite *ww)
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
    /* the workers' clocks add the offset to the frames' own times (OFFSET_DLT) */
    const int own_ts = ws[0].stack->clock_offset != NULL;
    uint64_t sent_off = 0; /* the offset the workers have */
    for (;;) {
        if (!left || *stop || (t_end && mono_ns() >= t_end)) return RG_SRC_END;
        int n = io->next_burst(src, burst, left < RG_BURST ? (unsigned)left : RG_BURST);
        if (n == RG_SRC_ERROR && *stop) return RG_SRC_END; /* a read the stop interrupted */
        if (n < 0) return n;
        for (int i = 0; i < n; i++) {
            /* the one flow clock of the input (a single context's rule, rg_clock): workers get
             * its offset (or, for a stack without clock_offset, frames dated in it), so a jump
             * is decided once, here, and every worker's clock follows the same time whichever
             * packets it gets */
            rg_frame *f = &burst[i];
            const uint64_t ts0 = f->ts_ns; /* --write writes the frame as read */
            frames++;
            unsigned k = rg_rss_dist_worker(&dist, f);
            const int ck = rg_clock_packet(clk, f->ts_ns);
            if (RG_UNLIKELY(ck)) { /* told to the frame's worker (a resync: with the new base) */
                clock_rec c = {
                    ck == RG_CLOCK_RESYNC ? clk->base : f->ts_ns,
                    (uint32_t)clk->last_fwd | (ck == RG_CLOCK_RESYNC ? RG_CLOCK_EV_RESYNC : 0u), 0};
                rg_frame cr = {.data = (const uint8_t *)&c,
                               .caplen = sizeof c,
                               .ts_ns = clk->now,
                               .dlt = CLOCK_DLT};
                push(&ws[k], &cr, frames);
            }
            if (own_ts && clk->off != sent_off) { /* before the frame, to every worker */
                sent_off = clk->off;
                rg_frame orec = {.data = (const uint8_t *)&sent_off,
                                 .caplen = sizeof sent_off,
                                 .ts_ns = clk->now,
                                 .dlt = OFFSET_DLT};
                for (unsigned j = 0; j < nw; j++)
                    push(&ws[j], &orec, frames - 1);
            }
            const uint64_t t = f->ts_ns + clk->off; /* the frame on the flow clock */
            if (!own_ts) f->ts_ns = t;
            if (t >= next_expire) { /* the feeder's expiry rule (rg_feed) */
                if (expire_on) {    /* dated as the frame is: the workers add their offset */
                    rg_frame tick = {.data = &none, .ts_ns = f->ts_ns, .dlt = TICK_DLT};
                    for (unsigned j = 0; j < nw; j++)
                        push(&ws[j], &tick, frames - 1);
                }
                expire_on = 1;
                next_expire = t + NS_PER_S;
            }
            if (ww) { /* the writer's copy first: its verdict may come at once */
                int rc;
                rg_frame g = *f;
                g.ts_ns = ts0;
                /* the frame's interface (inline) in the record's top bit */
                uint64_t tag = ww->io ? (uint64_t)(io->origin(src, (unsigned)i) & 1) << 63 : 0;
                while ((rc = rg_ring_push_seq(&ww->pend, &g, frames | tag)) == 0) {
                    write_ready(ww, 0);
                    sched_yield();
                }
                ww->last = frames;
                if (rc != 1) { /* larger than half a ring: not handed over either */
                    atomic_store_explicit(&ww->v[frames & (WV_SIZE - 1)], WV_NONE,
                                          memory_order_release);
                    (*lost)++;
                    continue;
                }
            }
            if (push(&ws[k], f, frames))
                (*lost)++; /* larger than half a ring (8 MB): cannot be handed over */
            else
                per[k]++;
        }
        left -= (uint64_t)n;
        if (ww) write_ready(ww, 0);
        if (ws[0].live)
            rg_live_reader(ws[0].live, clk->jumps_fwd, clk->jumps_back, clk->resyncs, *lost);
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
        for (int r = 0; r < 4; r++)
            t->layer[i].closed[r] += c->layer[i].closed[r];
    }
}

int rg_run_workers(const opts *o, const rg_stack_desc *stack, volatile sig_atomic_t *stop)
{
    char err[2048];
    const rg_source_ops *io = o->src;
    rg_source_cfg scfg = o->scfg;
    scfg.stop = stop;
    scfg.queues = io->next_burst_q ? o->workers : 0;
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
    pthread_mutex_t dirs_mu;
    pthread_mutex_init(&dirs_mu, NULL);
    rg_wdirs dirs = {.mu = &dirs_mu};
    wwrite ww = {.next = 1};
    rg_rejector_init(&ww.rj, o->reject_rate);
    int ww_ok = 0;
    rg_control *ctl = NULL;
    int status = 0;
    if (!ws || !per || !live_per || !total_ok) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        status = 1;
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
        if (worker_open(&ws[i], &dirs, NULL, io->link(src), mq, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            status = 1;
        }
    }
    if (!status && o->control) { /* every worker applies each request (rg_control.c) */
        ctl = rg_control_open_workers(o->control, nw, err, sizeof err);
        if (!ctl) {
            fprintf(stderr, "%s: --control %s: %s\n", o->prog, o->control, err);
            status = 1;
        }
        for (unsigned i = 0; ctl && i < nw; i++)
            ws[i].ctl = ctl;
    }
    rg_live *lv = NULL;
    if (!status && rg_live_wanted(o)) { /* before the workers start: they answer it */
        lv = rg_live_new(o, nw, err, sizeof err);
        for (unsigned i = 0; lv && i < nw; i++) {
            rg_live_set_view(
                lv, i, (rg_live_view){stack, &ws[i].counter, &ws[i].fd, ws[i].ctx, ws[i].ft, NULL});
            ws[i].live = lv;
        }
        if (!lv || rg_live_start(lv, err, sizeof err)) {
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
    if (!status && o->inline_mode && mq && !io->forward_q) {
        fprintf(stderr, "%s: --inline with --workers: the %s source cannot\n", o->prog, io->name);
        status = 1;
    }
    if (!status && (o->write || (o->inline_mode && !mq))) {
        if (mq || (o->inline_mode && (!io->origin || !io->forward_one))) {
            fprintf(stderr, "%s: %s with --workers: not on %s (no input order)\n", o->prog,
                    o->write ? "--write" : "--inline", io->name);
            status = 1;
        } else if (rg_ring_init(&ww.pend, RING_SIZE) || !(ww.v = calloc(WV_SIZE, sizeof *ww.v))) {
            fprintf(stderr, "%s: out of memory\n", o->prog);
            status = 1;
        } else if (o->write &&
                   rg_writer_open(&ww.w, o->write, io->link(src)->dlt, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            status = 1;
        } else {
            ww_ok = 1;
            ww.write = o->write != NULL;
            if (o->inline_mode) {
                ww.io = io;
                ww.src = src;
            }
        }
        for (unsigned i = 0; i < nw; i++)
            ws[i].wv = ww.v;
    }
    int n = status ? RG_SRC_END
            : mq   ? pump_queues(o, io, src, &qs, stop)
                   : distribute(o, io, src, ws, nw, stop, per, &lost, &clk, ww_ok ? &ww : NULL);
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
        for (unsigned i = 0; i < nw; i++)
            read += per[i];
        fprintf(stderr, "%s: %s: packet %" PRIu64 ": %s\n", o->prog, o->capture, read + 1,
                io->error(src));
        status = 1;
    }
    if (lost)
        fprintf(stderr, "%s: %" PRIu64 " frames too large for a worker's ring\n", o->prog, lost);
    if (ww_ok) { /* the workers are done: every verdict is in */
        write_ready(&ww, 1);
        if (ww.write && rg_writer_close(&ww.w, o->prog)) status = 1;
    }
    if (ctl) rg_control_close(ctl); /* no more changes: the workers have stopped */
    ctl = NULL;
    uint64_t frames = lost; /* the input's frames: the NFs' packet number at the final flush */
    for (unsigned i = 0; ws && i < nw; i++)
        frames += mq ? ws[i].fd.pkts : per[i];
    if (!status || n == RG_SRC_ERROR) {
        summary s = {.skipped = lost};
        uint64_t live = 0;
        for (unsigned i = 0; i < nw; i++) {
            worker *w = &ws[i];
            rg_counter_fold(&w->counter, stack->stats ? stack->stats(w->ctx) : NULL);
            rg_live_before_flush(stack, &w->counter.n, w->live_per);
            for (unsigned l = 0; l < stack->nlayers; l++) {
                live_per[l] += w->live_per[l];
                live += w->live_per[l];
            }
            if (w->chain && !mq) rg_chain_set_pkt(w->chain, frames);
            stack->flush(w->ctx);
            if (w->chain) {
                rg_chain_batch_end(w->chain); /* the flush's events */
                if (rg_chain_free(w->chain, o->prog)) status = 1;
                w->chain = NULL;
            }
            add_counts(&total.n, &w->counter.n, stack->nlayers);
            s.pkts += w->fd.pkts;
            s.bytes += w->fd.bytes;
            s.skipped += w->fd.skipped;
            s.skipped_linktype += w->fd.skipped_linktype;
            if (w->fd.linktype_what[0]) s.linktype_what = w->fd.linktype_what;
            const rg_stats *st = stack->stats ? stack->stats(w->ctx) : NULL;
            s.errors += (st ? rg_stats_total_errors(st) : 0) + w->fd.skipped;
        }
        if (dirs.n) { /* every NF has written its files: merge them */
            if (rg_wmerge(&dirs, nw, o->prog)) status = 1;
        }
        rg_source_stats sst;
        io->stats(src, &sst);
        /* forwarded: the frames that went on; the replies are counted as the rejects' */
        sst.tx_frames -= ww.rj.sent_inline < sst.tx_frames ? ww.rj.sent_inline : sst.tx_frames;
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
                for (unsigned i = 1; i < nw; i++)
                    rg_stats_add(&merged, stack->stats(ws[i].ctx));
            }
        }
        s.st = mlayers ? &merged : st0;
        for (unsigned i = 1; s.st && i < nw; i++)
            rg_rules_add(s.st, stack->stats(ws[i].ctx));
        if (!s.linktype_what) s.linktype_what = "";
        s.gaps = total.n.gaps;
        s.gap_bytes = total.n.gap_bytes;
        s.li = &ws[0].lm.m[0].li;
        s.has_dropped = (io->caps & RG_SRC_CAP_ARRIVAL_TS) != 0;
        s.dropped = sst.dropped;
        if (io->detail) io->detail(src, s.io_detail, sizeof s.io_detail);
        s.clock_fwd = clk.jumps_fwd; /* the reading thread's clock decided them */
        s.clock_back = clk.jumps_back;
        s.clock_resyncs = clk.resyncs;
        s.nworkers = nw;
        s.writer = ww_ok && ww.write ? &ww.w : NULL;
        s.tx = o->inline_mode ? &sst : NULL;
        s.reject = ww_ok ? &ww.rj : NULL;
        s.worker_pkts = per;
        rg_live_final(lv); /* the last stats line: the summary's counters */
        uint64_t *wflows = calloc(nw, sizeof *wflows);
        for (unsigned i = 0; wflows && i < nw; i++)
            wflows[i] = ws[i].counter.n.opened;
        s.worker_flows = wflows;
        rg_print_summary(o, stack, &s);
        free(mlayers);
        free(wflows);
        fflush(stdout);
        for (unsigned i = 0; o->stats && stack->stats && i < nw; i++) {
            fprintf(stderr, "worker %u:\n", i);
            rg_stats_print(stack->stats(ws[i].ctx), stderr);
        }
    }
    rg_live_free(lv); /* its threads stopped before the contexts go */
    for (unsigned i = 0; ws && i < nw; i++)
        worker_free(&ws[i]);
    if (ww.pend.buf) rg_ring_free(&ww.pend);
    rg_rejector_free(&ww.rj);
    free((void *)ww.v);
    if (ctl) rg_control_close(ctl);
    for (unsigned i = 0; i < dirs.n; i++)
        free(dirs.dir[i]);
    pthread_mutex_destroy(&dirs_mu);
    free(ws);
    free(per);
    free(live_per);
    if (total_ok) rg_counter_free(&total);
    io->close(src);
    return status;
}
