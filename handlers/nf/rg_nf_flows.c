/* rg_nf_flows.c - what the flow-record NFs (flowstats, flowexport) share: a record per
 * instance with its packets, bytes and first/last time per direction, kept from its first
 * sighting until it closes, when the NF writes its line; those still open at the end are
 * written by finish, in uid order (rg_nf_int.h). */
#include "rg_nf_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The record of f, created on its first sighting (normally on_open). */
static rg_nf_flowrec *flow_of(rg_nf_flows *nf, const rg_flow_info *f, uint64_t ts_ns)
{
    int created;
    rg_nf_flowrec *r =
        rg_nf_flow_of(&nf->base, &nf->flows, f, sizeof *r, offsetof(rg_nf_flowrec, ep), &created);
    if (r && created) {
        r->uid = f->uid;
        r->layer = f->layer;
        r->first_ts = r->last_ts = ts_ns;
        r->icmp_type = r->icmp_code = -1;
    }
    return r;
}

static void free_rec(rg_nf_flowrec *r)
{
    if (r) free(r->icmp_errors);
    free(r);
}

/* Index of handler d's argument called name of kind kind, or -1. */
static int16_t arg_index(const rg_handler_desc *d, const char *name, uint8_t kind)
{
    for (unsigned i = 0; i < d->nargs && i < INT16_MAX; i++)
        if (d->arg_kinds[i] == kind && !strcmp(d->arg_names[i], name)) return (int16_t)i;
    return -1;
}

/* Does the space-separated list `events` name ev? */
static int hooks(const char *events, const char *ev)
{
    size_t n = strlen(ev);
    for (const char *p = events; p && *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, ev, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* hkind/hargs (rg_nf_flows): which handlers tell of ICMP conversations and errors. */
static int classify(rg_nf_flows *nf)
{
    const rg_stack_desc *st = nf->base.stack;
    unsigned n = st->nhandlers ? st->nhandlers : 1;
    nf->hkind = calloc(n, sizeof *nf->hkind);
    nf->hargs = calloc(n, sizeof *nf->hargs);
    if (!nf->hkind || !nf->hargs) return -1;
    for (unsigned h = 0; h < st->nhandlers; h++) {
        const rg_handler_desc *d = &st->handlers[h];
        int16_t *a = nf->hargs[h];
        if (hooks(d->events, "icmp_error")) {
            a[0] = arg_index(d, "type", RG_VAL_NUM);
            a[1] = arg_index(d, "code", RG_VAL_NUM);
            a[2] = arg_index(d, "reporter", RG_VAL_BYTES);
            if (a[0] >= 0 && a[1] >= 0) nf->hkind[h] = 2;
        } else {
            a[0] = arg_index(d, "icmp_type", RG_VAL_NUM);
            a[1] = arg_index(d, "icmp_code", RG_VAL_NUM);
            if (a[0] >= 0 && a[1] >= 0) nf->hkind[h] = 1;
        }
    }
    return 0;
}

static void on_call(void *self, const rg_call *c)
{
    rg_nf_flows *nf = self;
    if (!c->flow || c->end) return;
    if (!nf->hkind && classify(nf)) {
        errno = ENOMEM;
        rg_nf_fail(&nf->base, "cannot track ICMP", NULL);
        return;
    }
    const uint8_t kind = c->handler < nf->base.stack->nhandlers ? nf->hkind[c->handler] : 0;
    if (!kind) return;
    const int16_t *a = nf->hargs[c->handler];
    rg_nf_flowrec *r = flow_of(nf, c->flow, c->ts_ns);
    if (!r) return;
    if (kind == 1) {
        if (r->icmp_type < 0) { /* the conversation's first packet */
            r->icmp_type = (int16_t)(c->args[a[0]].num & 0xff);
            r->icmp_code = (int16_t)(c->args[a[1]].num & 0xff);
            const rg_layer_desc *l = rg_nf_layer(nf->base.stack, c->flow->layer);
            if (l) rg_nf_endpoints_icmp(l, &r->ep, (uint8_t)r->icmp_type, (uint8_t)r->icmp_code);
        }
        return;
    }
    if (r->nicmp_errors == r->cap_icmp_errors) {
        uint32_t ncap = r->cap_icmp_errors ? r->cap_icmp_errors * 2 : 2;
        rg_nf_icmp_err *e = realloc(r->icmp_errors, ncap * sizeof *e);
        if (!e) {
            errno = ENOMEM;
            rg_nf_fail(&nf->base, "cannot track ICMP errors", NULL);
            return;
        }
        r->icmp_errors = e;
        r->cap_icmp_errors = ncap;
    }
    rg_nf_icmp_err *e = &r->icmp_errors[r->nicmp_errors++];
    e->type = (uint8_t)c->args[a[0]].num;
    e->code = (uint8_t)c->args[a[1]].num;
    e->reporter[0] = 0;
    if (a[2] >= 0)
        rg_nf_addr_text(c->args[a[2]].bytes.ptr, c->args[a[2]].bytes.len, e->reporter,
                        sizeof e->reporter);
    e->ts = c->ts_ns;
}

void rg_nf_json_icmp(FILE *out, const rg_nf_flowrec *r)
{
    if (r->icmp_type >= 0)
        fprintf(out, ",\"icmp_type\":%d,\"icmp_code\":%d", r->icmp_type, r->icmp_code);
    if (!r->nicmp_errors) return;
    fputs(",\"icmp_errors\":[", out);
    for (uint32_t i = 0; i < r->nicmp_errors; i++) {
        const rg_nf_icmp_err *e = &r->icmp_errors[i];
        fprintf(out, "%s{\"type\":%u,\"code\":%u,\"reporter\":", i ? "," : "", e->type, e->code);
        rg_json_string(out, e->reporter[0] ? e->reporter : NULL);
        fprintf(out, ",\"ts\":%" PRIu64 "}", e->ts);
    }
    fputc(']', out);
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    flow_of(self, f, ts_ns);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    rg_nf_flowrec *r = flow_of(self, f, ts_ns);
    if (!r) return;
    r->packets[dir != 0]++;
    r->bytes[dir != 0] += len;
    r->last_ts = ts_ns;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    rg_nf_flows *nf = self;
    rg_nf_flowrec *r = flow_of(nf, f, ts_ns);
    if (!r) return;
    nf->write(nf, r, f, reason, complete);
    free_rec(rg_nf_map_del(&nf->flows, f->uid));
}

/* An instance that never closed (the context was not flushed). */
static void write_open(void *self, void *r)
{
    rg_nf_flows *nf = self;
    nf->write(nf, r, NULL, 0, 0);
    free_rec(r);
}

static int finish(rg_nf *base)
{
    rg_nf_flows *nf = (rg_nf_flows *)base;
    rg_nf_map_drain(&nf->flows, write_open, nf);
    rg_nf_close_out(base, nf->out, nf->file);
    free(nf->hkind);
    free(nf->hargs);
    nf->hkind = NULL;
    nf->hargs = NULL;
    return RG_OK;
}

rg_nf_flows *rg_nf_flows_new(size_t size, const char *outdir, const char *file,
                             rg_nf_flows_write write, char *err, size_t errlen)
{
    if (rg_mkdirs(outdir, err, errlen)) return NULL;
    rg_nf_flows *nf = calloc(1, size);
    if (!nf || rg_nf_map_init(&nf->flows)) {
        free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->out = rg_nf_open_out(outdir, file, err, errlen);
    if (!nf->out) {
        rg_nf_map_free(&nf->flows);
        free(nf);
        return NULL;
    }
    nf->file = file;
    nf->write = write;
    nf->base.obs.on_open = on_open;
    nf->base.obs.on_packet = on_packet;
    nf->base.obs.on_close = on_close;
    nf->base.obs.on_call = on_call;
    nf->base.finish = finish;
    return nf;
}
