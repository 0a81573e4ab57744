/* rg_live.c - live counters: snapshots taken by the workers between bursts, as JSON
 * (ctl stats, stats.jsonl, --stats-fd) and Prometheus text (ctl stats --format prometheus,
 * --metrics); the flow-table requests (ctl flows) gathered the same way (see rg_live.h). */
#include "rg_live.h"
#include "rg_out.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rg/rg_json.h"
#include "rg/rg_obs.h"
#include "rg_ctlsec.h"
#include "rg_driver.h"

/* --metrics's responder (rg_metrics.c). */
typedef struct rg_metrics rg_metrics;
rg_metrics *rg_metrics_open(rg_live *l, const char *addr, char *err, size_t errlen);
void rg_metrics_close(rg_metrics *m);

enum { ASK_WAIT_MS = 2000 }; /* a worker answers between bursts: an idle one at once */
enum { REQ_STATS = 1, REQ_FLOWS = 2 };

static struct {
    uint64_t interval_ms; /* --stats-interval: 0 = none */
    int file;             /* --stats-interval given: OUT/stats.jsonl */
    int fd;               /* --stats-fd: -1 = none */
    const char *metrics;  /* --metrics ADDR:PORT */
} cfg = {0, 0, -1, NULL};

/* One layer's counters in a snapshot (the summary's, folded as at its end). */
typedef struct live_layer {
    uint64_t opened, closed[4], one_packet, lingering, dropped_by_verdict, bypassed;
    uint64_t cap_hits, evicted, dropped_pkts, seq_limit_hits;
} live_layer;

typedef struct live_snap {
    uint64_t pkts, bytes, skipped, skipped_linktype, errors;
    uint64_t calls, opened, closed, payload, gaps, gap_bytes;
    uint64_t clock_fwd, clock_back, clock_resyncs;
    live_layer *layer; /* nlayers */
    int has_xdp;       /* --xdp (one context): the program's counters */
    rg_xdp_counts xdp;
} live_snap;

struct rg_live {
    const opts *o;
    const rg_stack_desc *stack;
    unsigned nw;
    rg_live_view *views;
    live_snap *snaps;
    uint64_t *seen; /* per worker: the last request answered */
    atomic_int pending;
    uint64_t gen;           /* under mu */
    unsigned acks;          /* under mu */
    int kind;               /* REQ_*, under mu */
    int folded;             /* the final snapshot: counters folded by the driver already */
    int final;              /* the workers have stopped: snapshots are read directly */
    pthread_mutex_t ask_mu; /* one request at a time */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* flows request */
    const char *layer;
    const rg_flowfilter *filter;
    uint64_t limit;
    rg_sbuf *bufs; /* per worker */
    /* the reading thread's (--workers): clock jumps and frames too large */
    _Atomic uint64_t rd_fwd, rd_back, rd_resyncs, rd_lost;
    int reader;
    /* --stats-interval / --stats-fd */
    rg_out *jsonl; /* OUT/stats.jsonl: a line output (rotated, reopened: rg_out.h) */
    pthread_t th;
    int th_ok;
    atomic_int stop;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    rg_metrics *metrics;
    struct timespec t0;
};

static rg_live *current;

rg_live *rg_live_current(void)
{
    return current;
}

void rg_sbuf_printf(rg_sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if ((size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->n <= (size_t)k)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

int rg_live_option(const char *name, const char *value, char *err, size_t errlen)
{
    uint64_t v;
    if (!strcmp(name, "stats-interval")) {
        /* seconds, with up to 3 decimals: 0.5 */
        char whole[32] = "", *dot = strchr(value, '.');
        size_t wn = dot ? (size_t)(dot - value) : strlen(value);
        uint64_t ms = 0, frac = 0;
        int ok = wn > 0 && wn < sizeof whole;
        if (ok) {
            memcpy(whole, value, wn);
            whole[wn] = 0;
            ok = !parse_u64(whole, 0, 86400 * 365, &ms);
        }
        if (ok && dot) {
            size_t fn = strlen(dot + 1);
            ok = fn >= 1 && fn <= 3 && !parse_u64(dot + 1, 0, 999, &frac);
            for (size_t i = fn; ok && i < 3; i++)
                frac *= 10;
        }
        ms = ms * 1000 + frac;
        if (!ok || ms < 100) {
            snprintf(err, errlen,
                     "invalid value '%s' for --stats-interval (seconds, 0.1 or more: 10, 0.5)",
                     value);
            return -1;
        }
        cfg.interval_ms = ms;
        cfg.file = 1;
    } else if (!strcmp(name, "stats-fd")) {
        if (parse_u64(value, 0, 1 << 20, &v) || fcntl((int)v, F_GETFD) < 0) {
            snprintf(err, errlen, "invalid value '%s' for --stats-fd (an open file descriptor)",
                     value);
            return -1;
        }
        cfg.fd = (int)v;
    } else { /* metrics */
        const char *colon = strrchr(value, ':');
        if (!colon || colon == value || parse_u64(colon + 1, 0, 65535, &v)) {
            snprintf(err, errlen,
                     "invalid value '%s' for --metrics (ADDR:PORT, e.g. 127.0.0.1:9100)", value);
            return -1;
        }
        cfg.metrics = value;
    }
    return 0;
}

int rg_live_wanted(const opts *o)
{
    return o->control || cfg.interval_ms || cfg.fd >= 0 || cfg.metrics;
}

rg_live *rg_live_new(const opts *o, unsigned nw, char *err, size_t errlen)
{
    rg_live *l = calloc(1, sizeof *l);
    if (l) {
        l->views = calloc(nw, sizeof *l->views);
        l->snaps = calloc(nw, sizeof *l->snaps);
        l->seen = calloc(nw, sizeof *l->seen);
        l->bufs = calloc(nw, sizeof *l->bufs);
    }
    if (!l || !l->views || !l->snaps || !l->seen || !l->bufs) {
        if (l) {
            free(l->views);
            free(l->snaps);
            free(l->seen);
            free(l->bufs);
        }
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->o = o;
    l->nw = nw;
    l->reader = nw > 1 || rg_wants_workers(o);
    pthread_mutex_init(&l->ask_mu, NULL);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_mutex_init(&l->stop_mu, NULL);
    pthread_cond_init(&l->stop_cv, NULL);
    clock_gettime(CLOCK_REALTIME, &l->t0);
    current = l;
    return l;
}

void rg_live_set_view(rg_live *l, unsigned worker, rg_live_view v)
{
    l->stack = v.stack;
    l->views[worker] = v;
    if (!l->snaps[worker].layer)
        l->snaps[worker].layer =
            calloc(v.stack->nlayers ? v.stack->nlayers : 1, sizeof(live_layer));
}

void rg_live_reader(rg_live *l, uint64_t fwd, uint64_t back, uint64_t resyncs, uint64_t lost)
{
    atomic_store_explicit(&l->rd_fwd, fwd, memory_order_relaxed);
    atomic_store_explicit(&l->rd_back, back, memory_order_relaxed);
    atomic_store_explicit(&l->rd_resyncs, resyncs, memory_order_relaxed);
    atomic_store_explicit(&l->rd_lost, lost, memory_order_relaxed);
}

/* Worker w's counters into its slot, as the summary folds them (rg_counter_fold: the
 * one-packet instances the counter was not shown), on the worker's thread. */
static void take(rg_live *l, unsigned w)
{
    const rg_live_view *v = &l->views[w];
    live_snap *s = &l->snaps[w];
    const rg_counts *n = &v->counter->n;
    const rg_stats *st = v->stack->stats ? v->stack->stats(v->ctx) : NULL;
    if (!s->layer || !v->counter) return;
    s->pkts = v->fd->pkts;
    s->bytes = v->fd->bytes;
    s->skipped = v->fd->skipped;
    s->skipped_linktype = v->fd->skipped_linktype;
    s->errors = (st ? rg_stats_total_errors(st) : 0) + v->fd->skipped;
    s->calls = n->calls;
    s->opened = n->opened;
    s->closed = n->closed;
    s->payload = n->payload_bytes;
    s->gaps = n->gaps;
    s->gap_bytes = n->gap_bytes;
    s->clock_fwd = st ? st->clock_jumps_fwd : 0;
    s->clock_back = st ? st->clock_jumps_back : 0;
    s->clock_resyncs = st ? st->clock_resyncs : 0;
    if (v->xdp) { /* the kernel's counters, read now (rg_stats) */
        rg_xdp_impl.counts(v->xdp, &s->xdp);
        s->has_xdp = 1;
    }
    for (unsigned i = 0; i < v->stack->nlayers; i++) {
        live_layer *y = &s->layer[i];
        const rg_layer_counts *c = &n->layer[i];
        const rg_layer_stats *ls = st && i < st->nlayers ? &st->layer[i] : NULL;
        const uint64_t t = ls && !l->folded ? ls->transient : 0;
        y->opened = c->opened + t;
        for (int r = 0; r < 4; r++)
            y->closed[r] = c->closed[r] + (r == RG_CLOSE_ACCEPT ? t : 0);
        y->one_packet = c->one_packet + t;
        s->opened += t;
        s->closed += t;
        y->lingering = ls ? ls->lingering : 0;
        y->dropped_by_verdict = ls ? ls->dropped_by_verdict : 0;
        y->bypassed = ls ? ls->bypassed : 0;
        y->cap_hits = ls ? ls->mem.cap_hits : 0;
        y->evicted = ls ? ls->mem.evicted : 0;
        y->dropped_pkts = ls ? ls->mem.dropped_pkts : 0;
        y->seq_limit_hits = ls ? ls->seq.buffer_full : 0;
    }
}

static void answer(rg_live *l, unsigned w)
{
    if (l->kind == REQ_STATS) {
        take(l, w);
    } else if (l->views[w].ft) {
        rg_flowtab_dump(l->views[w].ft, l->layer, l->filter, l->limit, &l->bufs[w]);
    }
}

void rg_live_poll(rg_live *l, unsigned worker)
{
    if (!l || !atomic_load_explicit(&l->pending, memory_order_acquire)) return;
    pthread_mutex_lock(&l->mu);
    if (atomic_load_explicit(&l->pending, memory_order_relaxed) && l->seen[worker] != l->gen) {
        l->seen[worker] = l->gen;
        answer(l, worker);
        if (++l->acks == l->nw) pthread_cond_signal(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
}

/* Post a request of kind and wait for every worker's answer; 0, or -1 (err: a worker did not
 * answer in time: its thread is blocked reading the source). */
static int ask(rg_live *l, int kind, char *err, size_t errlen)
{
    pthread_mutex_lock(&l->mu);
    l->kind = kind;
    if (l->final) { /* the workers are done: their counters are still there */
        for (unsigned w = 0; w < l->nw; w++)
            answer(l, w);
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    l->gen++;
    l->acks = 0;
    atomic_store_explicit(&l->pending, 1, memory_order_release);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ASK_WAIT_MS / 1000;
    int rc = 0;
    while (l->acks < l->nw && !l->final && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&l->cv, &l->mu, &dl);
    const unsigned acks = l->acks;
    atomic_store_explicit(&l->pending, 0, memory_order_relaxed);
    if (l->final && acks < l->nw) { /* ended while waiting */
        for (unsigned w = 0; w < l->nw; w++)
            answer(l, w);
    }
    pthread_mutex_unlock(&l->mu);
    if (acks < l->nw && !l->final) {
        snprintf(err, errlen,
                 "%u of %u workers did not answer within %d s (a single context answers "
                 "between bursts: it may be waiting for input)",
                 l->nw - acks, l->nw, ASK_WAIT_MS / 1000);
        return -1;
    }
    return 0;
}

/* ---- rendering ---- */

static void add_snap(live_snap *t, const live_snap *s, unsigned nlayers)
{
    t->pkts += s->pkts;
    t->bytes += s->bytes;
    t->skipped += s->skipped;
    t->skipped_linktype += s->skipped_linktype;
    t->errors += s->errors;
    t->calls += s->calls;
    t->opened += s->opened;
    t->closed += s->closed;
    t->payload += s->payload;
    t->gaps += s->gaps;
    t->gap_bytes += s->gap_bytes;
    if (s->has_xdp) { /* one context only (--xdp): its counters */
        t->has_xdp = 1;
        t->xdp = s->xdp;
    }
    t->clock_fwd += s->clock_fwd;
    t->clock_back += s->clock_back;
    t->clock_resyncs += s->clock_resyncs;
    for (unsigned i = 0; i < nlayers; i++) {
        live_layer *y = &t->layer[i];
        const live_layer *x = &s->layer[i];
        y->opened += x->opened;
        for (int r = 0; r < 4; r++)
            y->closed[r] += x->closed[r];
        y->one_packet += x->one_packet;
        y->lingering += x->lingering;
        y->dropped_by_verdict += x->dropped_by_verdict;
        y->bypassed += x->bypassed;
        y->cap_hits += x->cap_hits;
        y->evicted += x->evicted;
        y->dropped_pkts += x->dropped_pkts;
        y->seq_limit_hits += x->seq_limit_hits;
    }
}

static uint64_t layer_live(const live_layer *y)
{
    uint64_t c = y->closed[0] + y->closed[1] + y->closed[2] + y->closed[3] + y->lingering;
    return y->opened > c ? y->opened - c : 0;
}

/* The total over the workers; the reading thread's counters in it (--workers). */
static int total_of(rg_live *l, live_snap *t)
{
    const unsigned nl = l->stack->nlayers;
    memset(t, 0, sizeof *t);
    t->layer = calloc(nl ? nl : 1, sizeof *t->layer);
    if (!t->layer) return -1;
    for (unsigned w = 0; w < l->nw; w++)
        add_snap(t, &l->snaps[w], nl);
    if (l->reader) {
        t->clock_fwd = atomic_load(&l->rd_fwd);
        t->clock_back = atomic_load(&l->rd_back);
        t->clock_resyncs = atomic_load(&l->rd_resyncs);
        const uint64_t lost = atomic_load(&l->rd_lost);
        t->skipped += lost;
        t->errors += lost;
    }
    return 0;
}

static void snap_json(rg_sbuf *b, const rg_stack_desc *stack, const live_snap *s)
{
    uint64_t flows = 0, live = 0, lingering = 0;
    for (unsigned i = 0; i < stack->nlayers; i++)
        if (stack->layers[i].has_instance) {
            flows += s->layer[i].opened - s->layer[i].one_packet;
            live += layer_live(&s->layer[i]);
            lingering += s->layer[i].lingering;
        }
    rg_sbuf_printf(b,
                   "\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"flows\":%" PRIu64
                   ",\"flows_opened\":%" PRIu64 ",\"flows_closed\":%" PRIu64 ",\"live\":%" PRIu64
                   ",\"lingering\":%" PRIu64 ",\"calls\":%" PRIu64 ",\"payload_bytes\":%" PRIu64
                   ",\"errors\":%" PRIu64 ",\"skipped\":%" PRIu64 ",\"skipped_linktype\":%" PRIu64
                   ",\"gaps\":%" PRIu64 ",\"gap_bytes\":%" PRIu64
                   ",\"clock_jumps\":{\"forward\":%" PRIu64 ",\"backward\":%" PRIu64
                   "},\"clock_resyncs\":%" PRIu64 ",",
                   s->pkts, s->bytes, flows, s->opened, s->closed, live, lingering, s->calls,
                   s->payload, s->errors, s->skipped, s->skipped_linktype, s->gaps, s->gap_bytes,
                   s->clock_fwd, s->clock_back, s->clock_resyncs);
    if (s->has_xdp) {
        static const char *const names[RG_XDP_NSTATS] = RG_XDP_STAT_NAMES;
        rg_sbuf_printf(b, "\"xdp\":{\"mode\":\"%s\"", s->xdp.mode);
        for (int i = 0; i < RG_XDP_NSTATS; i++)
            rg_sbuf_printf(b, ",\"%s\":%" PRIu64, names[i], s->xdp.stat[i]);
        rg_sbuf_printf(b,
                       ",\"drop_flows\":%" PRIu64 ",\"bypass_flows\":%" PRIu64
                       ",\"kernel_packets\":%" PRIu64 ",\"map_errors\":%" PRIu64 "},",
                       s->xdp.drop_flows, s->xdp.bypass_flows, s->xdp.kernel_packets,
                       s->xdp.map_errors);
    }
    rg_sbuf_printf(b, "\"layers\":{");
    int first = 1;
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const live_layer *y = &s->layer[i];
        rg_sbuf_printf(b, "%s\"%s\":{\"opened\":%" PRIu64 ",\"closed\":{", first ? "" : ",",
                       stack->layers[i].name, y->opened);
        first = 0;
        for (int r = 0; r < 4; r++)
            rg_sbuf_printf(b, "%s\"%s\":%" PRIu64, r ? "," : "", rg_close_name(r), y->closed[r]);
        rg_sbuf_printf(b,
                       "},\"live\":%" PRIu64 ",\"lingering\":%" PRIu64 ",\"one_packet\":%" PRIu64
                       ",\"flows\":%" PRIu64 ",\"dropped_by_verdict\":%" PRIu64
                       ",\"bypassed\":%" PRIu64 ",\"memory\":{\"cap_hits\":%" PRIu64
                       ",\"evicted\":%" PRIu64 ",\"dropped_packets\":%" PRIu64
                       ",\"seq_limit_hits\":%" PRIu64 "}}",
                       layer_live(y), y->lingering, y->one_packet, y->opened - y->one_packet,
                       y->dropped_by_verdict, y->bypassed, y->cap_hits, y->evicted, y->dropped_pkts,
                       y->seq_limit_hits);
    }
    rg_sbuf_printf(b, "}");
}

/* One JSON object (one line, with its newline) of the snapshots just taken. */
static int stats_json(rg_live *l, rg_sbuf *b)
{
    live_snap t;
    if (total_of(l, &t)) return -1;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    rg_sbuf_printf(b, "{\"time\":%lld.%03ld,\"stack\":", (long long)now.tv_sec,
                   now.tv_nsec / 1000000);
    rg_sbuf_printf(b, "\"%s\",\"final\":%s,\"total\":{", l->stack->name,
                   l->final ? "true" : "false");
    snap_json(b, l->stack, &t);
    rg_sbuf_printf(b, "},\"workers\":[");
    for (unsigned w = 0; w < l->nw; w++) {
        rg_sbuf_printf(b, "%s{\"worker\":%u,", w ? "," : "", w);
        snap_json(b, l->stack, &l->snaps[w]);
        rg_sbuf_printf(b, "}");
    }
    rg_sbuf_printf(b, "]}\n");
    free(t.layer);
    return b->oom ? -1 : 0;
}

/* A Prometheus family: its HELP and TYPE lines. */
static void family(rg_sbuf *b, const char *name, const char *type, const char *help)
{
    rg_sbuf_printf(b, "# HELP rubikgen_%s %s\n# TYPE rubikgen_%s %s\n", name, help, name, type);
}

typedef struct {
    const char *name, *type, *help;
    size_t off; /* in live_snap */
} scalar_metric;

#define SNAP_OFF(f) offsetof(live_snap, f)
static const scalar_metric scalars[] = {
    {"packets_total", "counter", "Frames fed to the stack.", SNAP_OFF(pkts)},
    {"bytes_total", "counter", "Bytes of the frames fed to the stack (captured lengths).",
     SNAP_OFF(bytes)},
    {"instances_opened_total", "counter", "Instances (flows) created, every layer.",
     SNAP_OFF(opened)},
    {"instances_closed_total", "counter", "Instances ended for any reason, every layer.",
     SNAP_OFF(closed)},
    {"handler_calls_total", "counter", "Handler calls the observers saw.", SNAP_OFF(calls)},
    {"payload_bytes_total", "counter", "Bytes of the handler calls' data arguments.",
     SNAP_OFF(payload)},
    {"errors_total", "counter", "Stack errors and frames no entry layer took.", SNAP_OFF(errors)},
    {"skipped_total", "counter", "Frames no entry layer took.", SNAP_OFF(skipped)},
    {"gaps_total", "counter", "Holes skipped in reassembled data.", SNAP_OFF(gaps)},
    {"gap_bytes_total", "counter", "Bytes in the holes skipped.", SNAP_OFF(gap_bytes)},
};

static uint64_t at(const live_snap *s, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)s + off, sizeof v);
    return v;
}

typedef struct {
    const char *name, *type, *help;
    size_t off; /* in live_layer */
} layer_metric;

#define LAYER_OFF(f) offsetof(live_layer, f)
static const layer_metric layer_metrics[] = {
    {"layer_opened_total", "counter", "Instances of the layer created.", LAYER_OFF(opened)},
    {"layer_one_packet_total", "counter",
     "Instances closed in the packet that opened them (not flows).", LAYER_OFF(one_packet)},
    {"layer_dropped_by_verdict_total", "counter",
     "Packets stopped at the lookup by a drop-flow verdict.", LAYER_OFF(dropped_by_verdict)},
    {"layer_bypassed_total", "counter", "Packets passed uninspected by a bypass verdict.",
     LAYER_OFF(bypassed)},
    {"memcap_hits_total", "counter", "Allocations past a memcap.", LAYER_OFF(cap_hits)},
    {"memcap_evicted_total", "counter", "Instances evicted to make room under a memcap.",
     LAYER_OFF(evicted)},
    {"memcap_dropped_packets_total", "counter", "Packets of drop-flow instances.",
     LAYER_OFF(dropped_pkts)},
    {"seq_limit_hits_total", "counter", "Inserts past a sequence's caps.",
     LAYER_OFF(seq_limit_hits)},
};

static uint64_t lat(const live_layer *y, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)y + off, sizeof v);
    return v;
}

static int prometheus(rg_live *l, rg_sbuf *b)
{
    const rg_stack_desc *stack = l->stack;
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        family(b, scalars[k].name, scalars[k].type, scalars[k].help);
        for (unsigned w = 0; w < l->nw; w++)
            rg_sbuf_printf(b, "rubikgen_%s{worker=\"%u\"} %" PRIu64 "\n", scalars[k].name, w,
                           at(&l->snaps[w], scalars[k].off));
    }
    family(b, "instances_live", "gauge", "Instances open now, every layer.");
    for (unsigned w = 0; w < l->nw; w++) {
        uint64_t live = 0;
        for (unsigned i = 0; i < stack->nlayers; i++)
            if (stack->layers[i].has_instance) live += layer_live(&l->snaps[w].layer[i]);
        rg_sbuf_printf(b, "rubikgen_instances_live{worker=\"%u\"} %" PRIu64 "\n", w, live);
    }
    /* the reading thread decides clock jumps with --workers: one series without a worker */
    live_snap t;
    if (total_of(l, &t)) return -1;
    family(b, "clock_jumps_total", "counter",
           "Packets dated beyond --max-clock-jump, processed at the flow clock.");
    rg_sbuf_printf(b,
                   "rubikgen_clock_jumps_total{direction=\"forward\"} %" PRIu64
                   "\nrubikgen_clock_jumps_total{direction=\"backward\"} %" PRIu64 "\n",
                   t.clock_fwd, t.clock_back);
    family(b, "clock_resyncs_total", "counter", "New time bases the flow clock followed.");
    rg_sbuf_printf(b, "rubikgen_clock_resyncs_total %" PRIu64 "\n", t.clock_resyncs);
    if (t.has_xdp) {
        static const char *const names[RG_XDP_NSTATS] = RG_XDP_STAT_NAMES;
        family(b, "xdp_frames_total", "counter",
               "Frames the XDP program saw (packets) and decided, by what it did (--xdp).");
        for (int i = 0; i < RG_XDP_NSTATS; i++)
            rg_sbuf_printf(b, "rubikgen_xdp_frames_total{what=\"%s\"} %" PRIu64 "\n", names[i],
                           t.xdp.stat[i]);
        family(b, "xdp_flows_total", "counter",
               "Flows put into the XDP program's drop and bypass maps (--xdp).");
        rg_sbuf_printf(b,
                       "rubikgen_xdp_flows_total{map=\"drop\"} %" PRIu64
                       "\nrubikgen_xdp_flows_total{map=\"bypass\"} %" PRIu64 "\n",
                       t.xdp.drop_flows, t.xdp.bypass_flows);
    }
    free(t.layer);
    family(b, "layer_closed_total", "counter", "Instances of the layer ended, by reason.");
    for (unsigned w = 0; w < l->nw; w++)
        for (unsigned i = 0; i < stack->nlayers; i++) {
            if (!stack->layers[i].has_instance) continue;
            for (int r = 0; r < 4; r++)
                rg_sbuf_printf(b,
                               "rubikgen_layer_closed_total{worker=\"%u\",layer=\"%s\","
                               "reason=\"%s\"} %" PRIu64 "\n",
                               w, stack->layers[i].name, rg_close_name(r),
                               l->snaps[w].layer[i].closed[r]);
        }
    family(b, "layer_live", "gauge", "Instances of the layer open now.");
    for (unsigned w = 0; w < l->nw; w++)
        for (unsigned i = 0; i < stack->nlayers; i++)
            if (stack->layers[i].has_instance)
                rg_sbuf_printf(b, "rubikgen_layer_live{worker=\"%u\",layer=\"%s\"} %" PRIu64 "\n",
                               w, stack->layers[i].name, layer_live(&l->snaps[w].layer[i]));
    for (size_t k = 0; k < sizeof layer_metrics / sizeof layer_metrics[0]; k++) {
        family(b, layer_metrics[k].name, layer_metrics[k].type, layer_metrics[k].help);
        for (unsigned w = 0; w < l->nw; w++)
            for (unsigned i = 0; i < stack->nlayers; i++)
                if (stack->layers[i].has_instance)
                    rg_sbuf_printf(b, "rubikgen_%s{worker=\"%u\",layer=\"%s\"} %" PRIu64 "\n",
                                   layer_metrics[k].name, w, stack->layers[i].name,
                                   lat(&l->snaps[w].layer[i], layer_metrics[k].off));
    }
    return b->oom ? -1 : 0;
}

/* A fresh snapshot rendered by fn into b; 0 or -1 (err). */
static int fresh(rg_live *l, int (*fn)(rg_live *, rg_sbuf *), rg_sbuf *b, char *err, size_t errlen)
{
    pthread_mutex_lock(&l->ask_mu);
    int rc = ask(l, REQ_STATS, err, errlen);
    if (!rc && fn(l, b)) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    pthread_mutex_unlock(&l->ask_mu);
    return rc;
}

char *rg_live_prometheus(rg_live *l, size_t *len, char *err, size_t errlen)
{
    rg_sbuf b = {0};
    if (fresh(l, prometheus, &b, err, errlen)) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}

/* ---- the control requests ---- */

int rg_live_handles(const char *req)
{
    return (!strncmp(req, "stats", 5) && (req[5] == 0 || req[5] == '\t')) ||
           (!strncmp(req, "flows", 5) && (req[5] == 0 || req[5] == '\t')) ||
           (!strncmp(req, "trace", 5) && (req[5] == 0 || req[5] == '\t'));
}

void rg_ctl_write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

void rg_ctl_reply_error(int fd, const char *msg)
{
    char line[1200];
    int k = snprintf(line, sizeof line, "error: %.1100s\n", msg);
    rg_ctl_write_all(fd, line, (size_t)k);
}

/* flows \t LAYER \t FILTER \t LIMIT (each may be empty) */
static void flows_request(rg_live *l, char **f, unsigned n, int fd)
{
    char err[512];
    uint64_t limit = UINT64_MAX;
    if (n != 4) {
        rg_ctl_reply_error(fd, "flows takes LAYER, FILTER and LIMIT (each may be empty)");
        return;
    }
    if (f[3][0] && parse_u64(f[3], 1, UINT64_MAX, &limit)) {
        rg_ctl_reply_error(fd, "--limit: a number of flows, 1 or more");
        return;
    }
    if (f[1][0]) { /* a layer of the stack with instances */
        unsigned i = 0;
        while (i < l->stack->nlayers &&
               (strcmp(l->stack->layers[i].name, f[1]) || !l->stack->layers[i].has_instance))
            i++;
        if (i == l->stack->nlayers) {
            char names[512] = "";
            size_t k = 0;
            for (unsigned j = 0; j < l->stack->nlayers && k < sizeof names; j++)
                if (l->stack->layers[j].has_instance)
                    k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "",
                                          l->stack->layers[j].name);
            snprintf(err, sizeof err, "--layer %.100s: no such layer with instances (%.300s)", f[1],
                     names);
            rg_ctl_reply_error(fd, err);
            return;
        }
    }
    rg_flowfilter *filter = NULL;
    if (f[2][0] && !(filter = rg_flowfilter_parse(f[2], err, sizeof err))) {
        char msg[640];
        snprintf(msg, sizeof msg, "--filter: %s", err);
        rg_ctl_reply_error(fd, msg);
        return;
    }
    if (!l->views[0].ft) {
        rg_flowfilter_free(filter);
        rg_ctl_reply_error(fd, "this run does not track its flow table");
        return;
    }
    pthread_mutex_lock(&l->ask_mu);
    l->layer = f[1][0] ? f[1] : NULL;
    l->filter = filter;
    l->limit = limit;
    for (unsigned w = 0; w < l->nw; w++)
        l->bufs[w].n = 0;
    int rc = ask(l, REQ_FLOWS, err, sizeof err);
    if (rc) {
        rg_ctl_reply_error(fd, err);
    } else {
        rg_ctl_write_all(fd, "ok\n", 3);
        /* the limit over all workers: each kept its first ones, in uid order */
        uint64_t left = limit;
        for (unsigned w = 0; w < l->nw && left; w++) {
            const char *s = l->bufs[w].s, *end = s + l->bufs[w].n;
            while (s && s < end && left) {
                const char *nl = memchr(s, '\n', (size_t)(end - s));
                if (!nl) break;
                rg_ctl_write_all(fd, s, (size_t)(nl + 1 - s));
                s = nl + 1;
                left--;
            }
        }
    }
    l->filter = NULL;
    pthread_mutex_unlock(&l->ask_mu);
    rg_flowfilter_free(filter);
}

void rg_live_control(rg_live *l, const char *req, size_t n, int fd)
{
    char copy[8192];
    char *f[8];
    unsigned nf = 0;
    if (!l) {
        rg_ctl_reply_error(fd, "no live counters in this run");
        return;
    }
    if (n >= sizeof copy) n = sizeof copy - 1;
    memcpy(copy, req, n);
    copy[n] = 0;
    for (char *p = copy;; nf++) {
        if (nf == sizeof f / sizeof f[0]) {
            rg_ctl_reply_error(fd, "too many fields");
            return;
        }
        f[nf] = p;
        char *tab = strchr(p, '\t');
        if (!tab) {
            nf++;
            break;
        }
        *tab = 0;
        p = tab + 1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)copy[i] < 0x20 && copy[i] != 0) {
            rg_ctl_reply_error(fd, "a control byte in the request");
            return;
        }
    if (!strcmp(f[0], "trace")) { /* rg_trace_ctl.c: waits for the packets, not the workers */
        unsigned count, ms;
        char err[256];
        if (rg_trace_args(f, nf, &count, &ms, err, sizeof err))
            rg_ctl_reply_error(fd, err);
        else
            rg_trace_request(l->stack, count, ms, fd);
        return;
    }
    if (!strcmp(f[0], "flows")) {
        flows_request(l, f, nf, fd);
        return;
    }
    /* stats [\t json|prometheus] */
    const char *format = nf > 1 ? f[1] : "json";
    int prom = !strcmp(format, "prometheus");
    if (nf > 2 || (!prom && strcmp(format, "json"))) {
        rg_ctl_reply_error(fd, "stats takes a format: json or prometheus");
        return;
    }
    char err[512];
    rg_sbuf b = {0};
    if (fresh(l, prom ? prometheus : stats_json, &b, err, sizeof err)) {
        rg_ctl_reply_error(fd, err);
    } else {
        rg_ctl_write_all(fd, "ok\n", 3);
        rg_ctl_write_all(fd, b.s, b.n);
    }
    free(b.s);
}

/* ---- --stats-interval and --stats-fd ---- */

static void emit(rg_live *l, const char *s, size_t n)
{
    if (l->jsonl) rg_out_write(l->jsonl, s, n); /* one line in one write: whole lines */
    if (cfg.fd >= 0) rg_ctl_write_all(cfg.fd, s, n);
}

static int is_final(rg_live *l)
{
    pthread_mutex_lock(&l->mu);
    const int f = l->final;
    pthread_mutex_unlock(&l->mu);
    return f;
}

static void *stats_main(void *arg)
{
    rg_live *l = arg;
    struct timespec next;
    clock_gettime(CLOCK_REALTIME, &next);
    for (;;) {
        uint64_t ns = (uint64_t)next.tv_nsec + cfg.interval_ms % 1000 * 1000000;
        next.tv_sec += (time_t)(cfg.interval_ms / 1000 + ns / 1000000000);
        next.tv_nsec = (long)(ns % 1000000000);
        pthread_mutex_lock(&l->stop_mu);
        int rc = 0;
        while (!atomic_load(&l->stop) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&l->stop_cv, &l->stop_mu, &next);
        pthread_mutex_unlock(&l->stop_mu);
        if (atomic_load(&l->stop)) return NULL;
        char err[512];
        rg_sbuf b = {0};
        /* a snapshot taken after the run ended says "final": rg_live_final writes that line,
         * once, after this thread has stopped */
        if (!fresh(l, stats_json, &b, err, sizeof err) && !is_final(l)) emit(l, b.s, b.n);
        free(b.s); /* a worker that did not answer (waiting for input): no line this time */
    }
}

int rg_live_start(rg_live *l, char *err, size_t errlen)
{
    if (cfg.file) { /* OUT/stats.jsonl */
        char path[4096];
        if (rg_mkdirs(l->o->out, err, errlen)) return -1;
        snprintf(path, sizeof path, "%s/stats.jsonl", l->o->out);
        char why[512];
        l->jsonl = rg_out_open(path, 0, RG_OUT_APPEND, why, sizeof why);
        if (!l->jsonl) {
            snprintf(err, errlen, "--stats-interval: %s", why);
            return -1;
        }
    }
    if (cfg.fd >= 0 && !cfg.interval_ms) cfg.interval_ms = 500;
    if (cfg.interval_ms) {
        if (pthread_create(&l->th, NULL, stats_main, l)) {
            snprintf(err, errlen, "cannot start the stats thread");
            return -1;
        }
        l->th_ok = 1;
    }
    if (cfg.metrics && !(l->metrics = rg_metrics_open(l, cfg.metrics, err, errlen))) return -1;
    return 0;
}

static void stop_threads(rg_live *l)
{
    pthread_mutex_lock(&l->stop_mu);
    atomic_store(&l->stop, 1);
    pthread_cond_signal(&l->stop_cv);
    pthread_mutex_unlock(&l->stop_mu);
    if (l->th_ok) pthread_join(l->th, NULL);
    l->th_ok = 0;
    rg_metrics_close(l->metrics);
    l->metrics = NULL;
}

void rg_live_final(rg_live *l)
{
    if (!l) return;
    /* a request in flight stops waiting for the workers and reads their counters here */
    pthread_mutex_lock(&l->mu);
    l->final = 1;
    l->folded = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    stop_threads(l);
    if (cfg.file || cfg.fd >= 0) { /* the line that equals the summary */
        char err[256];
        rg_sbuf b = {0};
        if (!fresh(l, stats_json, &b, err, sizeof err)) emit(l, b.s, b.n);
        free(b.s);
    }
}

void rg_live_free(rg_live *l)
{
    if (!l) return;
    stop_threads(l);
    if (current == l) current = NULL;
    if (l->jsonl) {
        char why[512];
        if (rg_out_close(l->jsonl, why, sizeof why)) fprintf(stderr, "rg: %s\n", why);
    }
    for (unsigned w = 0; w < l->nw; w++) {
        free(l->snaps[w].layer);
        free(l->bufs[w].s);
    }
    pthread_mutex_destroy(&l->ask_mu);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->stop_mu);
    pthread_cond_destroy(&l->stop_cv);
    free(l->views);
    free(l->snaps);
    free(l->seen);
    free(l->bufs);
    free(l);
}
