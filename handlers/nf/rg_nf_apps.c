/* rg_nf_apps.c - the "apps" NF: application messages, one line output per protocol
 * (OUT/dns.jsonl: rg_nf_apps_dns.c).  It classifies the stack's handlers once for each source
 * (rg_nf_apps.h), then routes their calls and the instances' closes to the sources, and keeps
 * what they share: the transport flow of the packet being processed. */
#include "rg_nf_apps.h"

#include "rg/rg_community_id.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define RG_APP_ENTRY(n) &rg_app_##n,
static const rg_app *const apps[] = {RG_APPS(RG_APP_ENTRY)};
#undef RG_APP_ENTRY
#define NAPPS (sizeof apps / sizeof apps[0])

struct rg_nf_apps {
    rg_nf base;
    void *st[NAPPS];
    FILE *out[NAPPS];
    /* per handler: the role of each source (0: none) */
    int (*roles)[NAPPS];
    /* per layer: a transport (TCP, UDP) whose instances are the flows messages belong to */
    uint8_t *transport;
    const rg_flow_info *l4; /* the transport instance the current packet last reached */
    uint64_t l4_uid;        /* its uid, to tell a stale pointer */
};

const rg_stack_desc *rg_apps_stack(const rg_nf_apps *nf)
{
    return nf->base.stack;
}

int rg_apps_has_arg(const rg_handler_desc *h, const char *name, int kind)
{
    for (unsigned i = 0; i < h->nargs; i++)
        if (h->arg_kinds[i] == kind && !strcmp(h->arg_names[i], name)) return 1;
    return 0;
}

const rg_val *rg_apps_arg(const rg_nf_apps *nf, const rg_call *c, const char *name, int kind)
{
    const rg_handler_desc *h = &nf->base.stack->handlers[c->handler];
    for (unsigned i = 0; i < h->nargs; i++)
        if (h->arg_kinds[i] == kind && !strcmp(h->arg_names[i], name)) return &c->args[i];
    return NULL;
}

uint64_t rg_apps_num(const rg_nf_apps *nf, const rg_call *c, const char *name, uint64_t dflt)
{
    const rg_val *v = rg_apps_arg(nf, c, name, RG_VAL_NUM);
    return v ? v->num : dflt;
}

uint64_t rg_apps_transport(rg_nf_apps *nf, rg_nf_endpoints *ep)
{
    const rg_flow_info *f = nf->l4;
    if (!f || f->uid != nf->l4_uid) return 0;
    if (ep) {
        const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
        if (l)
            rg_nf_endpoints_of(l, f, ep);
        else
            memset(ep, 0, sizeof *ep);
    }
    return f->uid;
}

void rg_apps_ts(FILE *out, uint64_t ts_ns)
{
    fprintf(out, "%" PRIu64 ".%06" PRIu64, ts_ns / 1000000000u, ts_ns % 1000000000u / 1000u);
}

void rg_apps_fail(rg_nf_apps *nf, const char *what)
{
    rg_nf_fail(&nf->base, what, NULL);
}

static void on_call(void *self, const rg_call *c)
{
    rg_nf_apps *nf = self;
    if (c->handler >= nf->base.stack->nhandlers || c->end) return;
    for (unsigned a = 0; a < NAPPS; a++)
        if (nf->roles[c->handler][a]) apps[a]->on_call(nf->st[a], nf, c, nf->roles[c->handler][a]);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    (void)dir, (void)len, (void)ts_ns;
    rg_nf_apps *nf = self;
    if (f->layer < nf->base.stack->nlayers && nf->transport[f->layer]) {
        nf->l4 = f;
        nf->l4_uid = f->uid;
    }
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)complete, (void)ts_ns;
    rg_nf_apps *nf = self;
    if (f == nf->l4) nf->l4 = NULL;
    for (unsigned a = 0; a < NAPPS; a++)
        apps[a]->on_close(nf->st[a], nf, f, reason);
}

static int finish(rg_nf *base)
{
    rg_nf_apps *nf = (rg_nf_apps *)base;
    for (unsigned a = 0; a < NAPPS; a++) {
        if (nf->st[a]) apps[a]->finish(nf->st[a], nf);
        char file[64];
        snprintf(file, sizeof file, "%s.jsonl", apps[a]->name);
        if (nf->out[a]) rg_nf_close_out(base, nf->out[a], file);
    }
    free(nf->roles);
    free(nf->transport);
    return RG_OK;
}

static rg_nf *apps_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    if (rg_mkdirs(outdir, err, errlen) != RG_OK) return NULL;
    rg_nf_apps *nf = calloc(1, sizeof *nf);
    if (nf) {
        nf->base.stack = stack;
        nf->roles = calloc(stack->nhandlers ? stack->nhandlers : 1, sizeof *nf->roles);
        nf->transport = calloc(stack->nlayers ? stack->nlayers : 1, 1);
    }
    if (!nf || !nf->roles || !nf->transport) {
        if (nf) free(nf->roles), free(nf->transport);
        free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (unsigned i = 0; i < stack->nlayers; i++) {
        int p = rg_ip_proto_of(stack->layers[i].protocol);
        nf->transport[i] = p == RG_IPPROTO_TCP || p == RG_IPPROTO_UDP;
    }
    for (unsigned h = 0; h < stack->nhandlers; h++)
        for (unsigned a = 0; a < NAPPS; a++)
            nf->roles[h][a] = apps[a]->role(stack, &stack->handlers[h]);
    for (unsigned a = 0; a < NAPPS; a++) {
        char file[64];
        snprintf(file, sizeof file, "%s.jsonl", apps[a]->name);
        nf->out[a] = rg_nf_open_out(outdir, file, err, errlen);
        if (nf->out[a]) nf->st[a] = apps[a]->create(nf, nf->out[a], err, errlen);
        if (!nf->st[a]) {
            finish(&nf->base);
            free(nf);
            return NULL;
        }
    }
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_packet = on_packet;
    nf->base.obs.on_close = on_close;
    nf->base.finish = finish;
    return &nf->base;
}

RG_STOCK_NF(apps, apps_new, "application messages: DNS transactions, OUT/dns.jsonl");
