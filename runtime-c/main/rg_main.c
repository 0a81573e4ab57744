/* rg_main.c - the capture driver: the main of every generated stack binary
 * (rg_main, see rg_api.h).
 *
 * Opens the packet source the command line names (rg_source.h), picks the
 * stack's entry layer per frame (rg_entry.h), feeds the frames to the stack
 * with its counters and the chosen NF attached (rg_nf_registry.h), drives
 * idle expiry on packet time, flushes at the end so the NF sees every
 * instance close, and prints a summary.  --bench times the processing loop
 * on a capture loaded into memory instead. */
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_json.h"
#include "rg/rg_rules.h"
#include "rg/rg_seq.h"
#include "rg_driver.h"
#include "rg/rg_trace.h"
#include "rg_live.h"
#include "rg_nfchain.h"
#include "rg_out.h"
#include "rg_rules_out.h"

/* Set by SIGINT/SIGTERM: the run stops reading, flushes and prints its
 * summary; a source blocked in next_burst polls it (rg_source_cfg.stop). */
static volatile sig_atomic_t stop_flag;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* SIGHUP: reopen every line output at its next record (logrotate's postrotate), and reload
 * the --rules-so rule set of a --rules-reload build.  It no longer stops the run: that is
 * SIGINT's and SIGTERM's. */
static void on_hup_signal(int sig)
{
    (void)sig;
    rg_out_reopen_later();
    rg_rules_hup++;
}

/* The handlers for the run; the previous ones in old[3] (restored after). */
static void catch_stop_signals(struct sigaction old[3])
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocking read returns EINTR */
    stop_flag = 0;
    sigaction(SIGINT, &sa, &old[0]);
    sigaction(SIGTERM, &sa, &old[1]);
    sa.sa_handler = on_hup_signal;
    sa.sa_flags = SA_RESTART; /* reading the capture goes on */
    sigaction(SIGHUP, &sa, &old[2]);
}

static void restore_stop_signals(const struct sigaction old[3])
{
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGTERM, &old[1], NULL);
    sigaction(SIGHUP, &old[2], NULL);
}

static uint64_t now_ns(clockid_t clk);

static uint64_t stack_errors(const rg_stack_desc *stack, const void *ctx)
{
    const rg_stats *s = stack->stats ? stack->stats(ctx) : NULL;
    return s ? rg_stats_total_errors(s) : 0;
}

/* The entry maps for a source's first link; RG_OK or 1 (message printed). */
static int links_init(rg_entry_links *lm, const opts *o, const rg_stack_desc *stack,
                      const rg_linkinfo *li)
{
    if (rg_entry_links_init(lm, stack, li) == RG_OK) return RG_OK;
    fprintf(stderr, "%s: %s: link type %d is not supported\n", o->prog, o->capture, li->dlt);
    return 1;
}

/* Everything a run over a source holds, released by run_free. */
typedef struct run {
    const rg_source_ops *io;
    rg_source *src;
    rg_counter counter;
    int counter_ok;
    void *ctx;
    uint64_t *live_per;
    rg_chain *chain; /* the NFs (rg_nfchain.h); NULL: none or the counters alone */
    rg_control *ctl; /* --control */
    rg_flowtab *ft;  /* --control: the open instances, for ctl flows (rg_live.h) */
    rg_live *live;   /* ctl stats, --stats-interval, --metrics; NULL: none */
    rg_xdp *xdp;     /* --xdp: the program on the interface (rg_xdp.h) */
} run;

static void run_free(const opts *o, const rg_stack_desc *stack, run *r)
{
    rg_live_free(r->live); /* its threads stopped before the context goes */
    if (r->ctx) stack->ctx_free(r->ctx);
    if (r->xdp) rg_xdp_impl.close(r->xdp); /* detached */
    rg_flowtab_free(r->ft);
    free(r->live_per);
    if (r->ctl) rg_control_close(r->ctl);
    if (r->chain) rg_chain_free(r->chain, o->prog);
    if (r->counter_ok) rg_counter_free(&r->counter);
    if (r->src) r->io->close(r->src);
}

/* The run's NFs form a chain: --nf NAME (stock) or PATH.so, --chain, --control, on one
 * context (--nf count/none alone: the counters only; --workers N: a chain per worker,
 * rg_workers.c). */
static int rg_uses_chain(const opts *o)
{
    return o->workers <= 1 && !o->bench &&
           (o->nfd || o->nf_is_path || o->chain_file || o->control || o->ipfix);
}

/* The chain of --nf, --chain and the control socket; RG_OK or 1 (message printed). */
static int open_chain(const opts *o, const rg_stack_desc *stack, run *r)
{
    char err[1024];
    r->chain = rg_chain_open(o, stack, 0, NULL, err, sizeof err);
    if (!r->chain) {
        /* a chain file's message starts with its file and line */
        const int bare = o->chain_file && !strncmp(err, o->chain_file, strlen(o->chain_file));
        fprintf(stderr, "%s%s%s\n", bare ? "" : o->prog, bare ? "" : ": ", err);
        return 1;
    }
    if (o->control) {
        r->ctl = rg_control_open(o->control, err, sizeof err);
        if (!r->ctl) {
            fprintf(stderr, "%s: --control %s: %s\n", o->prog, o->control, err);
            return 1;
        }
    }
    return RG_OK;
}

/* Source, counters, NF, context; RG_OK or 1 (message printed, r to free). */
static int run_open(const opts *o, const rg_stack_desc *stack, run *r, rg_entry_links *lm,
                    obs_chain *ch, rg_obs *obs)
{
    char err[512];
    r->io = o->src;
    rg_source_cfg scfg = o->scfg;
    scfg.stop = &stop_flag;
    r->src = r->io->open(&scfg, err, sizeof err);
    if (!r->src) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    if (links_init(lm, o, stack, r->io->link(r->src))) return 1;
    r->counter_ok = rg_counter_init(&r->counter, stack) == RG_OK;
    if (!r->counter_ok) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return 1;
    }
    rg_obs cobs;
    if (rg_uses_chain(o)) {
        if (open_chain(o, stack, r)) return 1;
        cobs = rg_chain_obs(r->chain);
    }
    *obs =
        rg_make_observer(&r->counter, r->chain ? &cobs : NULL, strcmp(o->nf, RG_NF_NONE) != 0, ch);
    if (o->control) { /* ctl flows: the open instances, seen around the chain */
        r->ft = rg_flowtab_new(stack, 0, 1, obs);
        if (!r->ft) {
            fprintf(stderr, "%s: out of memory\n", o->prog);
            return 1;
        }
        *obs = *rg_flowtab_obs(r->ft);
    }
    if (o->xdp) { /* outermost: it sees every instance the stack shows */
        /* the interface sources read what XDP passes: a bypassed frame is dropped there */
        const rg_xdp_cfg xc = {o->xdp, o->capture, o->xdp_mode, o->xdp_flows, 1};
        r->xdp = rg_xdp_impl.open(&xc, stack, obs, err, sizeof err);
        if (!r->xdp) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            return 1;
        }
        *obs = *rg_xdp_impl.obs(r->xdp);
    }
    rg_ctx_cfg cfg = rg_ctx_cfg_of(o, obs);
    r->ctx = stack->ctx_new(&cfg);
    r->live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *r->live_per);
    if (!r->ctx || !r->live_per) {
        fprintf(stderr, "%s: cannot create the %s stack context (out of memory?)\n", o->prog,
                stack->name);
        return 1;
    }
    if (rg_memcap_room(stack, r->ctx, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    return RG_OK;
}

/* The clock guard's jumps of a context (rg_stats), forward (1) or backward (0), or its
 * re-synchronisations (2). */
static uint64_t clock_jumps(const rg_stack_desc *stack, const void *ctx, int fwd)
{
    const rg_stats *st = stack->stats ? stack->stats(ctx) : NULL;
    if (!st) return 0;
    return fwd == 2 ? st->clock_resyncs : fwd ? st->clock_jumps_fwd : st->clock_jumps_back;
}

static int run_capture(const opts *o, const rg_stack_desc *stack)
{
    run r = {0};
    rg_entry_links lm;
    obs_chain ch;
    rg_obs obs;
    if (run_open(o, stack, &r, &lm, &ch, &obs)) {
        run_free(o, stack, &r);
        return 1;
    }
    feeder fd;
    rg_feeder_init(&fd, stack, &lm, r.ctx, o->no_timeouts, &r.counter.n);
    fd.prog = o->prog;
    fd.capture = o->capture;
    if (r.chain) {
        fd.batch_end = rg_chain_batch_end;
        fd.batch_self = r.chain;
    }
    if (r.ft) { /* ctl flows: the copies of the instances a packet touched, after it */
        rg_flowtab_chain_end(r.ft, fd.batch_end, fd.batch_self);
        fd.batch_end = rg_flowtab_packet_end;
        fd.batch_self = r.ft;
    }
    if (r.xdp) { /* the flows given flow verdicts into the maps, after the packet */
        rg_xdp_impl.chain_end(r.xdp, fd.batch_end, fd.batch_self);
        fd.batch_end = rg_xdp_impl.packet_end;
        fd.batch_self = r.xdp;
    }
    rg_trace_thread(0, r.chain ? rg_trace_chain_nfs : NULL, r.chain); /* ctl trace */
    if (rg_live_wanted(o)) { /* after the feeder: it shows its counts */
        char err[512];
        r.live = rg_live_new(o, 1, err, sizeof err);
        if (r.live)
            rg_live_set_view(r.live, 0, (rg_live_view){stack, &r.counter, &fd, r.ctx, r.ft, r.xdp});
        if (!r.live || rg_live_start(r.live, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            run_free(o, stack, &r);
            return 1;
        }
    }
    rg_writer w = {0};
    if (o->write) {
        char err[512];
        if (rg_writer_open(&w, o->write, r.io->link(r.src)->dlt, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            run_free(o, stack, &r);
            return 1;
        }
    }
    rg_rejector rj;
    rg_rejector_init(&rj, o->reject_rate);
    rg_frame burst[RG_BURST_MAX];
    const unsigned nb = (unsigned)o->burst;
    int n, status = 0;
    uint64_t left = o->count ? o->count : UINT64_MAX;
    uint64_t until = o->duration_ns ? now_ns(CLOCK_MONOTONIC) + o->duration_ns : UINT64_MAX;
    for (;;) {
        if (!left || stop_flag || (o->duration_ns && now_ns(CLOCK_MONOTONIC) >= until)) {
            n = RG_SRC_END;
            break;
        }
        /* chain changes apply here, between packets */
        if (r.ctl) rg_control_poll(r.ctl, r.chain);
        rg_live_poll(r.live, 0);
        n = r.io->next_burst(r.src, burst, left < nb ? (unsigned)left : nb);
        if (n == RG_SRC_ERROR && stop_flag) n = RG_SRC_END; /* a read the stop interrupted */
        if (n < 0) break;
        rg_feed_prefetch(&fd, burst, (unsigned)n);
        if (o->write || o->inline_mode) {
            uint8_t drop[RG_BURST_MAX];
            for (int i = 0; i < n; i++) {
                /* a frame no entry layer takes passes (a middlebox forwards what it does
                 * not inspect) */
                const int fed = rg_feed(&fd, &burst[i]);
                const int v = rg_frame_verdict(stack, r.ctx, r.chain, fed);
                drop[i] = v >= RG_DROP;
                if (!drop[i] && o->write) rg_writer_put(&w, &burst[i]);
                /* the replies where the packet was (--write), or after the burst (inline) */
                const unsigned inj = rg_chain_take_inject(r.chain);
                if (v >= RG_REJECT || inj) {
                    const int in_if = o->inline_mode && r.io->origin && r.io->forward_one
                                          ? (int)r.io->origin(r.src, (unsigned)i)
                                          : -1;
                    if (v >= RG_REJECT)
                        rg_rejector_answer(&rj, &burst[i], v, o->write ? &w : NULL, in_if);
                    if (inj) rg_rejector_inject(&rj, &burst[i], inj, o->write ? &w : NULL, in_if);
                }
            }
            if (o->inline_mode) r.io->forward(r.src, drop, (unsigned)n);
            if (rj.nq) rg_rejector_flush(&rj, r.src, r.io);
        } else {
            rg_feed_burst(&fd, burst, (unsigned)n);
        }
        left -= (uint64_t)n;
    }
    rg_source_stats sst;
    r.io->stats(r.src, &sst);
    /* forwarded: the frames that went on; the replies are counted as the rejects' */
    sst.tx_frames -= rj.sent_inline < sst.tx_frames ? rj.sent_inline : sst.tx_frames;
    if (n == RG_SRC_ERROR) {
        /* keep what was read: flush and report it, but fail */
        fprintf(stderr, "%s: %s: packet %" PRIu64 ": %s\n", o->prog, o->capture, fd.pkts + 1,
                r.io->error(r.src));
        status = 1;
    }

    rg_counter_fold(&r.counter, stack->stats ? stack->stats(r.ctx) : NULL);
    const rg_counts *c = &r.counter.n;
    rg_live_before_flush(stack, &r.counter.n, r.live_per);
    uint64_t live = 0;
    for (unsigned i = 0; i < stack->nlayers; i++)
        live += r.live_per[i];
    stack->flush(r.ctx);
    if (rg_writer_close(&w, o->prog)) status = 1;
    if (r.ctl) rg_control_close(r.ctl); /* no more changes */
    r.ctl = NULL;
    if (r.chain) {
        rg_chain_batch_end(r.chain); /* the flush's events */
        if (rg_chain_free(r.chain, o->prog)) status = 1;
        r.chain = NULL;
    }
    rg_live_final(r.live); /* the last stats line: the summary's counters */
    rg_xdp_counts xc;
    if (r.xdp) rg_xdp_impl.counts(r.xdp, &xc); /* after the flush: every flow read back */
    summary s = {.xdp = r.xdp ? &xc : NULL,
                 .writer = o->write ? &w : NULL,
                 .link = lm.m[0].li.name,
                 .pkts = fd.pkts,
                 .bytes = fd.bytes,
                 .opened = c->opened,
                 .closed = c->closed,
                 .live = live,
                 .calls = c->calls,
                 .payload = c->payload_bytes,
                 .errors = stack_errors(stack, r.ctx) + fd.skipped,
                 .skipped = fd.skipped,
                 .n = c,
                 .live_per = r.live_per,
                 .st = stack->stats ? stack->stats(r.ctx) : NULL,
                 .skipped_linktype = fd.skipped_linktype,
                 .linktype_what = fd.linktype_what,
                 .gaps = c->gaps,
                 .gap_bytes = c->gap_bytes,
                 .clock_fwd = clock_jumps(stack, r.ctx, 1),
                 .clock_back = clock_jumps(stack, r.ctx, 0),
                 .clock_resyncs = clock_jumps(stack, r.ctx, 2),
                 .li = &lm.m[0].li,
                 .has_dropped = (r.io->caps & RG_SRC_CAP_ARRIVAL_TS) != 0,
                 .dropped = sst.dropped,
                 .tx = o->inline_mode ? &sst : NULL,
                 .reject = o->write || o->inline_mode ? &rj : NULL};
    if (r.io->detail) r.io->detail(r.src, s.io_detail, sizeof s.io_detail);
    rg_print_summary(o, stack, &s);
    rg_rejector_free(&rj);
    fflush(stdout);
    if (o->stats && stack->stats) rg_stats_print(stack->stats(r.ctx), stderr);
    run_free(o, stack, &r);
    return status;
}

static uint64_t now_ns(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (uint64_t)t.tv_sec * NS_PER_S + (uint64_t)t.tv_nsec;
}

/* The --bench line (of the last pass, its context still alive): timings and
 * counts, then the state per tracked instance of every layer with a
 * selector ("state_bytes": the table's record: header, keys, payload) and
 * the peak heap held by reassembly buffers during the pass. */
static void print_bench(const opts *o, const rg_stack_desc *stack, const void *ctx,
                        const rg_capture *cap, uint64_t best_cpu, uint64_t best_wall,
                        const rg_counts *last, const uint64_t *live_per, size_t seq_peak)
{
    double pkts = cap->count ? (double)cap->count : 1.0;
    printf("{\"pkts\":%zu,\"passes\":%" PRIu64 ",\"cpu_ns_per_pkt\":%.2f,\"wall_ns_per_pkt\":%.2f"
           ",\"payload_bytes\":%" PRIu64 ",\"flows\":%" PRIu64 ",\"flows_opened\":%" PRIu64
           ",\"flows_closed\":%" PRIu64 ",\"calls\":%" PRIu64 ",\"state_bytes\":{",
           cap->count, o->passes, (double)best_cpu / pkts, (double)best_wall / pkts,
           last->payload_bytes, rg_total_flows(stack, last), last->opened, last->closed,
           last->calls);
    const rg_stats *st = stack->stats ? stack->stats(ctx) : NULL;
    int first = 1;
    for (unsigned i = 0; st && i < stack->nlayers && i < st->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        if (!first) fputc(',', stdout);
        first = 0;
        rg_json_string(stdout, stack->layers[i].name);
        printf(":%" PRIu64, st->layer[i].inst.record_bytes);
    }
    printf("},\"seq_heap_peak_bytes\":%zu,", seq_peak);
    rg_memcap_json(st);
    printf("\"clock_jumps\":{\"forward\":%" PRIu64 ",\"backward\":%" PRIu64 "},",
           st ? st->clock_jumps_fwd : 0, st ? st->clock_jumps_back : 0);
    rg_rules_json(st);
    rg_layers_json(stack, last, live_per, st);
    if (o->checksums) rg_checksums_json(stack, st);
    fputs("}\n", stdout);
    fflush(stdout);
}

/* One --bench pass; RG_OK or 1 (message printed). */
static int bench_pass(const opts *o, const rg_stack_desc *stack, const rg_capture *cap,
                      rg_entry_links *lm, uint64_t pass, uint64_t *best_cpu, uint64_t *best_wall,
                      uint64_t *live_per)
{
    rg_counter counter;
    if (rg_counter_init(&counter, stack)) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        return 1;
    }
    /* --nf PATH.so / --chain: the NFs run in the timed loop too (created before it) */
    run nr = {0};
    obs_chain och;
    rg_obs cobs, obs;
    if ((o->nf_is_path || o->chain_file) && open_chain(o, stack, &nr)) {
        rg_counter_free(&counter);
        return 1;
    }
    if (nr.chain) {
        cobs = rg_chain_obs(nr.chain);
        obs = rg_make_observer(&counter, &cobs, strcmp(o->nf, RG_NF_NONE) != 0, &och);
    } else {
        obs = rg_make_observer(&counter, NULL, strcmp(o->nf, RG_NF_NONE) != 0, NULL);
    }
    rg_ctx_cfg cfg = rg_ctx_cfg_of(o, &obs);
    void *ctx = stack->ctx_new(&cfg);
    char err[256];
    if (!ctx || rg_memcap_room(stack, ctx, err, sizeof err)) {
        if (ctx)
            fprintf(stderr, "%s: %s\n", o->prog, err);
        else
            fprintf(stderr, "%s: cannot create the %s stack context (out of memory?)\n", o->prog,
                    stack->name);
        if (ctx) stack->ctx_free(ctx);
        rg_chain_free(nr.chain, o->prog);
        rg_counter_free(&counter);
        return 1;
    }
    feeder fd;
    rg_feeder_init(&fd, stack, lm, ctx, o->no_timeouts, &counter.n);
    fd.prog = pass ? NULL : o->prog; /* warn in the first pass only */
    fd.capture = o->capture;
    if (nr.chain) {
        fd.batch_end = rg_chain_batch_end;
        fd.batch_self = nr.chain;
    }
    rg_seq_heap_reset_peak();
    uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), w0 = now_ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < cap->count; i += o->burst) {
        const unsigned k = (unsigned)(cap->count - i < o->burst ? cap->count - i : o->burst);
        rg_feed_prefetch(&fd, &cap->frames[i], k);
        rg_feed_burst(&fd, &cap->frames[i], k);
    }
    uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID), w1 = now_ns(CLOCK_MONOTONIC);
    if (c1 - c0 < *best_cpu) *best_cpu = c1 - c0;
    if (w1 - w0 < *best_wall) *best_wall = w1 - w0;
    rg_counter_fold(&counter, stack->stats ? stack->stats(ctx) : NULL);
    rg_live_before_flush(stack, &counter.n, live_per);
    stack->flush(ctx);
    int rc = RG_OK;
    if (nr.chain) {
        rg_chain_batch_end(nr.chain);
        if (rg_chain_free(nr.chain, o->prog)) rc = 1;
    }
    size_t seq_peak = rg_seq_heap_stats().peak; /* this pass's (the context is alive) */
    if (pass + 1 == o->passes) {
        print_bench(o, stack, ctx, cap, *best_cpu, *best_wall, &counter.n, live_per, seq_peak);
        if (o->stats && stack->stats) rg_stats_print(stack->stats(ctx), stderr);
    }
    stack->ctx_free(ctx);
    rg_counter_free(&counter);
    return rc;
}

static int run_bench(const opts *o, const rg_stack_desc *stack)
{
    char err[512];
    rg_capture cap;
    if (rg_capture_load(o->capture, &cap, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    rg_entry_links lm;
    uint64_t *live_per = NULL;
    int rc = links_init(&lm, o, stack, &cap.link);
    if (!rc) {
        live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *live_per);
        if (!live_per) {
            fprintf(stderr, "%s: out of memory\n", o->prog);
            rc = 1;
        }
    }
    uint64_t best_cpu = UINT64_MAX, best_wall = UINT64_MAX;
    if (!rc && o->workers) { /* --workers N: rg_bench_workers.c */
        rc = rg_bench_workers(o, stack, &lm, &cap);
        free(live_per);
        rg_capture_free(&cap);
        return rc;
    }
    for (uint64_t pass = 0; !rc && pass < o->passes; pass++)
        rc = bench_pass(o, stack, &cap, &lm, pass, &best_cpu, &best_wall, live_per);
    free(live_per);
    rg_capture_free(&cap);
    return rc;
}

int rg_main(int argc, char **argv, const rg_stack_desc *stack)
{
    opts o;
    int rc = rg_parse_opts(argc, argv, stack, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (o.bench) return run_bench(&o, stack);
    /* from before the source opens (a signal then must not kill the run) to
     * the end of the summary */
    struct sigaction old_sig[3];
    catch_stop_signals(old_sig);
    rg_wrote_start();
    rc = rg_wants_workers(&o) ? rg_run_workers(&o, stack, &stop_flag) : run_capture(&o, stack);
    restore_stop_signals(old_sig);
    return rc;
}
