/* rg_driver.c - the capture driver: the main of every generated stack binary
 * (rg_main, see rg_api.h).
 *
 * Reads a capture, picks the stack's entry layer from the link type, feeds
 * every frame to the stack with an NF attached (handlers/nf), drives idle
 * expiry on packet time, flushes at the end so the NF sees every instance
 * close, and prints a summary.  --bench times the processing loop on a
 * capture loaded into memory instead. */
#include "rg/rg_api.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_pcap.h"
#include "rg/rg_seq.h"
#include "rg_nf.h"

#define NS_PER_S UINT64_C(1000000000)

enum { EXIT_USAGE = 2, DEFAULT_PASSES = 3 };
#define RG_DRIVER_MAX_LAYERS 256

typedef struct opts {
    const char *prog;
    const char *capture;
    const char *nf;
    const char *out;
    uint64_t cap;
    uint32_t layer_cap[RG_DRIVER_MAX_LAYERS]; /* --cap LAYER=N, by layer index; 0 = cap */
    uint64_t seed;
    uint64_t passes;
    int passes_set;
    int no_timeouts;
    int flowstats_all;
    int json;
    int stats;
    int bench;
} opts;

static void usage(FILE *out, const char *prog, const rg_stack_desc *stack)
{
    fprintf(out,
            "usage: %s CAPTURE [options]\n"
            "Run the %s stack on a pcap or pcapng capture (CAPTURE '-' = stdin).\n"
            "  --nf NAME        streams|events|flowstats|count|none|sni (default count)\n"
            "  --out DIR        output directory of streams/events/flowstats (default rg-out)\n"
            "  --flowstats-all  flowstats: also instances that lived within one packet\n"
            "  --cap N          live instances per layer (default 262144; the least\n"
            "                   recently used is evicted when a layer is full)\n"
            "  --cap LAYER=N    the same for one layer (repeatable)\n"
            "  --seed N         hash seed (default random)\n"
            "  --no-timeouts    never expire idle instances\n"
            "  --summary FMT    summary on stdout: text or json (default text)\n"
            "  --stats          runtime counters on stderr\n"
            "  --bench          time the processing of the capture loaded in memory; one JSON\n"
            "                   line on stdout (--nf count or none)\n"
            "  --passes N       passes of --bench (default %d; the best one counts)\n"
            "  --help           this text\n",
            prog, stack->name, DEFAULT_PASSES);
}

/* Decimal number in [min, max]. */
static int parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9') return -1; /* strtoull would accept "-1" and spaces */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* 0: run; 1: --help printed; EXIT_USAGE: bad usage (message printed). */
static int parse_opts(int argc, char **argv, const rg_stack_desc *stack, opts *o)
{
    enum {
        O_NF = 256,
        O_OUT,
        O_CAP,
        O_SEED,
        O_NOTO,
        O_SUMMARY,
        O_STATS,
        O_BENCH,
        O_PASSES,
        O_FSALL
    };
    static const struct option longopts[] = {
        {"nf", required_argument, NULL, O_NF},
        {"out", required_argument, NULL, O_OUT},
        {"cap", required_argument, NULL, O_CAP},
        {"seed", required_argument, NULL, O_SEED},
        {"no-timeouts", no_argument, NULL, O_NOTO},
        {"flowstats-all", no_argument, NULL, O_FSALL},
        {"summary", required_argument, NULL, O_SUMMARY},
        {"stats", no_argument, NULL, O_STATS},
        {"bench", no_argument, NULL, O_BENCH},
        {"passes", required_argument, NULL, O_PASSES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const char *const nfs[] = {"streams", "events", "flowstats", "count", "none", "sni"};
    memset(o, 0, sizeof *o);
    o->prog = argc > 0 && argv[0] ? argv[0] : "rg";
    o->nf = "count";
    o->out = "rg-out";
    o->passes = DEFAULT_PASSES;
    optind = 0; /* full reset: rg_main may run more than once in a process */
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case 'h':
            usage(stdout, o->prog, stack);
            return 1;
        case O_NF: {
            size_t i = 0;
            while (i < sizeof nfs / sizeof nfs[0] && strcmp(optarg, nfs[i]))
                i++;
            if (i == sizeof nfs / sizeof nfs[0]) bad = "--nf";
            o->nf = optarg;
            break;
        }
        case O_OUT:
            o->out = optarg;
            break;
        case O_CAP: {
            /* N for every layer, or LAYER=N for one */
            const char *eq = strchr(optarg, '=');
            uint64_t v;
            if (!eq) {
                if (parse_num(optarg, 1, UINT32_MAX, &o->cap)) bad = "--cap";
                break;
            }
            unsigned i = 0;
            while (i < stack->nlayers && i < RG_DRIVER_MAX_LAYERS &&
                   (strlen(stack->layers[i].name) != (size_t)(eq - optarg) ||
                    strncmp(stack->layers[i].name, optarg, (size_t)(eq - optarg))))
                i++;
            if (i == stack->nlayers || i == RG_DRIVER_MAX_LAYERS ||
                parse_num(eq + 1, 1, UINT32_MAX, &v))
                bad = "--cap";
            else
                o->layer_cap[i] = (uint32_t)v;
            break;
        }
        case O_SEED:
            if (parse_num(optarg, 0, UINT64_MAX, &o->seed)) bad = "--seed";
            break;
        case O_NOTO:
            o->no_timeouts = 1;
            break;
        case O_FSALL:
            o->flowstats_all = 1;
            break;
        case O_SUMMARY:
            if (!strcmp(optarg, "json"))
                o->json = 1;
            else if (strcmp(optarg, "text"))
                bad = "--summary";
            break;
        case O_STATS:
            o->stats = 1;
            break;
        case O_BENCH:
            o->bench = 1;
            break;
        case O_PASSES:
            if (parse_num(optarg, 1, 1000000, &o->passes)) bad = "--passes";
            o->passes_set = 1;
            break;
        default: /* getopt_long printed the reason */
            fprintf(stderr, "Try '%s --help'.\n", o->prog);
            return EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "%s: invalid value '%s' for %s (see --help)\n", o->prog, optarg, bad);
            return EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "%s: expected one CAPTURE argument (see --help)\n", o->prog);
        return EXIT_USAGE;
    }
    o->capture = argv[optind];
    if (o->passes_set && !o->bench) {
        fprintf(stderr, "%s: --passes needs --bench\n", o->prog);
        return EXIT_USAGE;
    }
    if (o->bench && strcmp(o->nf, "count") && strcmp(o->nf, "none")) {
        fprintf(stderr, "%s: --bench runs with --nf count or none, not %s\n", o->prog, o->nf);
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- entry layer per frame ---- */

typedef struct entry_map {
    int fixed;      /* entry layer of every frame, or -1: by IP version (raw IP) */
    int16_t v4, v6; /* raw IP: the entry layers (-1 = none) */
    rg_linkinfo li;
    int kind; /* the link kind of a fixed-kind link type, -1 for raw IP */
} entry_map;

/* RG_OK, or an error with the message printed (o NULL: not printed). */
static int entry_map_init(entry_map *m, const rg_stack_desc *stack, const rg_linkinfo *li,
                          const opts *o)
{
    int kind = -1;
    m->li = *li;
    m->fixed = -1;
    m->v4 = m->v6 = -1;
    switch (li->dlt) {
    case DLT_EN10MB:
        kind = RG_LINK_ETHERNET;
        break;
    case DLT_NULL:
    case DLT_LOOP:
        kind = RG_LINK_NULL;
        break;
    case DLT_LINUX_SLL:
        kind = RG_LINK_SLL;
        break;
    case DLT_LINUX_SLL2:
        kind = RG_LINK_SLL2;
        break;
    default:
        /* raw IP link types: IPv4 or IPv6 at offset 0, decided per frame */
        if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV4)
            m->v4 = stack->entry[RG_LINK_RAW_IPV4];
        if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV6)
            m->v6 = stack->entry[RG_LINK_RAW_IPV6];
        if (li->entry == RG_ENTRY_UNKNOWN) {
            if (o)
                fprintf(stderr, "%s: %s: link type %d is not supported\n", o->prog, o->capture,
                        li->dlt);
            return RG_EUNSUPPORTED;
        }
    }
    if (kind >= 0) m->fixed = stack->entry[kind];
    m->kind = kind;
    /* no entry for this link type: every frame is skipped, counted and reported
     * (skipped_linktype), so that an empty output never goes unexplained */
    return RG_OK;
}

/* The entry maps of the link types a capture has (pcapng: one per interface
 * link type; the first is the capture's).  A link type the runtime cannot
 * locate IP in gets a map that takes no frame (they count as skipped). */
enum { RG_MAX_LINKS = 16 };
typedef struct link_maps {
    entry_map m[RG_MAX_LINKS];
    unsigned n;
    const rg_stack_desc *stack;
    const opts *o;
} link_maps;

static const entry_map *link_map(link_maps *lm, int dlt)
{
    for (unsigned i = 0; i < lm->n; i++)
        if (lm->m[i].li.dlt == dlt) return &lm->m[i];
    if (lm->n == RG_MAX_LINKS) return NULL;
    entry_map *m = &lm->m[lm->n++];
    rg_linkinfo li;
    (void)rg_link_info(dlt, &li);
    if (entry_map_init(m, lm->stack, &li, NULL)) {
        m->fixed = -1; /* no layer takes these frames */
        m->v4 = m->v6 = -1;
        m->kind = -1;
        fprintf(stderr, "%s: %s: frames of link type %s (%d) skipped: not supported\n",
                lm->o->prog, lm->o->capture, li.name, dlt);
    }
    return m;
}

/* ---- frames the stack has no entry for (skipped_linktype) ---- */

static const char *const link_kind_names[RG_LINK_KINDS] = {
    [RG_LINK_ETHERNET] = "ethernet", [RG_LINK_NULL] = "null", [RG_LINK_RAW_IPV4] = "raw_ipv4",
    [RG_LINK_RAW_IPV6] = "raw_ipv6", [RG_LINK_SLL] = "sll",   [RG_LINK_SLL2] = "sll2",
};

/* 1 if a frame entry_pick refused was refused because the stack has no entry
 * for its link type (or, on a raw IP link, for its IP version). */
static int skipped_for_linktype(const entry_map *m, const rg_frame *f, const char **what)
{
    if (m->kind >= 0) {
        *what = "";
        return 1; /* entry_pick refuses a fixed-kind frame only for want of an entry */
    }
    rg_netpos np;
    if (rg_link_locate(&m->li, f->data, f->caplen, &np)) return 0;
    *what = np.proto == RG_ENTRY_IPV4 ? ", IPv4 packets" : ", IPv6 packets";
    return (np.proto == RG_ENTRY_IPV4 && m->v4 < 0) || (np.proto == RG_ENTRY_IPV6 && m->v6 < 0);
}

/* The link kinds the stack has an entry for, comma-separated, into buf. */
static const char *stack_entries(const rg_stack_desc *stack, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < RG_LINK_KINDS && n < len; k++)
        if (stack->entry[k] >= 0)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", link_kind_names[k]);
    return buf[0] ? buf : "none";
}

static const char *link_type_name(const rg_linkinfo *li)
{
    const char *name = pcap_datalink_val_to_name(li->dlt);
    return name ? name : li->name;
}

/* The entry layer and the offset of its input in f; 0 if the frame cannot be
 * given to the stack (link header cut, no entry for its network protocol). */
static inline int entry_pick(const entry_map *m, const rg_frame *f, unsigned *layer, uint32_t *off)
{
    if (!m) return 0;
    if (m->fixed >= 0) {
        *layer = (unsigned)m->fixed;
        *off = 0;
        return 1;
    }
    rg_netpos np;
    if (rg_link_locate(&m->li, f->data, f->caplen, &np)) return 0;
    int e = np.proto == RG_ENTRY_IPV4 ? m->v4 : np.proto == RG_ENTRY_IPV6 ? m->v6 : -1;
    if (e < 0 || np.off > f->caplen) return 0;
    *layer = (unsigned)e;
    *off = np.off;
    return 1;
}

/* ---- observer: the count NF around the chosen NF ---- */

typedef struct obs_chain {
    const rg_obs *a, *b;
} obs_chain;

static void chain_call(void *self, const rg_call *c)
{
    const obs_chain *ch = self;
    ch->a->on_call(ch->a->self, c);
    if (ch->b->on_call) ch->b->on_call(ch->b->self, c);
}

static void chain_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a->on_open(ch->a->self, f, ts_ns);
    if (ch->b->on_open) ch->b->on_open(ch->b->self, f, ts_ns);
}

static void chain_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->b->on_packet(ch->b->self, f, dir, len, ts_ns); /* the count NF has none */
}

static void chain_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a->on_close(ch->a->self, f, reason, complete, ts_ns);
    if (ch->b->on_close) ch->b->on_close(ch->b->self, f, reason, complete, ts_ns);
}

static void chain_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                      uint32_t at, uint64_t ts_ns)
{
    const obs_chain *ch = self;
    ch->a->on_gap(ch->a->self, f, dir, seq, len, at, ts_ns);
    if (ch->b->on_gap) ch->b->on_gap(ch->b->self, f, dir, seq, len, at, ts_ns);
}

/* The observer for the stack: the count NF alone (--nf count), only its
 * instance callbacks (--nf none: no per-call cost, calls are not counted),
 * or the count NF chained before nf. */
static rg_obs make_observer(const rg_obs *counter, const rg_obs *nf, const char *name,
                            obs_chain *ch)
{
    rg_obs obs = *counter;
    if (!strcmp(name, "none")) {
        obs.on_call = NULL;
    } else if (nf) {
        ch->a = counter;
        ch->b = nf;
        obs.self = ch;
        obs.on_call = chain_call;
        obs.on_open = chain_open;
        obs.on_packet = nf->on_packet ? chain_packet : NULL;
        obs.on_close = chain_close;
        obs.on_gap = chain_gap;
    }
    return obs;
}

/* ---- processing ---- */

typedef struct feeder {
    const rg_stack_desc *stack;
    const entry_map *em; /* of the capture's link type */
    link_maps *lm;       /* of other link types (pcapng interfaces) */
    void *ctx;
    uint64_t next_expire; /* packet time of the next expire call */
    int expire_on;        /* a first packet has set the clock */
    uint64_t pkts, bytes, skipped;
    uint64_t skipped_linktype; /* of skipped: no entry for the link type (or IP version) */
    const char *linktype_what;  /* ", IPv6 packets" on a raw IP link, else "" */
    const char *prog, *capture; /* for the warning at the first such frame */
    rg_nf_counts *nc; /* the count NF's counters: uid_mark is set per packet */
} feeder;

static void feeder_init(feeder *fd, const rg_stack_desc *stack, link_maps *lm, void *ctx,
                        int no_timeouts, const rg_obs *counter)
{
    memset(fd, 0, sizeof *fd);
    fd->linktype_what = "";
    /* the count NF owns its counters; the driver writes only uid_mark */
    fd->nc = (rg_nf_counts *)rg_nf_counts_of(counter);
    fd->stack = stack;
    fd->em = &lm->m[0];
    fd->lm = lm;
    fd->ctx = ctx;
    fd->next_expire = no_timeouts ? UINT64_MAX : 0;
}

/* A frame no entry layer takes: counted, and the first one for want of an
 * entry for its link type is warned about.  Out of line: it keeps feed small
 * enough to inline into the capture loops. */
#if defined(__GNUC__)
__attribute__((noinline, cold))
#endif
static void feed_skipped(feeder *fd, const entry_map *em, const rg_frame *f)
{
    fd->skipped++;
    const char *what;
    if (em && skipped_for_linktype(em, f, &what) && !fd->skipped_linktype++ && fd->prog) {
        char entries[128];
        fd->linktype_what = what;
        fprintf(stderr,
                "%s: warning: %s: packet %" PRIu64 ": the stack %s has no entry for link "
                "type %s%s (its entries: %s): such packets are skipped (skipped_linktype)\n",
                fd->prog, fd->capture, fd->pkts, fd->stack->name, link_type_name(&em->li), what,
                stack_entries(fd->stack, entries, sizeof entries));
    }
}

RG_INLINE void feed(feeder *fd, const rg_frame *f)
{
    fd->pkts++;
    fd->bytes += f->caplen;
    fd->nc->uid_mark = fd->nc->uid_max; /* instances opened from now on are this packet's */
    /* idle expiry on packet time, once per second of it: no clock reads */
    if (RG_UNLIKELY(f->ts_ns >= fd->next_expire)) {
        if (fd->expire_on) fd->stack->expire(fd->ctx, f->ts_ns);
        fd->expire_on = 1;
        fd->next_expire = f->ts_ns + NS_PER_S;
    }
    unsigned layer;
    uint32_t off;
    const entry_map *em = RG_LIKELY(f->dlt == fd->em->li.dlt) ? fd->em : link_map(fd->lm, f->dlt);
    if (RG_UNLIKELY(!entry_pick(em, f, &layer, &off))) {
        feed_skipped(fd, em, f);
        return;
    }
    /* the result needs no action here: the stack counts its own errors */
    (void)fd->stack->process(fd->ctx, layer, f->data + off, f->caplen - off, f->ts_ns);
}

static uint64_t stack_errors(const rg_stack_desc *stack, const void *ctx)
{
    const rg_stats *s = stack->stats ? stack->stats(ctx) : NULL;
    return s ? rg_stats_total_errors(s) : 0;
}

typedef struct summary {
    const char *link;
    uint64_t pkts, bytes, opened, closed, live, calls, payload, errors, skipped;
    uint64_t gaps, gap_bytes; /* gap recovery: holes skipped, bytes in them */
    const rg_nf_counts *n;    /* per-layer counts (after the flush) */
    const uint64_t *live_per; /* per layer: live before the final flush */
    const rg_stats *st;       /* NULL without stats: no state bytes */
    uint64_t skipped_linktype;
    const char *linktype_what;
    const rg_linkinfo *li;
} summary;

/* ---- per-layer instance counts (summary and --bench) ---- */

static const char *const close_names[] = {
#define RG_CLOSE_NAME_(name, value, text) [value] = text,
    RG_CLOSE_REASONS(RG_CLOSE_NAME_)
#undef RG_CLOSE_NAME_
};

static uint64_t total_flows(const rg_stack_desc *stack, const rg_nf_counts *n)
{
    uint64_t flows = 0;
    for (unsigned i = 0; i < stack->nlayers; i++)
        if (stack->layers[i].has_instance) flows += rg_nf_flows(&n->layer[i]);
    return flows;
}

/* Closes before the flush: the flush closes exactly the instances live then. */
static void live_before_flush(const rg_stack_desc *stack, rg_nf_counts *n, uint64_t *live)
{
    n->uid_mark = n->uid_max; /* the flush closes nothing during a packet */
    for (unsigned i = 0; i < stack->nlayers; i++) {
        const rg_nf_layer_counts *l = &n->layer[i];
        live[i] = l->opened - l->closed[0] - l->closed[1] - l->closed[2] - l->closed[3];
    }
}

static uint64_t state_bytes(const rg_stats *st, unsigned i)
{
    return st && i < st->nlayers ? st->layer[i].inst.record_bytes : 0;
}

/* "layers":{NAME:{...},...} for every layer with a selector. */
static void layers_json(const rg_stack_desc *stack, const rg_nf_counts *n, const uint64_t *live,
                        const rg_stats *st)
{
    fputs("\"layers\":{", stdout);
    int first = 1;
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const rg_nf_layer_counts *l = &n->layer[i];
        if (!first) fputc(',', stdout);
        first = 0;
        rg_nf_json_string(stdout, stack->layers[i].name);
        printf(":{\"opened\":%" PRIu64 ",\"closed\":{", l->opened);
        for (int r = 0; r < 4; r++)
            printf("%s\"%s\":%" PRIu64, r ? "," : "", close_names[r], l->closed[r]);
        printf("},\"live_at_end\":%" PRIu64 ",\"evicted\":%" PRIu64 ",\"one_packet\":%" PRIu64
               ",\"flows\":%" PRIu64 ",\"state_bytes\":%" PRIu64 "}",
               live[i], l->closed[RG_CLOSE_EVICTED], l->one_packet, rg_nf_flows(l),
               state_bytes(st, i));
    }
    fputc('}', stdout);
}

static void layers_text(const rg_stack_desc *stack, const rg_nf_counts *n, const uint64_t *live,
                        const rg_stats *st)
{
    printf("instances per layer (live_at_end: before the final flush; one_packet: closed in the "
           "packet that opened them, not flows; state_bytes: per instance)\n"
           "  %-14s %10s %10s %10s %10s %10s %12s %10s %10s %12s\n",
           "layer", "opened", "accept", "expired", "evicted", "flushed", "live_at_end",
           "one_packet", "flows", "state_bytes");
    for (unsigned i = 0; i < stack->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        const rg_nf_layer_counts *l = &n->layer[i];
        printf("  %-14s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
               " %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %12" PRIu64 "\n",
               stack->layers[i].name, l->opened, l->closed[RG_CLOSE_ACCEPT],
               l->closed[RG_CLOSE_EXPIRED], l->closed[RG_CLOSE_EVICTED],
               l->closed[RG_CLOSE_FLUSHED], live[i], l->one_packet, rg_nf_flows(l),
               state_bytes(st, i));
    }
}

static void print_summary(const opts *o, const rg_stack_desc *stack, const summary *s)
{
    char entries[128];
    if (o->json) {
        fputs("{\"stack\":", stdout);
        rg_nf_json_string(stdout, stack->name);
        fputs(",\"capture\":", stdout);
        rg_nf_json_string(stdout, o->capture);
        fputs(",\"link\":", stdout);
        rg_nf_json_string(stdout, s->link);
        fputs(",\"nf\":", stdout);
        rg_nf_json_string(stdout, o->nf);
        printf(",\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"flows\":%" PRIu64,
               s->pkts, s->bytes, total_flows(stack, s->n));
        printf(",\"flows_opened\":%" PRIu64
               ",\"flows_closed\":%" PRIu64 ",\"live_at_end\":%" PRIu64 ",\"calls\":%" PRIu64
               ",\"payload_bytes\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"skipped\":%" PRIu64 ",",
               s->opened, s->closed, s->live, s->calls, s->payload, s->errors, s->skipped);
        printf("\"gaps\":%" PRIu64 ",\"gap_bytes\":%" PRIu64 ",", s->gaps, s->gap_bytes);
        printf("\"skipped_linktype\":%" PRIu64 ",\"link_type\":", s->skipped_linktype);
        rg_nf_json_string(stdout, link_type_name(s->li));
        fputs(",\"entries\":[", stdout);
        for (int k = 0, n = 0; k < RG_LINK_KINDS; k++)
            if (stack->entry[k] >= 0) printf("%s\"%s\"", n++ ? "," : "", link_kind_names[k]);
        fputs("],", stdout);
        layers_json(stack, s->n, s->live_per, s->st);
        fputs("}\n", stdout);
        return;
    }
    printf("stack          %s\n"
           "capture        %s\n"
           "link           %s\n"
           "nf             %s\n"
           "packets        %" PRIu64 "\n"
           "bytes          %" PRIu64 "\n"
           "flows          %" PRIu64 "  (instances that outlived the packet that opened them: "
           "connections, conversations)\n"
           "flows_opened   %" PRIu64 "  (all instances, per-packet ones such as IP datagrams "
           "included)\n"
           "flows_closed   %" PRIu64 "\n"
           "live_at_end    %" PRIu64 "  (before the final flush)\n"
           "calls          %" PRIu64 "%s\n"
           "payload_bytes  %" PRIu64 "\n"
           "errors         %" PRIu64 "  (stack errors + frames skipped)\n"
           "skipped        %" PRIu64 "  (link header cut or no entry layer)\n"
           "skipped_linktype %" PRIu64 "  (of skipped: capture link type %s%s; the stack's "
           "entries: %s)\n"
           "gaps           %" PRIu64 "  (holes skipped: %" PRIu64 " bytes the capture lost)\n",
           stack->name, o->capture, s->link, o->nf, s->pkts, s->bytes, total_flows(stack, s->n),
           s->opened, s->closed,
           s->live, s->calls, strcmp(o->nf, "none") ? "" : "  (--nf none observes no calls)",
           s->payload, s->errors, s->skipped, s->skipped_linktype, link_type_name(s->li),
           s->linktype_what, stack_entries(stack, entries, sizeof entries), s->gaps, s->gap_bytes);
    layers_text(stack, s->n, s->live_per, s->st);
}

static int run_capture(const opts *o, const rg_stack_desc *stack)
{
    char err[512];
    rg_pcap *cap = rg_pcap_open(o->capture, err, sizeof err);
    if (!cap) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    link_maps lm = {.n = 1, .stack = stack, .o = o};
    if (entry_map_init(&lm.m[0], stack, rg_pcap_link(cap), o)) {
        rg_pcap_close(cap);
        return 1;
    }
    int wants_nf = strcmp(o->nf, "count") && strcmp(o->nf, "none");
    rg_obs *counter = rg_nf_create("count", stack, NULL, err, sizeof err);
    rg_obs *nf = counter && wants_nf ? rg_nf_create(o->nf, stack, o->out, err, sizeof err) : NULL;
    if (!counter || (wants_nf && !nf)) {
        fprintf(stderr, "%s: --nf %s: %s\n", o->prog, o->nf, err);
        rg_nf_finish(counter);
        rg_pcap_close(cap);
        return 1;
    }
    if (nf) rg_nf_flowstats_all(nf, o->flowstats_all);
    obs_chain ch;
    rg_obs obs = make_observer(counter, nf, o->nf, &ch);
    rg_ctx_cfg cfg = {(uint32_t)o->cap, o->seed, &obs, o->no_timeouts, o->layer_cap, 0};
    void *ctx = stack->ctx_new(&cfg);
    uint64_t *live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *live_per);
    if (!ctx || !live_per) {
        fprintf(stderr, "%s: cannot create the %s stack context (out of memory?)\n", o->prog,
                stack->name);
        if (ctx) stack->ctx_free(ctx);
        free(live_per);
        rg_nf_finish(nf);
        rg_nf_finish(counter);
        rg_pcap_close(cap);
        return 1;
    }

    feeder fd;
    feeder_init(&fd, stack, &lm, ctx, o->no_timeouts, counter);
    fd.prog = o->prog;
    fd.capture = o->capture;
    rg_frame f;
    int rc, status = 0;
    while ((rc = rg_pcap_next(cap, &f)) == 1)
        feed(&fd, &f);
    if (rc < 0) {
        /* keep what was read: flush and report it, but fail */
        fprintf(stderr, "%s: %s: %s\n", o->prog, o->capture, rg_pcap_error(cap));
        status = 1;
    }

    const rg_nf_counts *n = rg_nf_counts_of(counter);
    uint64_t live = n->opened - n->closed;
    live_before_flush(stack, fd.nc, live_per);
    stack->flush(ctx);
    if (nf && rg_nf_finish(nf)) status = 1;
    summary s = {.link = lm.m[0].li.name,
                 .pkts = fd.pkts,
                 .bytes = fd.bytes,
                 .opened = n->opened,
                 .closed = n->closed,
                 .live = live,
                 .calls = n->calls,
                 .payload = n->payload_bytes,
                 .errors = stack_errors(stack, ctx) + fd.skipped,
                 .skipped = fd.skipped,
                 .n = n,
                 .live_per = live_per,
                 .st = stack->stats ? stack->stats(ctx) : NULL,
                 .skipped_linktype = fd.skipped_linktype,
                 .linktype_what = fd.linktype_what,
                 .gaps = n->gaps,
                 .gap_bytes = n->gap_bytes,
                 .li = &lm.m[0].li};
    print_summary(o, stack, &s);
    fflush(stdout);
    if (o->stats && stack->stats) rg_stats_print(stack->stats(ctx), stderr);
    stack->ctx_free(ctx);
    free(live_per);
    rg_nf_finish(counter);
    rg_pcap_close(cap);
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
                        const rg_nf_counts *last, const uint64_t *live_per, size_t seq_peak)
{
    double pkts = cap->count ? (double)cap->count : 1.0;
    printf("{\"pkts\":%zu,\"passes\":%" PRIu64 ",\"cpu_ns_per_pkt\":%.2f,\"wall_ns_per_pkt\":%.2f"
           ",\"payload_bytes\":%" PRIu64 ",\"flows\":%" PRIu64 ",\"flows_opened\":%" PRIu64
           ",\"flows_closed\":%" PRIu64 ",\"calls\":%" PRIu64 ",\"state_bytes\":{",
           cap->count, o->passes, (double)best_cpu / pkts, (double)best_wall / pkts,
           last->payload_bytes, total_flows(stack, last), last->opened, last->closed, last->calls);
    const rg_stats *st = stack->stats ? stack->stats(ctx) : NULL;
    int first = 1;
    for (unsigned i = 0; st && i < stack->nlayers && i < st->nlayers; i++) {
        if (!stack->layers[i].has_instance) continue;
        if (!first) fputc(',', stdout);
        first = 0;
        rg_nf_json_string(stdout, stack->layers[i].name);
        printf(":%" PRIu64, st->layer[i].inst.record_bytes);
    }
    printf("},\"seq_heap_peak_bytes\":%zu,", seq_peak);
    layers_json(stack, last, live_per, st);
    fputs("}\n", stdout);
    fflush(stdout);
}

static int run_bench(const opts *o, const rg_stack_desc *stack)
{
    char err[512];
    rg_capture cap;
    if (rg_capture_load(o->capture, &cap, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->prog, err);
        return 1;
    }
    link_maps lm = {.n = 1, .stack = stack, .o = o};
    if (entry_map_init(&lm.m[0], stack, &cap.link, o)) {
        rg_capture_free(&cap);
        return 1;
    }
    uint64_t best_cpu = UINT64_MAX, best_wall = UINT64_MAX;
    uint64_t *live_per = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *live_per);
    if (!live_per) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        rg_capture_free(&cap);
        return 1;
    }
    for (uint64_t pass = 0; pass < o->passes; pass++) {
        rg_obs *counter = rg_nf_create("count", stack, NULL, err, sizeof err);
        if (!counter) {
            fprintf(stderr, "%s: %s\n", o->prog, err);
            free(live_per);
            rg_capture_free(&cap);
            return 1;
        }
        rg_obs obs = make_observer(counter, NULL, o->nf, NULL);
        rg_ctx_cfg cfg = {(uint32_t)o->cap, o->seed, &obs, o->no_timeouts, o->layer_cap, 0};
        void *ctx = stack->ctx_new(&cfg);
        if (!ctx) {
            fprintf(stderr, "%s: cannot create the %s stack context (out of memory?)\n", o->prog,
                    stack->name);
            rg_nf_finish(counter);
            free(live_per);
            rg_capture_free(&cap);
            return 1;
        }
        feeder fd;
        feeder_init(&fd, stack, &lm, ctx, o->no_timeouts, counter);
        fd.prog = pass ? NULL : o->prog; /* warn in the first pass only */
        fd.capture = o->capture;
        rg_seq_heap_reset_peak();
        uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID), w0 = now_ns(CLOCK_MONOTONIC);
        for (size_t i = 0; i < cap.count; i++)
            feed(&fd, &cap.frames[i]);
        uint64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID), w1 = now_ns(CLOCK_MONOTONIC);
        if (c1 - c0 < best_cpu) best_cpu = c1 - c0;
        if (w1 - w0 < best_wall) best_wall = w1 - w0;
        const rg_nf_counts *last = fd.nc;
        live_before_flush(stack, fd.nc, live_per);
        stack->flush(ctx);
        size_t seq_peak = rg_seq_heap_stats().peak; /* this pass's (the context is alive) */
        if (pass + 1 == o->passes)
            print_bench(o, stack, ctx, &cap, best_cpu, best_wall, last, live_per, seq_peak);
        if (o->stats && stack->stats && pass + 1 == o->passes)
            rg_stats_print(stack->stats(ctx), stderr);
        stack->ctx_free(ctx);
        rg_nf_finish(counter);
    }
    free(live_per);
    rg_capture_free(&cap);
    return 0;
}

int rg_main(int argc, char **argv, const rg_stack_desc *stack)
{
    opts o;
    int rc = parse_opts(argc, argv, stack, &o);
    if (rc) return rc == 1 ? 0 : rc;
    return o.bench ? run_bench(&o, stack) : run_capture(&o, stack);
}
