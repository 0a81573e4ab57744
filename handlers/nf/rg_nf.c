/* rg_nf.c - NF creation and helpers shared by the stock NFs (see rg_nf.h). */
#define _GNU_SOURCE /* fopencookie */
#include "rg_nf_int.h"

#include "rg/rg_community_id.h"
#include "rg/rg_nf_api.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <errno.h>
#include <stdio_ext.h> /* __fpending */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static _Thread_local const rg_nf_host *cur_host; /* rg_nf_use_host */
/* the line outputs rg_nf_open_out opened for the NF being made on this thread */
static _Thread_local FILE *made_lines[RG_NF_LINES_MAX];
static _Thread_local unsigned nmade;

void rg_nf_use_host(const rg_nf_host *host)
{
    cur_host = host;
    nmade = 0;
}

/* An NF made by one of the constructors (rg_nf_int.h), as the observer its ABI init returns:
 * it takes the line outputs its constructor opened. */
static rg_obs *make(rg_nf *nf, const char *name, const rg_stack_desc *stack)
{
    unsigned k = nmade;
    nmade = 0;
    if (!nf) return NULL;
    nf->nlines = k;
    for (unsigned i = 0; i < k; i++)
        nf->lines[i] = made_lines[i];
    nf->name = name;
    nf->stack = stack;
    nf->obs.self = nf;
    return &nf->obs;
}

/* ---- the stock NFs as NFs of the ABI (rg_nf_api.h) ----
 * Each subscribes to every handler and built-in event of every layer and
 * forwards them to its observer callbacks: the chain calls them in the order
 * the stack raised the events, as an attached observer would see them.
 * Configuration: "out" (the output directory), "all" (flowstats: "1" or
 * "true" = --flowstats-all). */

/* The records a callback wrote, out now (whole: each callback writes whole lines). */
static void flush_lines(const rg_obs *o)
{
    const rg_nf *nf = (const rg_nf *)o; /* obs is the first member */
    for (unsigned i = 0; i < nf->nlines; i++)
        if (__fpending(nf->lines[i])) fflush(nf->lines[i]);
}

static int fwd_call(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_call) o->on_call(o->self, ev->call);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_open(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_open) o->on_open(o->self, ev->flow, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_packet(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_packet) o->on_packet(o->self, ev->flow, ev->dir, ev->len, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_close(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_close) o->on_close(o->self, ev->flow, ev->reason, ev->complete, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_gap(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_gap) o->on_gap(o->self, ev->flow, ev->dir, ev->seq, ev->len, ev->at, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_clock_jump(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_clock_jump) o->on_clock_jump(o->self, ev->pkt_no, ev->pkt_ts_ns, ev->ts_ns, ev->fwd);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_memcap(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_memcap) o->on_memcap(o->self, ev->flow, ev->layer, ev->reason, ev->asked, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

static int fwd_overlap(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    const rg_obs *o = self;
    if (o->on_overlap)
        o->on_overlap(o->self, ev->flow, ev->dir, ev->seq, ev->len, ev->new_bytes, ev->old_len,
                      ev->new_len, ev->reason, ev->ts_ns);
    flush_lines(o);
    return RG_PASS;
}

const rg_nf_sub rg_nf_stock_subs[RG_NF_STOCK_NSUBS] = {
    {"*", "*", fwd_call, 0},
    {"*", RG_NF_OPEN, fwd_open, 0},
    {"*", RG_NF_PACKET, fwd_packet, 0},
    {"*", RG_NF_CLOSE, fwd_close, 0},
    {"*", RG_NF_GAP, fwd_gap, 0},
    {NULL, RG_NF_CLOCK_JUMP, fwd_clock_jump, 0},
    {"*", RG_NF_MEMCAP, fwd_memcap, 0},
    {"*", RG_NF_OVERLAP, fwd_overlap, 0},
};

static int cfg_true(const char *v)
{
    return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"));
}

void *rg_nf_stock_init(rg_nf *(*ctor)(const rg_stack_desc *, const char *, char *, size_t),
                       const char *name, const rg_stack_desc *stack, const rg_nf_kv *cfg,
                       unsigned ncfg, const rg_nf_host *host, char *err, size_t errlen)
{
    rg_nf_use_host(host);
    rg_obs *o =
        make(ctor(stack, rg_nf_cfg_get(cfg, ncfg, "out", "rg-out"), err, errlen), name, stack);
    rg_nf_use_host(NULL);
    return o;
}

int rg_nf_stock_fini(void *self, char *err, size_t errlen)
{
    /* rg_nf_finish prints its reason on stderr */
    int rc = rg_nf_finish(self);
    if (rc) snprintf(err, errlen, "cannot write its output");
    return rc;
}

RG_STOCK_NF(streams, rg_nf_streams_new,
            "the payload of every flow direction: OUT/streams/, OUT/flows.jsonl");
RG_STOCK_NF(events, rg_nf_events_new, "every handler call and gap: OUT/events.jsonl");
RG_STOCK_NF(sni, rg_nf_sni_new, "TLS ClientHello server names: OUT/sni.jsonl, stdout");
RG_STOCK_NF(hostlog, rg_nf_hostlog_new,
            "TLS SNI and HTTP Host of every ClientHello/request: OUT/hostlog.jsonl");
RG_STOCK_NF(flowexport, rg_nf_flowexport_new,
            "IPFIX-like bidirectional flow records: OUT/flows.ipfix.jsonl");

/* flowstats takes "all" (--flowstats-all): also instances that lived within one packet */
static void *init_flowstats(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                            const rg_nf_host *host, char *err, size_t errlen)
{
    rg_obs *o =
        rg_nf_stock_init(rg_nf_flowstats_new, "flowstats", stack, cfg, ncfg, host, err, errlen);
    if (o) rg_nf_flowstats_all(o, cfg_true(rg_nf_cfg_get(cfg, ncfg, "all", NULL)));
    return o;
}
static const rg_nf_abi abi_flowstats = {RG_NF_ABI_VERSION,
                                        sizeof(rg_nf_abi),
                                        "flowstats",
                                        "one record per instance: OUT/flowstats.jsonl",
                                        rg_nf_stock_subs,
                                        RG_NF_STOCK_NSUBS,
                                        0,
                                        init_flowstats,
                                        rg_nf_stock_fini,
                                        NULL};
const rg_nf_desc rg_nf_desc_flowstats = {&abi_flowstats, "flowstats-all",
                                         "also instances that lived within one packet", "all"};

/* signatures takes a parameter, "rules": the rules file (else $RG_SIGNATURES) */
static void *init_signatures(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                             const rg_nf_host *host, char *err, size_t errlen)
{
    const char *out = rg_nf_cfg_get(cfg, ncfg, "out", "rg-out");
    const char *rules = rg_nf_cfg_get(cfg, ncfg, "rules", NULL);
    rg_nf_use_host(host);
    rg_obs *o = make(rg_nf_signatures_open(stack, out, rules, err, errlen), "signatures", stack);
    rg_nf_use_host(NULL);
    return o;
}
static const rg_nf_abi abi_signatures = {
    RG_NF_ABI_VERSION,
    sizeof(rg_nf_abi),
    "signatures",
    "Hyperscan rules on reassembled bytes (parameter rules or $RG_SIGNATURES)",
    rg_nf_stock_subs,
    RG_NF_STOCK_NSUBS,
    0,
    init_signatures,
    rg_nf_stock_fini,
    NULL};
const rg_nf_desc rg_nf_desc_signatures = {&abi_signatures, NULL, NULL, NULL};

/* The stock NFs, in --help order (rg_nf_registry.h): each defines rg_nf_desc_NAME (in its
 * own file or above, RG_STOCK_NF); a new one is one entry of RG_STOCK_NFS. */
#define RG_STOCK_NFS(X)                                                                            \
    X(streams)                                                                                     \
    X(events)                                                                                      \
    X(flowstats) X(sni) X(hostlog) X(flowexport) X(signatures) X(conv) X(eve) X(ipfix) X(apps)
#define RG_NF_DECLARE(n) extern const rg_nf_desc rg_nf_desc_##n;
#define RG_NF_ENTRY(n)   &rg_nf_desc_##n,
RG_STOCK_NFS(RG_NF_DECLARE)
const rg_nf_desc *const rg_nf_table[] = {RG_STOCK_NFS(RG_NF_ENTRY) NULL};

rg_obs *rg_nf_create(const char *name, const rg_stack_desc *stack, const char *outdir, char *err,
                     size_t errlen)
{
    const rg_nf_desc *d = rg_nf_find(rg_nf_table, name);
    const rg_nf_kv out = {"out", outdir};
    if (d) return d->abi->init(stack, &out, 1, NULL, err, errlen);
    snprintf(err, errlen, "unknown NF '%s'", name);
    return NULL;
}

int rg_nf_finish(rg_obs *obs)
{
    if (!obs) return RG_OK;
    rg_nf *nf = (rg_nf *)obs; /* obs is the first member */
    int rc = nf->finish(nf);
    if (nf->err[0]) {
        fprintf(stderr, "nf %s: %s\n", nf->name, nf->err);
        rc = RG_EIO;
    }
    free(nf);
    return rc;
}

void rg_nf_fail(rg_nf *nf, const char *what, const char *path)
{
    if (nf->err[0]) return; /* the first error is the informative one */
    snprintf(nf->err, sizeof nf->err, "%s%s%s: %s", what, path ? " " : "", path ? path : "",
             strerror(errno));
}

static char *join(const char *outdir, const char *name, char *err, size_t errlen)
{
    size_t n = strlen(outdir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path)
        snprintf(err, errlen, "out of memory");
    else
        snprintf(path, n, "%s/%s", outdir, name);
    return path;
}

FILE *rg_nf_open_file(const char *outdir, const char *name, char *err, size_t errlen)
{
    char *path = join(outdir, name, err, errlen);
    if (!path) return NULL;
    FILE *f = fopen(path, "w");
    if (!f) snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    free(path);
    return f;
}

/* A FILE whose whole lines go to the host's out_write: the NFs print their records with
 * stdio as before, into a full buffer (a line-buffered stream costs a call per character)
 * flushed when the NF's callback returns (flush_lines), so each record reaches the file once
 * written; a record longer than the buffer waits here until it is whole. */
typedef struct lineout {
    const rg_nf_host *host;
    void *out;
    char *pend; /* the start of a line not yet ended */
    size_t n, cap;
} lineout;

static int lo_keep(lineout *lo, const char *p, size_t n)
{
    if (lo->n + n > lo->cap) {
        size_t cap = 2 * (lo->n + n);
        char *q = realloc(lo->pend, cap);
        if (!q) return -1;
        lo->pend = q;
        lo->cap = cap;
    }
    memcpy(lo->pend + lo->n, p, n);
    lo->n += n;
    return 0;
}

static ssize_t lo_write(void *c, const char *buf, size_t size)
{
    lineout *lo = c;
    size_t end = size; /* just after the last newline, 0: none */
    while (end && buf[end - 1] != '\n')
        end--;
    if (end) {
        int rc;
        if (!lo->n) { /* the usual case: whole lines, straight from stdio's buffer */
            rc = lo->host->out_write(lo->out, buf, end);
        } else {
            if (lo_keep(lo, buf, end)) return -1;
            rc = lo->host->out_write(lo->out, lo->pend, lo->n);
            lo->n = 0;
        }
        if (rc) return -1;
    }
    if (end < size && lo_keep(lo, buf + end, size - end)) return -1;
    return (ssize_t)size;
}

static int lo_close(void *c)
{
    lineout *lo = c;
    char why[512];
    /* a last line without its newline: written whole all the same */
    int bad = lo->n && lo->host->out_write(lo->out, lo->pend, lo->n);
    bad |= lo->host->out_close(lo->out, why, sizeof why) != RG_OK;
    free(lo->pend);
    free(lo);
    return bad ? EOF : 0;
}

FILE *rg_nf_open_out(const char *outdir, const char *name, char *err, size_t errlen)
{
    const rg_nf_host *host = cur_host;
    if (!RG_NF_HAS_OUT(host)) return rg_nf_open_file(outdir, name, err, errlen);
    char *path = join(outdir, name, err, errlen);
    lineout *lo = path ? calloc(1, sizeof *lo) : NULL;
    if (!lo) {
        if (path) snprintf(err, errlen, "out of memory");
        free(path);
        return NULL;
    }
    lo->host = host;
    lo->out = host->out_open(host, path, err, errlen);
    free(path);
    FILE *f = NULL;
    if (lo->out) {
        f = fopencookie(lo, "w", (cookie_io_functions_t){NULL, lo_write, NULL, lo_close});
        if (!f) {
            snprintf(err, errlen, "out of memory");
            host->out_close(lo->out, NULL, 0);
        } else if (setvbuf(f, NULL, _IOFBF, 1u << 16) || nmade == RG_NF_LINES_MAX) {
            fclose(f);
            snprintf(err, errlen, "out of memory");
            return NULL;
        } else {
            made_lines[nmade++] = f; /* flushed after each of the NF's callbacks */
        }
    }
    if (!f) free(lo);
    return f;
}

void rg_nf_close_out(rg_nf *nf, FILE *f, const char *what)
{
    if (!f) return;
    int bad = ferror(f);
    if (fclose(f) || bad) rg_nf_fail(nf, "cannot write", what);
}

/* ---- endpoints ---- */

void rg_nf_addr_text(const uint8_t *p, size_t len, char *out, size_t n)
{
    out[0] = 0;
    /* copy first: the bytes need not be aligned for in_addr / in6_addr */
    if (len == 4) {
        struct in_addr a;
        memcpy(&a, p, 4);
        inet_ntop(AF_INET, &a, out, (socklen_t)n);
    } else if (len == 16) {
        struct in6_addr a;
        memcpy(&a, p, 16);
        inet_ntop(AF_INET6, &a, out, (socklen_t)n);
    }
}

static void addr_text(const rg_keypart *p, const uint8_t *key, char *out, size_t n)
{
    rg_nf_addr_text(key + p->off, p->size, out, n);
}

static uint16_t port_of(const rg_keypart *p, const uint8_t *key)
{
    return (uint16_t)(key[p->off] << 8 | key[p->off + 1]);
}

void rg_nf_endpoints_of(const rg_layer_desc *layer, const rg_flow_info *f, rg_nf_endpoints *ep)
{
    memset(ep, 0, sizeof *ep);
    if (!f->key_a || !f->key_p) return;
    const rg_keypart *addr[2] = {NULL, NULL}, *port[2] = {NULL, NULL};
    for (unsigned i = 0; i < layer->nparts; i++) {
        const rg_keypart *p = &layer->parts[i];
        if (p->common || (uint32_t)p->off + p->size > layer->key_len) continue;
        if (p->kind == RG_VAL_BYTES && (p->size == 4 || p->size == 16)) {
            if (!addr[0])
                addr[0] = p;
            else if (!addr[1])
                addr[1] = p;
        } else if (p->kind == RG_VAL_NUM && p->size == 2) {
            if (!port[0])
                port[0] = p;
            else if (!port[1])
                port[1] = p;
        }
    }
    /* dst: side p's copy of the part, or a unidirectional key's second address.
     * Ports are the numbers of a selector's sides: a unidirectional key has
     * no sides, so its numbers (an IPv4 id, a protocol) are no ports. */
    const uint8_t *dkey = layer->bidir ? f->key_p : f->key_a;
    const rg_keypart *daddr = layer->bidir ? addr[0] : addr[1];
    if (!layer->bidir) port[0] = NULL;
    const rg_keypart *dport = port[0];
    if (addr[0]) addr_text(addr[0], f->key_a, ep->src, sizeof ep->src);
    if (daddr) addr_text(daddr, dkey, ep->dst, sizeof ep->dst);
    if (port[0]) {
        ep->sport = port_of(port[0], f->key_a);
        ep->has_sport = 1;
    }
    if (dport) {
        ep->dport = port_of(dport, dkey);
        ep->has_dport = 1;
    }
    if (addr[0] && daddr && addr[0]->size == daddr->size) {
        ep->alen = (uint8_t)addr[0]->size;
        memcpy(ep->saddr, f->key_a + addr[0]->off, ep->alen);
        memcpy(ep->daddr, dkey + daddr->off, ep->alen);
    }
    if (addr[0] && daddr && addr[0]->size == daddr->size)
        rg_community_id_flow(ep->community_id, rg_community_id_seed, layer, f->key_a,
                             f->key_a + addr[0]->off, dkey + daddr->off, addr[0]->size,
                             ep->has_sport && ep->has_dport, ep->sport, ep->dport);
}

void rg_nf_endpoints_icmp(const rg_layer_desc *layer, rg_nf_endpoints *ep, uint8_t type,
                          uint8_t code)
{
    int proto = rg_ip_proto_of(layer->protocol);
    if (!ep->alen || (proto != RG_IPPROTO_ICMP && proto != RG_IPPROTO_ICMPV6)) return;
    rg_community_id_icmp(ep->community_id, rg_community_id_seed, ep->saddr, ep->daddr, ep->alen,
                         type, code);
}

/* ---- JSON ---- */

void rg_nf_endpoints_reverse(const rg_nf_endpoints *ep, rg_nf_endpoints *out)
{
    *out = *ep;
    memcpy(out->src, ep->dst, sizeof out->src);
    memcpy(out->dst, ep->src, sizeof out->dst);
    out->sport = ep->dport;
    out->dport = ep->sport;
    out->has_sport = ep->has_dport;
    out->has_dport = ep->has_sport;
}

void *rg_nf_flow_of(rg_nf *nf, rg_nf_map *m, const rg_flow_info *f, size_t size, size_t ep_off,
                    int *created)
{
    *created = 0;
    void *r = rg_nf_map_get(m, f->uid);
    if (r) return r;
    r = calloc(1, size);
    if (!r || rg_nf_map_put(m, f->uid, r)) {
        free(r);
        errno = ENOMEM;
        rg_nf_fail(nf, "cannot track flows", NULL);
        return NULL;
    }
    const rg_layer_desc *l = rg_nf_layer(nf->stack, f->layer);
    if (l) rg_nf_endpoints_of(l, f, (rg_nf_endpoints *)((uint8_t *)r + ep_off));
    *created = 1;
    return r;
}

void rg_nf_json_endpoints(FILE *out, const rg_nf_endpoints *ep)
{
    fputs(",\"src\":", out);
    rg_json_string(out, ep->src[0] ? ep->src : NULL);
    fputs(",\"dst\":", out);
    rg_json_string(out, ep->dst[0] ? ep->dst : NULL);
    if (ep->has_sport) fprintf(out, ",\"sport\":%u", (unsigned)ep->sport);
    if (ep->has_dport) fprintf(out, ",\"dport\":%u", (unsigned)ep->dport);
    fputs(",\"community_id\":", out);
    rg_json_string(out, ep->community_id[0] ? ep->community_id : NULL);
}

/* record field k's value of f as text: a name, else the number (into num) */
static const char *rec_text(const rg_recfield *k, uint64_t v, char *num, size_t n)
{
    if (v < k->nnames) return k->names[v];
    snprintf(num, n, "%" PRIu64, v);
    return NULL;
}

const char *rg_nf_reason(const rg_stack_desc *stack, const rg_flow_info *f, int reason)
{
    switch (reason) {
    case RG_CLOSE_EXPIRED:
        return "timeout";
    case RG_CLOSE_EVICTED:
        return "evicted";
    case RG_CLOSE_FLUSHED:
        return "flushed";
    default:
        break;
    }
    const rg_layer_desc *l = f ? rg_nf_layer(stack, f->layer) : NULL;
    for (uint16_t i = 0; l && i < l->nrec && i < RG_REC_MAX; i++) {
        char num[24];
        const char *t = strcmp(l->rec[i].name, "reason")
                            ? NULL
                            : rec_text(&l->rec[i], f->rec[i], num, sizeof num);
        if (t) return t;
    }
    return "accept";
}

void rg_nf_end_fields(char *buf, size_t n, const rg_stack_desc *stack, const rg_flow_info *f,
                      int reason)
{
    size_t at = 0;
    buf[0] = 0;
    if (!f) return;
#define RG_NF_PUT_(...)                                                                            \
    do {                                                                                           \
        int w_ = snprintf(buf + at, n - at, __VA_ARGS__);                                          \
        if (w_ < 0 || (size_t)w_ >= n - at) return;                                                \
        at += (size_t)w_;                                                                          \
    } while (0)
    RG_NF_PUT_(",\"reason\":\"%s\",\"late_packets\":%" PRIu32, rg_nf_reason(stack, f, reason),
               f->late);
    const rg_layer_desc *l = rg_nf_layer(stack, f->layer);
    for (uint16_t i = 0; l && i < l->nrec && i < RG_REC_MAX; i++) {
        const rg_recfield *k = &l->rec[i];
        if (!strcmp(k->name, "reason")) continue;
        char num[24];
        const char *t = rec_text(k, f->rec[i], num, sizeof num);
        if (k->letters) { /* 4-bit letter codes, the first in the low bits */
            const size_t nl = strlen(k->letters);
            size_t j = 0;
            for (uint64_t v = f->rec[i]; (v & 15u) && j + 1 < sizeof num; v >>= 4)
                if ((v & 15u) <= nl) num[j++] = k->letters[(v & 15u) - 1];
            num[j] = 0;
            t = num;
        }
        if (t)
            RG_NF_PUT_(",\"%s\":\"%s\"", k->name, t); /* spec identifiers: no escaping */
        else
            RG_NF_PUT_(",\"%s\":%s", k->name, num);
    }
#undef RG_NF_PUT_
}
