/* rg_nf_flowstats.c - the "flowstats" NF: one JSON line per instance of
 * OUT/flowstats.jsonl when it closes (format in rg_nf.h). */
#include "rg_nf_int.h"

#include <inttypes.h>
#include <string.h>

typedef struct nf_flowstats {
    rg_nf_flows f;
    int all; /* also instances that lived within one packet */
} nf_flowstats;

void rg_nf_flowstats_all(rg_obs *obs, int all)
{
    rg_nf *nf = (rg_nf *)obs;
    if (nf && nf->name && !strcmp(nf->name, "flowstats")) ((nf_flowstats *)nf)->all = all;
}

static void write_flow(rg_nf_flows *nf, const rg_nf_flowrec *r, const char *state,
                       const char *close, int complete, const char *end)
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
    fprintf(out, ",\"close\":\"%s\",\"complete\":%s%s", close, complete ? "true" : "false", end);
    rg_nf_icmp_json(out, &r->icmp);
    fputs("}\n", out);
}

static void write_rec(rg_nf_flows *nf, const rg_nf_flowrec *r, const rg_flow_info *f, int reason,
                      int complete)
{
    if (!f) { /* an instance that never closed (the context was not flushed) */
        write_flow(nf, r, NULL, "open", 0, "");
        return;
    }
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    const char *state = l && l->has_psm && f->state < l->nstates ? l->states[f->state] : NULL;
    /* destroyed by the packet that created it: one record per unfragmented
     * datagram would drown the connections (a connection of one packet, a lone RST, is
     * written: its layer lingers) */
    int within_packet =
        reason == RG_CLOSE_ACCEPT && r->packets[0] + r->packets[1] <= 1 && !(l && l->linger_ns);
    if (((nf_flowstats *)nf)->all || !within_packet) {
        char end[512];
        rg_nf_end_fields(end, sizeof end, nf->base.stack, f, reason);
        write_flow(nf, r, state, rg_close_name(reason), complete, end);
    }
}

rg_nf *rg_nf_flowstats_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    rg_nf_flows *nf =
        rg_nf_flows_new(sizeof(nf_flowstats), outdir, "flowstats.jsonl", write_rec, err, errlen);
    return nf ? &nf->base : NULL;
}
