/* rg_nf_count.c - the "count" NF: handler calls, instances, payload bytes. */
#include "rg_nf_int.h"

#include <stdlib.h>

typedef struct nf_count {
    rg_nf base;
    rg_nf_counts n;
    int16_t *data_arg; /* per handler: index of its "data" argument or -1 */
} nf_count;

static void on_call(void *self, const rg_call *c)
{
    nf_count *nf = self;
    nf->n.calls++;
    const rg_bytes *d = rg_nf_call_data(nf->data_arg, nf->base.stack, c);
    if (d) nf->n.payload_bytes += d->len;
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    (void)ts_ns;
    nf_count *nf = self;
    nf->n.opened++;
    if (f->layer < nf->base.stack->nlayers) nf->n.layer[f->layer].opened++;
    if (f->uid > nf->n.uid_max) nf->n.uid_max = f->uid;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)complete;
    (void)ts_ns;
    nf_count *nf = self;
    nf->n.closed++;
    if (f->layer >= nf->base.stack->nlayers) return;
    rg_nf_layer_counts *l = &nf->n.layer[f->layer];
    if (reason >= 0 && reason < 4) l->closed[reason]++;
    if (f->uid > nf->n.uid_mark) l->one_packet++;
}

static void on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns)
{
    (void)f;
    (void)dir;
    (void)seq;
    (void)at;
    (void)ts_ns;
    nf_count *nf = self;
    nf->n.gaps++;
    nf->n.gap_bytes += len;
}

static int finish(rg_nf *base)
{
    free(((nf_count *)base)->data_arg);
    free(((nf_count *)base)->n.layer);
    return RG_OK;
}

rg_nf *rg_nf_count_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)outdir; /* writes nothing: the driver prints the numbers */
    nf_count *nf = calloc(1, sizeof *nf);
    if (nf) nf->data_arg = rg_nf_data_args(stack);
    if (nf) nf->n.layer = calloc(stack->nlayers ? stack->nlayers : 1, sizeof *nf->n.layer);
    if (!nf || !nf->data_arg || !nf->n.layer) {
        if (nf) {
            free(nf->data_arg);
            free(nf->n.layer);
        }
        free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_open = on_open;
    nf->base.obs.on_close = on_close;
    nf->base.obs.on_gap = on_gap;
    nf->base.finish = finish;
    return &nf->base;
}

const rg_nf_counts *rg_nf_counts_of(const rg_obs *obs)
{
    if (!obs || obs->on_call != on_call) return NULL; /* not a count NF */
    return &((const nf_count *)obs)->n;
}
