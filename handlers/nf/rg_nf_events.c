/* rg_nf_events.c - the "events" NF: every handler call as one JSON line of
 * OUT/events.jsonl (format in rg_nf.h). */
#include "rg_nf_int.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>

#include "rg_sha256.h"

enum { HEX_MAX = 64 }; /* bytes shown in "hex"; "sha256" covers them all */

typedef struct nf_events {
    rg_nf base;
    FILE *out;
    rg_nf_icmp_cls icmp;
    rg_nf_map flows; /* uid -> ev_flow: the flows (layers with two sides) */
} nf_events;

/* What the close record of a flow needs from before its close: its last packet's time (its
 * own, not the flow clock, which differs between workers at the final flush) and ICMP. */
typedef struct ev_flow {
    rg_nf_endpoints ep;
    rg_nf_icmp icmp;
    uint64_t last_ts;
} ev_flow;

static void free_flow(ev_flow *r)
{
    if (r) free(r->icmp.errors);
    free(r);
}

static void put_bytes(FILE *out, const rg_bytes *b)
{
    static const char hex[] = "0123456789abcdef";
    char sha[65];
    rg_sha256_hex_of(b->ptr, b->len, sha);
    fprintf(out, "{\"len\":%zu,\"hex\":\"", b->len);
    for (size_t i = 0; i < b->len && i < HEX_MAX; i++) {
        putc(hex[b->ptr[i] >> 4], out);
        putc(hex[b->ptr[i] & 15], out);
    }
    fprintf(out, "\",\"sha256\":\"%s\"}", sha);
}

/* an ICMP conversation's first packet, or an ICMP error quoting a flow: its close record
 * carries them */
static ev_flow *flow_of(nf_events *nf, const rg_flow_info *f)
{
    int created;
    ev_flow *r =
        rg_nf_flow_of(&nf->base, &nf->flows, f, sizeof *r, offsetof(ev_flow, ep), &created);
    if (r && created) r->icmp.type = r->icmp.code = -1;
    return r;
}

static void note_icmp(nf_events *nf, const rg_call *c)
{
    if (!rg_nf_icmp_kind(&nf->base, &nf->icmp, c)) return;
    ev_flow *r = flow_of(nf, c->flow);
    if (r) rg_nf_icmp_note(&nf->base, &nf->icmp, c, &r->icmp, &r->ep);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    (void)dir;
    (void)len;
    nf_events *nf = self;
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    ev_flow *r = l && l->bidir ? flow_of(nf, f) : NULL;
    if (r) r->last_ts = ts_ns;
}

static void on_call(void *self, const rg_call *c)
{
    nf_events *nf = self;
    note_icmp(nf, c);
    const rg_stack_desc *s = nf->base.stack;
    const rg_handler_desc *h = c->handler < s->nhandlers ? &s->handlers[c->handler] : NULL;
    const rg_layer_desc *l = rg_nf_layer(s, c->layer);
    FILE *out = nf->out;
    fprintf(out, "{\"pkt\":%" PRIu64 ",\"ts\":%" PRIu64 ",\"handler\":", c->pkt_no, c->ts_ns);
    rg_json_string(out, h ? h->name : NULL);
    fputs(",\"layer\":", out);
    rg_json_string(out, l ? l->name : NULL);
    if (c->flow)
        fprintf(out, ",\"flow\":%" PRIu64, c->flow->uid);
    else
        fputs(",\"flow\":null", out);
    fprintf(out, ",\"dir\":\"%s\"", c->dir ? "s2c" : "c2s");
    /* a lifecycle handler's call: why its instance ended */
    if (c->end) fprintf(out, ",\"end\":\"%s\"", rg_close_name(RG_END_REASON(c->end)));
    fputs(",\"args\":{", out);
    for (unsigned i = 0; h && i < h->nargs; i++) {
        if (i) putc(',', out);
        rg_json_string(out, h->arg_names[i]);
        putc(':', out);
        if (c->args[i].kind == RG_VAL_BYTES)
            put_bytes(out, &c->args[i].bytes);
        else
            fprintf(out, "%" PRIu64, c->args[i].num);
    }
    fputs("}}\n", out);
}

/* gap recovery: {"ts","event":"gap","layer","flow","dir","seq","len","at"} */
static void on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns)
{
    nf_events *nf = self;
    FILE *out = nf->out;
    fprintf(out, "{\"ts\":%" PRIu64 ",\"event\":\"gap\",\"layer\":", ts_ns);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    rg_json_string(out, l ? l->name : NULL);
    fprintf(out,
            ",\"flow\":%" PRIu64 ",\"dir\":\"%s\",\"seq\":%" PRIu32 ",\"len\":%" PRIu32
            ",\"at\":%" PRIu32 "}\n",
            f->uid, dir ? "s2c" : "c2s", seq, len, at);
}

/* the clock guard: {"pkt","ts","event":"clock_jump","pkt_ts","dir"}; ts is the flow clock the
 * packet was processed at, pkt_ts its own timestamp; a re-synchronisation adds "resync":true,
 * pkt_ts then the new time base's first timestamp */
static void on_clock_jump(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                          int fwd)
{
    nf_events *nf = self;
    fprintf(nf->out,
            "{\"pkt\":%" PRIu64 ",\"ts\":%" PRIu64 ",\"event\":\"clock_jump\",\"pkt_ts\":%" PRIu64
            ",\"dir\":\"%s\"%s}\n",
            pkt_no, clock_ns, pkt_ts_ns, fwd & 1 ? "forward" : "backward",
            fwd & RG_CLOCK_EV_RESYNC ? ",\"resync\":true" : "");
}

/* memcaps: {"ts","event":"memcap","layer","flow"(null: a new instance was asked for),
 * "policy","asked","flow_state"(what the policy did to the flow: "dropped", "bypassed", null)} */
static void on_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                      uint64_t ts_ns)
{
    nf_events *nf = self;
    FILE *out = nf->out;
    fprintf(out, "{\"ts\":%" PRIu64 ",\"event\":\"memcap\",\"layer\":", ts_ns);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, (uint16_t)layer);
    rg_json_string(out, l ? l->name : NULL);
    if (f)
        fprintf(out, ",\"flow\":%" PRIu64, f->uid);
    else
        fputs(",\"flow\":null", out);
    fprintf(out, ",\"policy\":\"%s\",\"asked\":%" PRIu64 ",\"flow_state\":%s}\n",
            rg_memcap_policy_name(policy), asked,
            !f                                      ? "null"
            : (f->memcap & RG_FLOW_MEMCAP_DROPPED)  ? "\"dropped\""
            : (f->memcap & RG_FLOW_MEMCAP_BYPASSED) ? "\"bypassed\""
                                                    : "null");
}

/* evasion: {"ts","event":"overlap","layer","flow","dir","seq","len","new_bytes","won",
 * "old_len","new_len","policy"}: len differing bytes from seq; won: "old", "new" or "both"
 * (new_bytes of them hold the new copy), the policy's choice; old_len and new_len: both
 * versions' lengths (rg_obs.on_overlap); policy: the overlap policy that chose */
static void on_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                       uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                       uint64_t ts_ns)
{
    nf_events *nf = self;
    FILE *out = nf->out;
    fprintf(out, "{\"ts\":%" PRIu64 ",\"event\":\"overlap\",\"layer\":", ts_ns);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    rg_json_string(out, l ? l->name : NULL);
    fprintf(out,
            ",\"flow\":%" PRIu64 ",\"dir\":\"%s\",\"seq\":%" PRIu32 ",\"len\":%" PRIu32
            ",\"new_bytes\":%" PRIu32 ",\"won\":\"%s\",\"old_len\":%" PRIu32 ",\"new_len\":%" PRIu32
            ",\"policy\":\"%s\"}\n",
            f->uid, dir ? "s2c" : "c2s", seq, len, new_bytes,
            new_bytes == 0     ? "old"
            : new_bytes >= len ? "new"
                               : "both",
            old_len, new_len, rg_seq_policy_name(policy));
}

/* a flow's end (ts: its last packet's own time):
 * {"ts","event":"close","layer","proto","flow","src","dst","sport","dport",
 * "community_id","state","close","complete", then "reason", "late_packets", the record fields
 * (rg_nf_end_fields) and the ICMP fields (rg_nf_icmp_json)}.  Only the instances of layers
 * with two sides (flows); a unidirectional layer's (an IP datagram's) are no flows. */
static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    nf_events *nf = self;
    ev_flow *r = rg_nf_map_del(&nf->flows, f->uid);
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f->layer);
    if (!l || !l->bidir) {
        free_flow(r);
        return;
    }
    rg_nf_endpoints ep;
    if (r)
        ep = r->ep; /* with the ICMP Community ID */
    else
        rg_nf_endpoints_of(l, f, &ep);
    FILE *out = nf->out;
    fprintf(out, "{\"ts\":%" PRIu64 ",\"event\":\"close\",\"layer\":",
            r && r->last_ts ? r->last_ts : ts_ns);
    rg_json_string(out, l->name);
    fputs(",\"proto\":", out);
    rg_json_string(out, l->protocol);
    fprintf(out, ",\"flow\":%" PRIu64, f->uid);
    rg_nf_json_endpoints(out, &ep);
    fputs(",\"state\":", out);
    rg_json_string(out, l->has_psm && f->state < l->nstates ? l->states[f->state] : NULL);
    char end[512];
    rg_nf_end_fields(end, sizeof end, nf->base.stack, f, reason);
    fprintf(out, ",\"close\":\"%s\",\"complete\":%s%s", rg_close_name(reason),
            l->has_psm ? (complete ? "true" : "false") : "null", end);
    if (r) rg_nf_icmp_json(out, &r->icmp);
    fputs("}\n", out);
    free_flow(r);
}

static void drop_flow(void *self, void *r)
{
    (void)self;
    free_flow(r);
}

static int finish(rg_nf *base)
{
    nf_events *nf = (nf_events *)base;
    rg_nf_map_drain(&nf->flows, drop_flow, nf); /* frees the map */
    rg_nf_icmp_cls_free(&nf->icmp);
    rg_nf_close_out(base, nf->out, "events.jsonl");
    return RG_OK;
}

rg_nf *rg_nf_events_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    if (rg_mkdirs(outdir, err, errlen)) return NULL;
    nf_events *nf = calloc(1, sizeof *nf);
    if (!nf) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->out = rg_nf_open_out(outdir, "events.jsonl", err, errlen);
    if (!nf->out) {
        free(nf);
        return NULL;
    }
    nf->base.obs.on_call = on_call;
    nf->base.obs.on_close = on_close;
    nf->base.obs.on_packet = on_packet;
    nf->base.obs.on_gap = on_gap;
    nf->base.obs.on_clock_jump = on_clock_jump;
    nf->base.obs.on_memcap = on_memcap;
    nf->base.obs.on_overlap = on_overlap;
    nf->base.finish = finish;
    return &nf->base;
}
