/* rg_driver.h - the capture driver's parts (build/librgmain.a, not the
 * runtime library): options (rg_opts.c), the feed of frames into the stack
 * (rg_feed.c), the observer chain (rg_chain.c), the summary (rg_summary.c),
 * and the runs (rg_main.c).  Private to runtime-c/main/. */
#ifndef RG_DRIVER_H
#define RG_DRIVER_H

#include <signal.h>
#include <stdio.h>

#include "rg/rg_api.h"
#include "rg/rg_entry.h"
#include "rg/rg_nf_registry.h"
#include "rg/rg_reject.h"
#include "rg/rg_source.h"
#include "rg_counter.h"
#include "rg_xdp.h"

#define NS_PER_S UINT64_C(1000000000)

enum { EXIT_USAGE = 2, DEFAULT_PASSES = 3 };
#define RG_DRIVER_MAX_LAYERS 256
/* source options given on one command line (the last of each counts) */
#define RG_DRIVER_MAX_SRC_OPTS 64

/* The built-in --nf values (the driver's counters alone, or without counting
 * calls); any other name is looked up in rg_nf_table. */
#define RG_NF_COUNT "count"
#define RG_NF_NONE  "none"

typedef struct opts {
    const char *prog;
    const char *capture;
    const char *io;           /* the packet source's name (--io) */
    const rg_source_ops *src; /* and its ops (rg_source_find) */
    /* what the source is asked to open: CAPTURE or its name option, its options (declared
     * in its rg_source_ops.opts), the arguments after -- (RG_SRC_CAP_ARGS), --inline; the
     * runs set stop and queues in their copy */
    rg_source_cfg scfg;
    rg_source_kv skv[RG_DRIVER_MAX_SRC_OPTS]; /* scfg.kv */
    uint64_t count;                           /* --count N: stop after N frames (0 = no limit) */
    uint64_t duration_ns; /* --duration S: stop after S seconds (0 = no limit) */
    unsigned workers;     /* --workers N: stack contexts on N threads (1: this thread) */
    const char *nf;
    const rg_nf_desc *nfd; /* NULL: count or none */
    const char *out;
    uint64_t cap;
    uint32_t layer_cap[RG_DRIVER_MAX_LAYERS]; /* --cap LAYER=N, by layer index; 0 = cap */
    uint64_t seed;
    uint64_t passes;
    int passes_set;
    int no_timeouts;
    uint64_t max_clock_jump_ns; /* rg_ctx_cfg.max_clock_jump_ns: 0 default, UINT64_MAX off */
    uint64_t linger_ns;         /* rg_ctx_cfg.linger_ns: --linger, 0 = the specs' */
    int nf_flag;                /* the chosen NF's flag was given */
    /* memcaps (rg_ctx_cfg): --memcap*, 0 = the stack's default, UINT64_MAX = none */
    uint64_t memcap_reassembly, memcap_flows;
    int memcap_policy; /* --memcap-policy: enum rg_memcap_policy + 1, 0 = the stack's */
    int json;          /* --summary json */
    int full;          /* --summary full: the text with the per-layer tables */
    int stats;
    int bench;
    /* NF chains (rg_nfchain.h): --nf PATH.so, --chain FILE, --control PATH */
    int nf_is_path;         /* --nf names a shared object */
    const char *chain_file; /* --chain: the NFs after --nf's, in order */
    const char *ipfix;      /* --ipfix [tcp://]HOST:PORT: the ipfix NF after --nf's */
    const char *control;    /* --control: the UNIX socket of rubikgen ctl */
    const char *write;      /* --write OUT.pcap: the packets that pass, NULL = none */
    int pin;         /* --pin: pin file/live worker threads even with fewer cores than threads */
    int inline_mode; /* --inline: frames go on to the peer unless a verdict drops it */
    int checksums;   /* --checksums: rg_ctx_cfg.checksums */
    int workers_set; /* --workers given (even 1): NF outputs merged as N workers' are */
    uint64_t burst;  /* --burst N: frames per burst (1..RG_BURST_MAX; default RG_BURST) */
    int prefetch_always;  /* --prefetch-always: rg_ctx_cfg.prefetch_always */
    int prefetch_records; /* --prefetch-records: rg_ctx_cfg.prefetch_records */
    /* --overlap-policy: per layer index, enum rg_seq_policy + 1 (0 = the spec's) */
    uint8_t overlap_policy[RG_DRIVER_MAX_LAYERS];
    int overlap_set;
    uint64_t reject_rate; /* --reject-rate N: rejects answered per second (0: no limit) */
    /* --xdp OBJ: the stack's XDP program on the capture interface (rg_xdp.h) */
    const char *xdp;
    int xdp_mode;          /* --xdp-mode: RG_XDP_AUTO, _GENERIC, _NATIVE */
    const char *xdp_flows; /* --xdp-flows LAYER,...: the layers the program keys */
} opts;

/* The stack context's configuration the options ask for, with observer obs: the one place
 * the driver's runs (one context, workers, --bench) build it. */
static inline rg_ctx_cfg rg_ctx_cfg_of(const opts *o, const rg_obs *obs)
{
    return (rg_ctx_cfg){.inst_cap = (uint32_t)o->cap,
                        .seed = o->seed,
                        .obs = obs,
                        .no_timeouts = o->no_timeouts,
                        .layer_cap = o->layer_cap,
                        .max_clock_jump_ns = o->max_clock_jump_ns,
                        .checksums = o->checksums,
                        .memcap_reassembly = o->memcap_reassembly,
                        .memcap_flows = o->memcap_flows,
                        .memcap_policy = o->memcap_policy,
                        .prefetch_always = o->prefetch_always,
                        .prefetch_records = o->prefetch_records,
                        .overlap_policy = o->overlap_set ? o->overlap_policy : NULL,
                        .linger_ns = o->linger_ns};
}

/* 0: run; 1: --help printed; EXIT_USAGE: bad usage (message printed). */
int rg_parse_opts(int argc, char **argv, const rg_stack_desc *stack, opts *o);
/* A new context's flow memcap leaves room for instances: RG_OK, or 1 with the reason in err
 * (the flow tables' key indexes alone fill the cap, so every instance would be evicted or
 * refused in the packet that creates it). */
int rg_memcap_room(const rg_stack_desc *stack, const void *ctx, char *err, size_t errlen);

/* ---- feeding frames to the stack ---- */

typedef struct feeder {
    const rg_stack_desc *stack;
    rg_entry_links *lm; /* m[0]: the capture's link type */
    void *ctx;
    uint64_t last_expire; /* packet time of the last expire call */
    int expire_on;        /* a first packet has set the clock */
    int no_timeouts;
    uint64_t pkts, bytes, skipped;
    uint64_t skipped_linktype;  /* of skipped: no entry for the link type (or IP version) */
    const char *linktype_what;  /* ", IPv6 packets" on a raw IP link, else "" */
    const char *prog, *capture; /* for warnings; prog NULL: none */
    rg_counts *nc;              /* the driver's counters: uid_mark is set per packet */
    /* the NF chain's dispatch (rg_chain_batch_end), called after an expire and
     * after each packet; NULL: none */
    void (*batch_end)(void *self);
    void *batch_self;
} feeder;

void rg_feeder_init(feeder *fd, const rg_stack_desc *stack, rg_entry_links *lm, void *ctx,
                    int no_timeouts, rg_counts *nc);
/* A link type seen for the first time that the runtime cannot read: warned. */
void rg_feed_new_link(feeder *fd, const rg_entry_map *em);
/* A frame no entry layer takes: counted (and warned about once). */
void rg_feed_skipped(feeder *fd, const rg_entry_map *em, const rg_frame *f);

/* Feed one frame: 1 if the stack processed it (its verdict is the stack's,
 * rg_stack_desc.verdict), 0 if no entry layer took it (it passes). */
RG_INLINE int rg_feed(feeder *fd, const rg_frame *f)
{
    fd->pkts++;
    fd->bytes += f->caplen;
    fd->nc->uid_mark = fd->nc->uid_max; /* instances opened from now on are this packet's */
    /* idle expiry on packet time, once per second of it, and at once when packet time goes
     * back by a second or more (a clock jump the stack's clock guard absorbed: expiry must go
     * on): d <= 2^64 - 2 s <=> the time moved >= 1 s either way (mod 2^64).  No clock reads. */
    const uint64_t d = f->ts_ns - fd->last_expire - NS_PER_S;
    if (RG_UNLIKELY(d <= UINT64_MAX - 2 * NS_PER_S + 1 || !fd->expire_on) && !fd->no_timeouts) {
        if (fd->expire_on) fd->stack->expire(fd->ctx, f->ts_ns);
        fd->expire_on = 1;
        fd->last_expire = f->ts_ns;
        if (fd->batch_end) fd->batch_end(fd->batch_self);
    }
    unsigned layer;
    uint32_t off;
    int added, unsupported = 0;
    const rg_entry_map *em = rg_entry_of(fd->lm, f, &added, &unsupported);
    if (RG_UNLIKELY(added && unsupported)) rg_feed_new_link(fd, em);
    if (RG_UNLIKELY(!rg_entry_pick(em, f, &layer, &off))) {
        rg_feed_skipped(fd, em, f);
        return 0;
    }
    /* the result needs no action here: the stack counts its own errors */
    (void)fd->stack->process(fd->ctx, layer, f->data + off, f->caplen - off, f->ts_ns);
    if (fd->batch_end) fd->batch_end(fd->batch_self);
    return 1;
}

/* No expiry due in rg_feed <=> ts - *base < *span: its test (|ts - last_expire| < 1 s) as one
 * compare.  *span 0 (no first packet yet) sends every frame to rg_feed; --no-timeouts is never
 * due, and its one exception here (ts - base == UINT64_MAX) goes to rg_feed, which does the
 * same then. */
RG_INLINE void rg_feed__window(const feeder *fd, uint64_t *base, uint64_t *span)
{
    *base = fd->last_expire - (NS_PER_S - 1);
    *span = fd->no_timeouts ? UINT64_MAX : fd->expire_on ? 2 * NS_PER_S - 1 : 0;
}

/* rg_feed_burst's loop; `batch` a constant in each of its two copies (no NF chain: no
 * batch_end test per frame).  Entry maps with a fixed entry layer only (fixed >= 0). */
RG_INLINE void rg_feed__burst(feeder *fd, const rg_frame *f, unsigned n, int batch)
{
    int (*const process)(void *, unsigned, const uint8_t *, uint32_t, uint64_t) =
        fd->stack->process;
    void *const ctx = fd->ctx;
    rg_counts *const nc = fd->nc;
    const int dlt0 = fd->lm->m[0].li.dlt;
    const unsigned layer = (unsigned)fd->lm->m[0].fixed;
    uint64_t pkts = fd->pkts, bytes = fd->bytes, base, span;
    rg_feed__window(fd, &base, &span);
    for (const rg_frame *fr = f, *end = f + n; fr < end; fr++) {
        if (RG_UNLIKELY(fr->dlt != dlt0 || fr->ts_ns - base >= span)) {
            fd->pkts = pkts;
            fd->bytes = bytes;
            (void)rg_feed(fd, fr);
            pkts = fd->pkts;
            bytes = fd->bytes;
            rg_feed__window(fd, &base, &span);
            continue;
        }
        pkts++;
        bytes += fr->caplen;
        nc->uid_mark = nc->uid_max; /* instances opened from now on are this packet's */
        (void)process(ctx, layer, fr->data, fr->caplen, fr->ts_ns);
        if (batch) fd->batch_end(fd->batch_self);
    }
    fd->pkts = pkts;
    fd->bytes = bytes;
}

/* Feed frames f[0..n) in order: exactly what n rg_feed calls do (the same counts, calls and
 * order), cheaper per frame.  The stack's process is an opaque call and the feeder's address
 * escapes to the cold functions, so rg_feed reloads every feeder field after each frame; here
 * they are locals.  A frame takes the short path when it is of the capture's first link type,
 * whose entry layer is fixed (Ethernet, say: not a raw IP link's choice by IP version), and
 * no expiry is due; any other goes through rg_feed (the locals written back before and read
 * again after). */
RG_INLINE void rg_feed_burst(feeder *fd, const rg_frame *f, unsigned n)
{
    if (fd->lm->m[0].fixed < 0) {
        for (unsigned i = 0; i < n; i++)
            (void)rg_feed(fd, &f[i]);
    } else if (fd->batch_end) {
        rg_feed__burst(fd, f, n, 1);
    } else {
        rg_feed__burst(fd, f, n, 0);
    }
}

/* Burst stage 1 (--burst): the stack's prefetch on each of n frames (pass A: index slots),
 * then its prefetch_recs (pass B: the records), before they are fed in order
 * (rg_feed_burst; stage 2, unchanged: prefetching changes nothing).  Only frames of the
 * capture's first link type: finding another's entry map would register it, which rg_feed
 * must do to report it. */
RG_INLINE void rg_feed_prefetch(feeder *fd, const rg_frame *f, unsigned n)
{
    int (*pf)(void *, unsigned, const uint8_t *, uint32_t) = fd->stack->prefetch;
    if (!pf || n < 2) return;
    const rg_entry_map *m = &fd->lm->m[0];
    for (unsigned i = 0; i < n; i++) {
        unsigned layer;
        uint32_t off;
        if (f[i].dlt == m->li.dlt && rg_entry_pick(m, &f[i], &layer, &off) &&
            !pf(fd->ctx, layer, f[i].data + off, f[i].caplen - off))
            return; /* the tables fit in the cache: not worth it */
    }
    /* pass B: the slots are cached by now; prefetch the records they name */
    if (fd->stack->prefetch_recs) fd->stack->prefetch_recs(fd->ctx);
}

/* ---- --write (rg_write.c) ---- */

typedef struct rg_writer {
    const char *path;
    int dlt;             /* the file's link type: the source's first */
    void *dead, *d;      /* pcap_t, pcap_dumper_t */
    uint64_t written;    /* frames written */
    uint64_t other_link; /* passed frames of another link type: not written */
    uint64_t replies;    /* reject replies written (not in written) */
} rg_writer;

/* RG_OK, or an error with the message in err. */
int rg_writer_open(rg_writer *w, const char *path, int dlt, char *err, size_t errlen);
void rg_writer_put(rg_writer *w, const rg_frame *f);
/* Flush and close; RG_OK or RG_EIO (message printed).  No-op if not open. */
int rg_writer_close(rg_writer *w, const char *prog);

/* Write a reply a reject verdict asked for (rg_rejector): counted in replies, not written. */
void rg_writer_put_reply(rg_writer *w, const rg_frame *f);

/* ---- rejects (rg_rejector.c) ----
 * The frames a reject verdict (RG_REJECT...) answers with, rate-limited: --write writes them
 * right after the packet's place, --inline sends them, after the burst is forwarded, out of
 * the interface the packet came in on (the receiver's RST out of the other one). */
typedef struct rg_rejector {
    rg_reject_rate rate;
    uint64_t rejected;     /* packets a reject verdict dropped */
    uint64_t answered;     /* ... that got replies */
    uint64_t replies;      /* frames sent or written */
    uint64_t limited;      /* ... that got none: --reject-rate */
    uint64_t unanswerable; /* ... that got none: rg_reject.h's rules (an ICMP error, ...) */
    uint64_t sent_inline;  /* replies given to the source (forward_one counts them as tx) */
    uint64_t injected;     /* frames NFs injected (rg_nf_host.inject), sent or written */
    uint64_t inject_none;  /* injections with no frame to build (rg_reject.h's rules) */
    rg_reject_out out;     /* the last packet's replies */
    /* --inline: the replies of the burst, sent after it is forwarded */
    struct rg_reject_q {
        unsigned from; /* the interface they go out of is this one's peer (forward_one) */
        uint32_t len;
        uint64_t ts_ns;
        int dlt;
        uint8_t data[RG_REJECT_FRAME_MAX];
    } * q;
    unsigned nq;
} rg_rejector;

void rg_rejector_init(rg_rejector *r, uint64_t rate);
void rg_rejector_free(rg_rejector *r);
/* Frame f got the reject verdict v: its replies, written to w (NULL: none) and, inline
 * (in_if >= 0: the interface f came in on, rg_source_ops.origin), queued for
 * rg_rejector_flush. */
void rg_rejector_answer(rg_rejector *r, const rg_frame *f, int v, rg_writer *w, int in_if);
/* Frame f's injections (RG_INJECT_* from the chain, rg_nf_host.inject): the replies a reject
 * gives, to the sides asked, not rate-limited; written and queued as rg_rejector_answer's. */
void rg_rejector_inject(rg_rejector *r, const rg_frame *f, unsigned what, rg_writer *w, int in_if);
/* Inline: the queued replies sent (after ops->forward of their burst). */
void rg_rejector_flush(rg_rejector *r, rg_source *src, const rg_source_ops *ops);

/* ---- the observer: the counters, then the chosen NF ---- */

typedef struct obs_chain {
    rg_obs a, b;
} obs_chain;

/* The observer for the stack: the counters alone (nf NULL), without their
 * per-call callback (--nf none: no per-call cost, calls are not counted), or
 * the counters chained before nf. */
rg_obs rg_make_observer(rg_counter *counter, const rg_obs *nf, int count_calls, obs_chain *ch);

/* ---- the summary ---- */

typedef struct summary {
    const char *link;
    uint64_t pkts, bytes, opened, closed, live, calls, payload, errors, skipped;
    uint64_t gaps, gap_bytes;       /* gap recovery: holes skipped, bytes in them */
    uint64_t clock_fwd, clock_back; /* the clock guard's jumps */
    uint64_t clock_resyncs;         /* and the new time bases it followed */
    const rg_counts *n;             /* per-layer counts (after the flush) */
    const uint64_t *live_per;       /* per layer: live before the final flush */
    const rg_stats *st;             /* NULL without stats: no state bytes */
    uint64_t skipped_linktype;
    const char *linktype_what;
    const rg_linkinfo *li;
    int has_dropped;     /* a live or DPDK source: its drop count is printed */
    uint64_t dropped;    /* frames the source lost before the stack (kernel, NIC) */
    char io_detail[256]; /* how the source reads (rg_source_ops.detail), "" = nothing said */
    unsigned nworkers;   /* --workers N > 1: the frames each worker got */
    const uint64_t *worker_pkts;
    const rg_writer *writer;         /* --write: what was written; NULL = no --write */
    const rg_source_stats *tx;       /* --inline: what went on to the peer; NULL = not inline */
    const uint64_t *worker_flows;    /* --workers: the instances each worker opened, or NULL */
    const rg_rejector *reject;       /* --write or --inline: the rejects answered; NULL = none */
    const struct rg_xdp_counts *xdp; /* --xdp: the program's counters; NULL = none */
} summary;

uint64_t rg_total_flows(const rg_stack_desc *stack, const rg_counts *n);
/* Live per layer before the flush, which closes exactly the instances live then. */
void rg_live_before_flush(const rg_stack_desc *stack, rg_counts *n, uint64_t *live);
void rg_print_summary(const opts *o, const rg_stack_desc *stack, const summary *s);
/* The files the run wrote (rg_wrote.c): the start of the run, the output folders NFs were
 * given (deduplicated, any thread), and the summary's "wrote" line / "files_written" member. */
void rg_wrote_start(void);
void rg_wrote_text(void);
void rg_wrote_json(void);
/* "layers":{NAME:{...},...} for every layer with a selector. */
/* "checksum_bad":{LAYER:N,...} (every layer; --checksums), after a comma */
void rg_checksums_json(const rg_stack_desc *stack, const rg_stats *st);
void rg_checksums_text(const rg_stack_desc *stack, const rg_stats *st);
/* "memcap":{caps, policy, peaks}, (with the comma) for the summary and --bench. */
void rg_memcap_json(const rg_stats *st);
void rg_layers_json(const rg_stack_desc *stack, const rg_counts *n, const uint64_t *live,
                    const rg_stats *st);

/* ---- --workers N (rg_workers.c) ---- */

/* --workers N > 1, or --workers 1 given (its NF outputs then are those of N workers, in the
 * same order; --write and --inline run on this thread). */
static inline int rg_wants_workers(const opts *o)
{
    return o->workers > 1 || (o->workers_set && !o->write && !o->inline_mode);
}
/* The run with o->workers threads; stop: set by SIGINT/SIGTERM. */
int rg_run_workers(const opts *o, const rg_stack_desc *stack, volatile sig_atomic_t *stop);
/* --bench --workers N (rg_bench_workers.c): the loaded capture split by the
 * symmetric hash, one context per worker thread; one JSON line. */
int rg_bench_workers(const opts *o, const rg_stack_desc *stack, rg_entry_links *lm,
                     const rg_capture *cap);

#endif /* RG_DRIVER_H */
