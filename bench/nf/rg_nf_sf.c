/* rg_nf_sf.c - the SF network function: see rg_nf_sf.h. */
#include "rg_nf_sf.h"

#include <stdlib.h>
#include <string.h>

/* One flow's streams, in an open-addressing table keyed by instance uid (an
 * observer gets const instances: it cannot keep a pointer in them). */
typedef struct sf_slot {
    uint64_t uid; /* 0 = empty (uids start at 1) */
    hs_stream_t *s[2];
} sf_slot;

struct rg_nf_sf {
    rg_obs obs;
    const rg_stack_desc *stack;
    const sf_db *db;
    int16_t *data_arg; /* per handler: index of its "data" argument, or -1 */
    uint8_t *delivers; /* per layer: some handler of it has a "data" argument */
    sf_slot *slot;
    size_t cap, n; /* cap: a power of two */
    uint64_t noflow_calls;
    sf_counts c;
};

static size_t home_of(uint64_t uid, size_t cap)
{
    /* uids are consecutive: a multiplicative hash spreads them */
    return (size_t)((uid * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (cap - 1);
}

static size_t find(const sf_slot *t, size_t cap, uint64_t uid)
{
    size_t i = home_of(uid, cap);
    while (t[i].uid && t[i].uid != uid)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Keep the load at most 1/2 so that probe runs stay short; 0 = OK. */
static int grow(rg_nf_sf *nf)
{
    size_t cap = nf->cap * 2;
    sf_slot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < nf->cap; i++)
        if (nf->slot[i].uid) t[find(t, cap, nf->slot[i].uid)] = nf->slot[i];
    free(nf->slot);
    nf->slot = t;
    nf->cap = cap;
    return 0;
}

static void del(rg_nf_sf *nf, size_t i)
{
    size_t mask = nf->cap - 1;
    /* backward-shift deletion: move later entries of the probe run into the
     * hole unless their home lies cyclically in (hole, their slot] */
    for (size_t j = (i + 1) & mask; nf->slot[j].uid; j = (j + 1) & mask) {
        size_t home = home_of(nf->slot[j].uid, nf->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            nf->slot[i] = nf->slot[j];
            i = j;
        }
    }
    memset(&nf->slot[i], 0, sizeof nf->slot[i]);
    nf->n--;
}

static void on_call(void *self, const rg_call *c)
{
    rg_nf_sf *nf = self;
    if (c->handler >= nf->stack->nhandlers) return;
    int a = nf->data_arg[c->handler];
    if (a < 0 || c->args[a].kind != RG_VAL_BYTES || !c->args[a].bytes.len) return;
    if (!c->flow) {
        nf->noflow_calls++;
        return;
    }
    size_t i = find(nf->slot, nf->cap, c->flow->uid);
    if (!nf->slot[i].uid) {
        if ((nf->n + 1) * 2 > nf->cap) {
            if (grow(nf)) {
                nf->c.errors++;
                return;
            }
            i = find(nf->slot, nf->cap, c->flow->uid);
        }
        nf->slot[i].uid = c->flow->uid;
        nf->n++;
    }
    sf_scan(nf->db, &nf->slot[i].s[c->dir != 0], c->args[a].bytes.ptr, c->args[a].bytes.len,
            &nf->c);
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)reason;
    (void)complete;
    (void)ts_ns;
    rg_nf_sf *nf = self;
    /* most instances (every IPv4 datagram) never carry data: skip the lookup */
    if (f->layer >= nf->stack->nlayers || !nf->delivers[f->layer]) return;
    size_t i = find(nf->slot, nf->cap, f->uid);
    if (!nf->slot[i].uid) return;
    sf_close(nf->db, &nf->slot[i].s[0], &nf->c);
    sf_close(nf->db, &nf->slot[i].s[1], &nf->c);
    del(nf, i);
}

rg_nf_sf *rg_nf_sf_new(const rg_stack_desc *stack, const sf_db *db, char *err, size_t errlen)
{
    rg_nf_sf *nf = calloc(1, sizeof *nf);
    if (!nf) goto oom;
    nf->stack = stack;
    nf->db = db;
    nf->cap = 1024;
    nf->slot = calloc(nf->cap, sizeof *nf->slot);
    nf->data_arg = malloc((stack->nhandlers ? stack->nhandlers : 1) * sizeof *nf->data_arg);
    nf->delivers = calloc(stack->nlayers ? stack->nlayers : 1, 1);
    if (!nf->slot || !nf->data_arg || !nf->delivers || sf_counts_init(&nf->c, db->n)) goto oom;
    for (unsigned h = 0; h < stack->nhandlers; h++) {
        const rg_handler_desc *d = &stack->handlers[h];
        nf->data_arg[h] = -1;
        for (unsigned i = 0; i < d->nargs && i < INT16_MAX; i++) {
            if (d->arg_kinds[i] == RG_VAL_BYTES && !strcmp(d->arg_names[i], "data")) {
                nf->data_arg[h] = (int16_t)i;
                if (d->layer < stack->nlayers) nf->delivers[d->layer] = 1;
                break;
            }
        }
    }
    nf->obs.self = nf;
    nf->obs.on_call = on_call;
    nf->obs.on_close = on_close;
    return nf;
oom:
    snprintf(err, errlen, "out of memory");
    rg_nf_sf_free(nf);
    return NULL;
}

const rg_obs *rg_nf_sf_obs(rg_nf_sf *nf)
{
    return &nf->obs;
}

void rg_nf_sf_end(rg_nf_sf *nf)
{
    for (size_t i = 0; i < nf->cap; i++) {
        if (!nf->slot[i].uid) continue;
        sf_close(nf->db, &nf->slot[i].s[0], &nf->c);
        sf_close(nf->db, &nf->slot[i].s[1], &nf->c);
        memset(&nf->slot[i], 0, sizeof nf->slot[i]);
    }
    nf->n = 0;
}

const sf_counts *rg_nf_sf_counts(const rg_nf_sf *nf)
{
    return &nf->c;
}

uint64_t rg_nf_sf_noflow_calls(const rg_nf_sf *nf)
{
    return nf->noflow_calls;
}

void rg_nf_sf_free(rg_nf_sf *nf)
{
    if (!nf) return;
    if (nf->slot) rg_nf_sf_end(nf);
    sf_counts_free(&nf->c);
    free(nf->slot);
    free(nf->data_arg);
    free(nf->delivers);
    free(nf);
}
