/* rg_nf_flowstats.c - the "flowstats" NF: one JSON line per instance of
 * OUT/flowstats.jsonl when it closes (format in rg_nf.h). */
#include "rg_nf_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct fs_flow {
    uint64_t uid;
    uint16_t layer;
    uint64_t packets[2], bytes[2];
    uint64_t first_ts, last_ts;
    rg_nf_endpoints ep; /* read at open: the keys are gone after on_close */
} fs_flow;

typedef struct nf_flowstats {
    rg_nf base;
    FILE *out;
    rg_nf_map flows; /* uid -> fs_flow */
    int all;         /* also instances that lived within one packet */
} nf_flowstats;

void rg_nf_flowstats_all(rg_obs *obs, int all)
{
    rg_nf *nf = (rg_nf *)obs;
    if (nf && nf->name && !strcmp(nf->name, "flowstats")) ((nf_flowstats *)nf)->all = all;
}

/* The record of f, created on its first sighting (normally on_open). */
static fs_flow *flow_of(nf_flowstats *nf, const rg_flow_info *f, uint64_t ts_ns)
{
    int created;
    fs_flow *r =
        rg_nf_flow_of(&nf->base, &nf->flows, f, sizeof *r, offsetof(fs_flow, ep), &created);
    if (created) {
        r->uid = f->uid;
        r->layer = f->layer;
        r->first_ts = r->last_ts = ts_ns;
    }
    return r;
}

static void write_flow(nf_flowstats *nf, const fs_flow *r, const char *state, const char *close,
                       int complete)
{
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, r->layer);
    FILE *out = nf->out;
    fputs("{\"layer\":", out);
    rg_json_string(out, l ? l->name : NULL);
    fputs(",\"proto\":", out);
    rg_json_string(out, l ? l->protocol : NULL);
    fprintf(out, ",\"uid\":%" PRIu64, r->uid);
    rg_nf_json_endpoints(out, &r->ep);
    fprintf(out,
            ",\"packets\":[%" PRIu64 ",%" PRIu64 "],\"bytes\":[%" PRIu64 ",%" PRIu64
            "],\"first_ts\":%" PRIu64 ",\"last_ts\":%" PRIu64 ",\"state\":",
            r->packets[0], r->packets[1], r->bytes[0], r->bytes[1], r->first_ts, r->last_ts);
    rg_json_string(out, state);
    fprintf(out, ",\"close\":\"%s\",\"complete\":%s}\n", close, complete ? "true" : "false");
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    flow_of(self, f, ts_ns);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    fs_flow *r = flow_of(self, f, ts_ns);
    if (!r) return;
    r->packets[dir != 0]++;
    r->bytes[dir != 0] += len;
    r->last_ts = ts_ns;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    nf_flowstats *nf = self;
    fs_flow *r = flow_of(nf, f, ts_ns);
    if (!r) return;
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    const char *state = l && l->has_psm && f->state < l->nstates ? l->states[f->state] : NULL;
    /* destroyed by the packet that created it: one record per unfragmented
     * datagram would drown the connections */
    int within_packet = reason == RG_CLOSE_ACCEPT && r->packets[0] + r->packets[1] <= 1;
    if (nf->all || !within_packet) write_flow(nf, r, state, rg_close_name(reason), complete);
    free(rg_nf_map_del(&nf->flows, f->uid));
}

/* An instance that never closed (the context was not flushed). */
static void write_open(void *self, void *r)
{
    write_flow(self, r, NULL, "open", 0);
    free(r);
}

static int finish(rg_nf *base)
{
    nf_flowstats *nf = (nf_flowstats *)base;
    rg_nf_map_drain(&nf->flows, write_open, nf);
    rg_nf_close_out(base, nf->out, "flowstats.jsonl");
    return RG_OK;
}

rg_nf *rg_nf_flowstats_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    if (rg_nf_mkdirs(outdir, err, errlen)) return NULL;
    nf_flowstats *nf = calloc(1, sizeof *nf);
    if (!nf || rg_nf_map_init(&nf->flows)) {
        free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->out = rg_nf_open_out(outdir, "flowstats.jsonl", err, errlen);
    if (!nf->out) {
        rg_nf_map_free(&nf->flows);
        free(nf);
        return NULL;
    }
    nf->base.obs.on_open = on_open;
    nf->base.obs.on_packet = on_packet;
    nf->base.obs.on_close = on_close;
    nf->base.finish = finish;
    return &nf->base;
}
