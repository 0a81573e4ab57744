/* rg_nf_streams.c - the "streams" NF: the payload delivered to handlers per
 * flow direction, in OUT/streams/<uid>-<dir>.bin, and one line per flow
 * direction of OUT/flows.jsonl at close (format in rg_nf.h).
 *
 * Memory stays bounded: bytes go straight to the files (stdio buffers
 * only), at most MAX_OPEN files are open (the least recently written one is
 * closed and later reopened to append), and a flow's state is freed when it
 * closes. */
#include "rg_nf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rg_sha256.h"

enum { MAX_OPEN = 256 };

typedef struct sdir {
    FILE *fp;                 /* open stream file or NULL */
    struct sdir *prev, *next; /* list of open files, most recently written first */
    uint64_t uid;
    uint64_t bytes;
    rg_sha256 sha;
    uint8_t dir;
    uint8_t created; /* the file exists: reopen it to append */
    int32_t sid;     /* -1, or the stream id of a split flow's record */
    /* gap recovery: holes skipped, as (offset in the stream, length) pairs */
    uint64_t skipped; /* bytes in them: offset = bytes + skipped */
    uint64_t *gaps;
    uint32_t ngaps, gap_cap;
} sdir;

typedef struct st_flow {
    uint16_t layer;
    rg_nf_endpoints ep; /* read at open: the keys are gone after on_close */
    rg_nf_icmp icmp;    /* the ICMP errors quoting its datagrams */
    sdir d[2];
    /* Split flows (a handler with a "sid" argument): one record per direction and
     * stream id, allocated one by one (the open-file list points at them). */
    sdir **subs;
    uint32_t nsubs, capsubs;
} st_flow;

typedef struct nf_streams {
    rg_nf base;
    int16_t *data_arg; /* per handler: index of its "data" argument or -1 */
    int16_t *sid_arg;  /* per handler: index of its numeric "sid" argument or -1 */
    rg_nf_icmp_cls icmp;
    rg_nf_map flows;   /* uid -> st_flow */
    sdir *head, *tail; /* open files */
    unsigned nopen;
    char *outdir;
    char *path; /* scratch for file names */
    size_t pathlen;
    FILE *flows_out;
    FILE *noflow;
    uint64_t noflow_calls, noflow_bytes;
    uint64_t nflows, ndirs, bytes;
    uint64_t gaps, gap_bytes; /* gap recovery */
} nf_streams;

static const char *dir_name(unsigned dir)
{
    return dir ? "s2c" : "c2s";
}

/* path relative to OUT of a direction's file */
static void rel_name(char *buf, size_t n, const sdir *d)
{
    if (d->sid >= 0)
        snprintf(buf, n, "streams/%" PRIu64 "-%s-sid%" PRId32 ".bin", d->uid, dir_name(d->dir),
                 d->sid);
    else
        snprintf(buf, n, "streams/%" PRIu64 "-%s.bin", d->uid, dir_name(d->dir));
}

static void unlink_open(nf_streams *nf, sdir *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        nf->head = d->next;
    if (d->next)
        d->next->prev = d->prev;
    else
        nf->tail = d->prev;
    d->prev = d->next = NULL;
    nf->nopen--;
}

static void close_file(nf_streams *nf, sdir *d)
{
    if (!d->fp) return;
    unlink_open(nf, d);
    char rel[64];
    rel_name(rel, sizeof rel, d);
    rg_nf_close_out(&nf->base, d->fp, rel);
    d->fp = NULL;
}

static void link_head(nf_streams *nf, sdir *d)
{
    d->prev = NULL;
    d->next = nf->head;
    if (nf->head) nf->head->prev = d;
    nf->head = d;
    if (!nf->tail) nf->tail = d;
    nf->nopen++;
}

/* A payload file opened for writing (append or truncate), readable by its owner only: the
 * bytes are the traffic's, not for every local user to read. */
static FILE *open_private(const char *path, int append)
{
    int fd = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0600);
    if (fd < 0) return NULL;
    FILE *f = fchmod(fd, 0600) ? NULL : fdopen(fd, append ? "ab" : "wb");
    if (!f) close(fd);
    return f;
}

/* d's file, open and first in the list; NULL on error (recorded). */
static FILE *file_of(nf_streams *nf, sdir *d)
{
    if (d->fp) {
        if (nf->head == d) return d->fp;
        unlink_open(nf, d); /* relinked first below */
    } else {
        if (nf->nopen >= MAX_OPEN) close_file(nf, nf->tail);
        char rel[64];
        rel_name(rel, sizeof rel, d);
        snprintf(nf->path, nf->pathlen, "%s/%s", nf->outdir, rel);
        d->fp = open_private(nf->path, d->created);
        if (!d->fp) {
            rg_nf_fail(&nf->base, "cannot open", nf->path);
            return NULL;
        }
        d->created = 1;
    }
    link_head(nf, d);
    return d->fp;
}

static st_flow *flow_of(nf_streams *nf, const rg_flow_info *f)
{
    int created;
    st_flow *r =
        rg_nf_flow_of(&nf->base, &nf->flows, f, sizeof *r, offsetof(st_flow, ep), &created);
    if (!created) return r;
    r->layer = f->layer;
    r->icmp.type = r->icmp.code = -1;
    for (unsigned i = 0; i < 2; i++) {
        r->d[i].uid = f->uid;
        r->d[i].dir = (uint8_t)i;
        r->d[i].sid = -1;
        rg_sha256_init(&r->d[i].sha);
    }
    return r;
}

/* ---- split flows: one record per direction and stream id ---- */

/* Index of handler h's numeric argument named "sid", or -1. */
static int16_t *sid_args(const rg_stack_desc *stack)
{
    int16_t *a = malloc((stack->nhandlers ? stack->nhandlers : 1) * sizeof *a);
    if (!a) return NULL;
    for (unsigned h = 0; h < stack->nhandlers; h++) {
        const rg_handler_desc *d = &stack->handlers[h];
        a[h] = -1;
        for (unsigned i = 0; i < d->nargs && i < INT16_MAX; i++)
            if (d->arg_kinds[i] == RG_VAL_NUM && !strcmp(d->arg_names[i], "sid")) {
                a[h] = (int16_t)i;
                break;
            }
    }
    return a;
}

/* Does a data handler of this layer name a stream id?  Its flows are split. */
static int splits(const nf_streams *nf, uint16_t layer)
{
    const rg_stack_desc *st = nf->base.stack;
    for (unsigned h = 0; h < st->nhandlers; h++)
        if (st->handlers[h].layer == layer && nf->data_arg[h] >= 0 && nf->sid_arg[h] >= 0) return 1;
    return 0;
}

/* r's record for (dir, sid), created on first use; NULL on error (recorded). */
static sdir *sub_of(nf_streams *nf, st_flow *r, unsigned dir, int32_t sid)
{
    for (uint32_t i = 0; i < r->nsubs; i++)
        if (r->subs[i]->dir == dir && r->subs[i]->sid == sid) return r->subs[i];
    if (r->nsubs == r->capsubs) {
        uint32_t ncap = r->capsubs ? r->capsubs * 2 : 4;
        sdir **p = realloc(r->subs, ncap * sizeof *p);
        if (!p) goto oom;
        r->subs = p;
        r->capsubs = ncap;
    }
    sdir *d = calloc(1, sizeof *d);
    if (!d) goto oom;
    d->uid = r->d[0].uid;
    d->dir = (uint8_t)dir;
    d->sid = sid;
    rg_sha256_init(&d->sha);
    r->subs[r->nsubs++] = d;
    return d;
oom:
    errno = ENOMEM;
    rg_nf_fail(&nf->base, "cannot track streams", NULL);
    return NULL;
}

static int cmp_sub(const void *a, const void *b)
{
    const sdir *x = *(sdir *const *)a, *y = *(sdir *const *)b;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    return x->sid < y->sid ? -1 : x->sid > y->sid;
}

static int delivers(const nf_streams *nf, uint16_t layer);

static void on_call(void *self, const rg_call *c)
{
    nf_streams *nf = self;
    if (rg_nf_icmp_kind(&nf->base, &nf->icmp, c)) { /* an ICMP error quoting a stream's flow */
        st_flow *r = delivers(nf, c->flow->layer) ? flow_of(nf, c->flow) : NULL;
        if (r) rg_nf_icmp_note(&nf->base, &nf->icmp, c, &r->icmp, &r->ep);
        return;
    }
    const rg_bytes *data = rg_obs_call_data(nf->data_arg, nf->base.stack, c);
    if (!c->flow) {
        nf->noflow_calls++;
        if (!data || !data->len) return;
        if (!nf->noflow) {
            snprintf(nf->path, nf->pathlen, "%s/streams/noflow.bin", nf->outdir);
            nf->noflow = open_private(nf->path, 0);
            if (!nf->noflow) {
                rg_nf_fail(&nf->base, "cannot open", nf->path);
                return;
            }
        }
        nf->noflow_bytes += data->len;
        if (fwrite(data->ptr, 1, data->len, nf->noflow) != data->len)
            rg_nf_fail(&nf->base, "cannot write", "streams/noflow.bin");
        return;
    }
    if (!data || !data->len) return;
    st_flow *r = flow_of(nf, c->flow);
    if (!r) return;
    sdir *d = &r->d[c->dir != 0];
    const int16_t si = nf->sid_arg[c->handler];
    if (si >= 0) { /* stream ids are 16 bits in SCTP; keep any 31-bit value */
        d = sub_of(nf, r, c->dir != 0, (int32_t)(c->args[si].num & 0x7fffffffu));
        if (!d) return;
    }
    /* count and hash even if the file fails: flows.jsonl stays right and
     * the failure is reported by rg_nf_finish */
    d->bytes += data->len;
    rg_sha256_update(&d->sha, data->ptr, data->len);
    FILE *fp = file_of(nf, d);
    if (fp && fwrite(data->ptr, 1, data->len, fp) != data->len) {
        char rel[64];
        rel_name(rel, sizeof rel, d);
        rg_nf_fail(&nf->base, "cannot write", rel);
    }
}

/* Does any handler of this layer deliver data?  Only such layers' flows are streams: an
 * IPv4 datagram's instance under a TCP stack is not one. */
static int delivers(const nf_streams *nf, uint16_t layer)
{
    const rg_stack_desc *st = nf->base.stack;
    for (unsigned h = 0; h < st->nhandlers; h++)
        if (st->handlers[h].layer == layer && nf->data_arg[h] >= 0) return 1;
    return 0;
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    (void)ts_ns;
    if (delivers(self, f->layer)) flow_of(self, f);
}

/* gap recovery: a hole before the next bytes of f's direction dir (a split flow's holes
 * are the instance's, recorded on its unsplit direction records) */
static void on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns)
{
    (void)seq;
    (void)ts_ns;
    nf_streams *nf = self;
    if (!delivers(nf, f->layer)) return;
    st_flow *r = flow_of(nf, f);
    if (!r) return;
    sdir *d = &r->d[dir != 0];
    /* the data call that follows carries the bytes around the hole: `at` of
     * them come before it */
    const uint64_t off = d->bytes + d->skipped + at;
    d->skipped += len;
    if (d->ngaps && d->gaps[2 * d->ngaps - 2] + d->gaps[2 * d->ngaps - 1] == off) {
        d->gaps[2 * d->ngaps - 1] += len; /* continues the last hole (another assemble) */
        return;
    }
    if (d->ngaps == d->gap_cap) {
        uint32_t ncap = d->gap_cap ? d->gap_cap * 2 : 4;
        uint64_t *g = realloc(d->gaps, (size_t)ncap * 2 * sizeof *g);
        if (!g) {
            errno = ENOMEM;
            rg_nf_fail(&nf->base, "cannot record gaps", NULL);
            return;
        }
        d->gaps = g;
        d->gap_cap = ncap;
    }
    d->gaps[2 * d->ngaps] = off;
    d->gaps[2 * d->ngaps + 1] = len;
    d->ngaps++;
}

/* One line of flows.jsonl for record d (direction i of r); closes its file. */
static void report_dir(nf_streams *nf, st_flow *r, sdir *d, unsigned i, int split,
                       const char *close, int complete, const char *end)
{
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, r->layer);
    FILE *out = nf->flows_out;
    close_file(nf, d);
    uint8_t digest[32];
    char sha[65], rel[64];
    rg_sha256_final(&d->sha, digest);
    rg_sha256_hex(digest, sha);
    rel_name(rel, sizeof rel, d);
    fputs("{\"layer\":", out);
    rg_json_string(out, l ? l->name : NULL);
    fputs(",\"proto\":", out);
    rg_json_string(out, l ? l->protocol : NULL);
    /* each line names its own direction's sender first */
    rg_nf_endpoints ep = r->ep;
    if (i == 1) rg_nf_endpoints_reverse(&r->ep, &ep);
    rg_nf_json_endpoints(out, &ep);
    fprintf(out, ",\"dir\":\"%s\"", dir_name(i));
    if (split) { /* only split flows have the key: other records stay as they were */
        if (d->sid >= 0)
            fprintf(out, ",\"sid\":%" PRId32, d->sid);
        else
            fputs(",\"sid\":null", out);
    }
    fprintf(out, ",\"bytes\":%" PRIu64 ",\"sha256\":\"%s\",\"file\":", d->bytes, sha);
    rg_json_string(out, d->bytes ? rel : NULL);
    fprintf(out, ",\"complete\":%s,\"uid\":%" PRIu64 ",\"close\":\"%s\",\"gaps\":[",
            complete < 0 ? "null"
            : complete   ? "true"
                         : "false",
            d->uid, close);
    for (uint32_t k = 0; k < d->ngaps; k++)
        fprintf(out, "%s[%" PRIu64 ",%" PRIu64 "]", k ? "," : "", d->gaps[2 * k],
                d->gaps[2 * k + 1]);
    fprintf(out, "]%s", end);
    rg_nf_icmp_json(out, &r->icmp);
    fputs("}\n", out);
    nf->bytes += d->bytes;
    nf->gaps += d->ngaps;
    nf->gap_bytes += d->skipped;
}

/* The flow's lines (both directions, or one per direction and stream id of a split flow
 * that delivered something); frees r.  complete: 1/0, or -1 for null. */
static void report(nf_streams *nf, st_flow *r, const char *close, int complete, const char *end)
{
    const int split = splits(nf, r->layer);
    if (r->nsubs) {
        qsort(r->subs, r->nsubs, sizeof *r->subs, cmp_sub);
        for (uint32_t k = 0; k < r->nsubs; k++) {
            report_dir(nf, r, r->subs[k], r->subs[k]->dir, split, close, complete, end);
            free(r->subs[k]->gaps);
            free(r->subs[k]);
        }
        nf->ndirs += r->nsubs;
        for (unsigned i = 0; i < 2; i++) { /* holes of a split flow: counted, not listed */
            nf->gaps += r->d[i].ngaps;
            nf->gap_bytes += r->d[i].skipped;
        }
    } else {
        for (unsigned i = 0; i < 2; i++)
            report_dir(nf, r, &r->d[i], i, split, close, complete, end);
        nf->ndirs += 2;
    }
    free(r->d[0].gaps);
    free(r->d[1].gaps);
    free(r->subs);
    free(r->icmp.errors);
    nf->nflows++;
    free(r);
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)ts_ns;
    nf_streams *nf = self;
    if (!delivers(nf, f->layer)) return;
    st_flow *r = flow_of(nf, f);
    if (!r) return;
    rg_nf_map_del(&nf->flows, f->uid);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    char end[512];
    rg_nf_end_fields(end, sizeof end, nf->base.stack, f, reason);
    report(nf, r, rg_close_name(reason), l && l->has_psm ? complete != 0 : -1, end);
}

/* An instance that never closed (the context was not flushed). */
static void report_open(void *self, void *r)
{
    report(self, r, "open", -1, "");
}

static int finish(rg_nf *base)
{
    nf_streams *nf = (nf_streams *)base;
    rg_nf_map_drain(&nf->flows, report_open, nf);
    rg_nf_close_out(base, nf->flows_out, "flows.jsonl");
    rg_nf_close_out(base, nf->noflow, "streams/noflow.bin");
    char e[256];
    FILE *sum = rg_nf_open_file(nf->outdir, "streams.json", e, sizeof e);
    if (sum) {
        fprintf(sum,
                "{\"flows\":%" PRIu64 ",\"directions\":%" PRIu64 ",\"bytes\":%" PRIu64
                ",\"noflow_calls\":%" PRIu64 ",\"noflow_bytes\":%" PRIu64 ",\"noflow_file\":%s"
                ",\"gaps\":%" PRIu64 ",\"gap_bytes\":%" PRIu64 "}\n",
                nf->nflows, nf->ndirs, nf->bytes, nf->noflow_calls, nf->noflow_bytes,
                nf->noflow_bytes ? "\"streams/noflow.bin\"" : "null", nf->gaps, nf->gap_bytes);
        rg_nf_close_out(base, sum, "streams.json");
    } else if (!base->err[0]) {
        snprintf(base->err, sizeof base->err, "%s", e);
    }
    free(nf->data_arg);
    free(nf->sid_arg);
    rg_nf_icmp_cls_free(&nf->icmp);
    free(nf->outdir);
    free(nf->path);
    return RG_OK;
}

rg_nf *rg_nf_streams_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    if (rg_mkdirs(outdir, err, errlen)) return NULL;
    size_t n = strlen(outdir);
    nf_streams *nf = calloc(1, sizeof *nf);
    if (!nf) goto oom;
    nf->pathlen = n + 64; /* "/streams/" + uid + "-c2s.bin" */
    nf->outdir = strdup(outdir);
    nf->path = malloc(nf->pathlen);
    nf->data_arg = rg_obs_data_args(stack);
    nf->sid_arg = sid_args(stack);
    if (!nf->outdir || !nf->path || !nf->data_arg || !nf->sid_arg || rg_nf_map_init(&nf->flows))
        goto oom;
    snprintf(nf->path, nf->pathlen, "%s/streams", outdir);
    if (rg_mkdirs(nf->path, err, errlen)) goto fail;
    nf->flows_out = rg_nf_open_out(outdir, "flows.jsonl", err, errlen);
    if (!nf->flows_out) goto fail;
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_open = on_open;
    nf->base.obs.on_close = on_close;
    nf->base.obs.on_gap = on_gap;
    nf->base.finish = finish;
    return &nf->base;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    if (nf) {
        rg_nf_map_free(&nf->flows);
        free(nf->data_arg);
        free(nf->sid_arg);
        free(nf->outdir);
        free(nf->path);
        free(nf);
    }
    return NULL;
}
