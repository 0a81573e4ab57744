/* rg_counter.c - the driver's counting observer (see rg_counter.h). */
#include "rg_counter.h"

#include <stdlib.h>
#include <string.h>

#include "rg/rg_obs.h"

static void on_call(void *self, const rg_call *c)
{
    rg_counter *k = self;
    k->n.calls++;
    const rg_bytes *d = rg_obs_call_data(k->data_arg, k->stack, c);
    if (d) k->n.payload_bytes += d->len;
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    (void)ts_ns;
    rg_counter *k = self;
    k->n.opened++;
    if (f->layer < k->stack->nlayers) k->n.layer[f->layer].opened++;
    if (f->uid > k->n.uid_max) k->n.uid_max = f->uid;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)complete;
    (void)ts_ns;
    rg_counter *k = self;
    k->n.closed++;
    if (f->layer >= k->stack->nlayers) return;
    rg_layer_counts *l = &k->n.layer[f->layer];
    if (reason >= 0 && reason < 4) l->closed[reason]++;
    if (f->uid > k->n.uid_mark) l->one_packet++;
}

static void on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns)
{
    (void)f;
    (void)dir;
    (void)seq;
    (void)at;
    (void)ts_ns;
    rg_counter *k = self;
    k->n.gaps++;
    k->n.gap_bytes += len;
}

int rg_counter_init(rg_counter *c, const rg_stack_desc *stack)
{
    memset(c, 0, sizeof *c);
    c->stack = stack;
    c->data_arg = rg_obs_data_args(stack);
    c->n.layer = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *c->n.layer);
    if (c->data_arg && c->n.layer) return RG_OK;
    rg_counter_free(c);
    return RG_ENOMEM;
}

void rg_counter_free(rg_counter *c)
{
    free(c->data_arg);
    free(c->n.layer);
    c->data_arg = NULL;
    c->n.layer = NULL;
}

rg_obs rg_counter_obs(rg_counter *c, int calls)
{
    rg_obs o = {.self = c,
                .on_call = calls ? on_call : NULL,
                .on_open = on_open,
                .on_close = on_close,
                .on_gap = on_gap,
                /* it only counts instances: the one-packet ones it is not shown are counted
                 * by the stack (rg_layer_stats.transient) and added by rg_counter_fold */
                .quiet_transient = ~UINT64_C(0)};
    return o;
}

void rg_counter_fold(rg_counter *c, const rg_stats *st)
{
    if (!st) return;
    for (unsigned i = 0; i < c->stack->nlayers && i < st->nlayers; i++) {
        const uint64_t t = st->layer[i].transient;
        rg_layer_counts *l = &c->n.layer[i];
        l->opened += t;
        l->closed[RG_CLOSE_ACCEPT] += t;
        l->one_packet += t;
        c->n.opened += t;
        c->n.closed += t;
        l->lingering = st->layer[i].lingering;
    }
}
