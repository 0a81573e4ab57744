/* rg_nf_icmp.c - ICMP on the stock NFs' flow records (rg_nf_int.h): which handlers tell of an
 * ICMP conversation's first packet and of the errors quoting a flow's datagrams, and what each
 * record keeps of them. */
#include "rg_nf_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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

/* Which handlers tell of ICMP conversations and errors (built at the first call). */
static int classify(rg_nf_icmp_cls *cls, const rg_stack_desc *st)
{
    unsigned n = st->nhandlers ? st->nhandlers : 1;
    cls->hkind = calloc(n, sizeof *cls->hkind);
    cls->hargs = calloc(n, sizeof *cls->hargs);
    if (!cls->hkind || !cls->hargs) return -1;
    for (unsigned h = 0; h < st->nhandlers; h++) {
        const rg_handler_desc *d = &st->handlers[h];
        int16_t *a = cls->hargs[h];
        if (hooks(d->events, "icmp_error")) {
            a[0] = arg_index(d, "type", RG_VAL_NUM);
            a[1] = arg_index(d, "code", RG_VAL_NUM);
            a[2] = arg_index(d, "reporter", RG_VAL_BYTES);
            if (a[0] >= 0 && a[1] >= 0) cls->hkind[h] = RG_NF_ICMP_ERROR;
        } else {
            a[0] = arg_index(d, "icmp_type", RG_VAL_NUM);
            a[1] = arg_index(d, "icmp_code", RG_VAL_NUM);
            if (a[0] >= 0 && a[1] >= 0) cls->hkind[h] = RG_NF_ICMP_FIRST;
        }
    }
    return 0;
}

int rg_nf_icmp_kind(rg_nf *nf, rg_nf_icmp_cls *cls, const rg_call *c)
{
    if (!c->flow || c->end) return 0;
    if (!cls->hkind && classify(cls, nf->stack)) {
        free(cls->hkind);
        free(cls->hargs);
        cls->hkind = NULL;
        cls->hargs = NULL;
        errno = ENOMEM;
        rg_nf_fail(nf, "cannot track ICMP", NULL);
        return 0;
    }
    return c->handler < nf->stack->nhandlers ? cls->hkind[c->handler] : 0;
}

void rg_nf_icmp_note(rg_nf *nf, const rg_nf_icmp_cls *cls, const rg_call *c, rg_nf_icmp *r,
                     rg_nf_endpoints *ep)
{
    const int16_t *a = cls->hargs[c->handler];
    if (cls->hkind[c->handler] == RG_NF_ICMP_FIRST) {
        if (r->type < 0) { /* the conversation's first packet */
            r->type = (int16_t)(c->args[a[0]].num & 0xff);
            r->code = (int16_t)(c->args[a[1]].num & 0xff);
            const rg_layer_desc *l = rg_nf_layer(nf->stack, c->flow->layer);
            if (l) rg_nf_endpoints_icmp(l, ep, (uint8_t)r->type, (uint8_t)r->code);
        }
        return;
    }
    if (r->nerrors == r->cap) {
        uint32_t ncap = r->cap ? r->cap * 2 : 2;
        rg_nf_icmp_err *e = realloc(r->errors, ncap * sizeof *e);
        if (!e) {
            errno = ENOMEM;
            rg_nf_fail(nf, "cannot track ICMP errors", NULL);
            return;
        }
        r->errors = e;
        r->cap = ncap;
    }
    rg_nf_icmp_err *e = &r->errors[r->nerrors++];
    e->type = (uint8_t)c->args[a[0]].num;
    e->code = (uint8_t)c->args[a[1]].num;
    e->reporter[0] = 0;
    if (a[2] >= 0)
        rg_nf_addr_text(c->args[a[2]].bytes.ptr, c->args[a[2]].bytes.len, e->reporter,
                        sizeof e->reporter);
    e->ts = c->ts_ns;
}

void rg_nf_icmp_json(FILE *out, const rg_nf_icmp *r)
{
    if (r->type >= 0) fprintf(out, ",\"icmp_type\":%d,\"icmp_code\":%d", r->type, r->code);
    if (!r->nerrors) return;
    fputs(",\"icmp_errors\":[", out);
    for (uint32_t i = 0; i < r->nerrors; i++) {
        const rg_nf_icmp_err *e = &r->errors[i];
        fprintf(out, "%s{\"type\":%u,\"code\":%u,\"reporter\":", i ? "," : "", e->type, e->code);
        rg_json_string(out, e->reporter[0] ? e->reporter : NULL);
        fprintf(out, ",\"ts\":%" PRIu64 "}", e->ts);
    }
    fputc(']', out);
}

void rg_nf_icmp_cls_free(rg_nf_icmp_cls *cls)
{
    free(cls->hkind);
    free(cls->hargs);
    cls->hkind = NULL;
    cls->hargs = NULL;
}
