/* rg_nf_flows.c - what the flow-record NFs (flowstats, flowexport) share: a record per
 * instance with its packets, bytes and first/last time per direction, kept from its first
 * sighting until it closes, when the NF writes its line; those still open at the end are
 * written by finish, in uid order (rg_nf_int.h). */
#include "rg_nf_int.h"

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
        r->icmp.type = r->icmp.code = -1;
    }
    return r;
}

static void free_rec(rg_nf_flowrec *r)
{
    if (r) free(r->icmp.errors);
    free(r);
}

static void on_call(void *self, const rg_call *c)
{
    rg_nf_flows *nf = self;
    if (!rg_nf_icmp_kind(&nf->base, &nf->icmp, c)) return;
    rg_nf_flowrec *r = flow_of(nf, c->flow, c->ts_ns);
    if (r) rg_nf_icmp_note(&nf->base, &nf->icmp, c, &r->icmp, &r->ep);
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
    rg_nf_icmp_cls_free(&nf->icmp);
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
    nf->out = file ? rg_nf_open_out(outdir, file, err, errlen) : NULL;
    if (file && !nf->out) {
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

int rg_nf_proto_number(const char *p)
{
    if (!p) return -1;
    if (!strcmp(p, "tcp")) return 6;
    if (!strcmp(p, "udp")) return 17;
    if (!strcmp(p, "sctp")) return 132;
    return -1;
}

int rg_nf_end_reason(int reason)
{
    switch (reason) {
    case RG_CLOSE_EXPIRED:
        return 1; /* idle timeout */
    case RG_CLOSE_ACCEPT:
        return 3; /* end of flow detected (FIN, RST, PSM accept) */
    case RG_CLOSE_EVICTED:
        return 5; /* lack of resources (instance cap) */
    default:
        return 4; /* forced end: end of capture, shutdown */
    }
}

int rg_nf_is_transport(const rg_nf_flowrec *r)
{
    return r->ep.has_sport && r->ep.has_dport && r->ep.src[0] && r->ep.dst[0];
}

int rg_nf_client_side(const rg_stack_desc *stack, const rg_flow_info *f)
{
    const rg_layer_desc *l = f ? rg_nf_layer(stack, f->layer) : NULL;
    int orig = -1, handshake = 0;
    for (uint16_t i = 0; l && i < l->nrec && i < RG_REC_MAX; i++) {
        const rg_recfield *k = &l->rec[i];
        if (!strcmp(k->name, "originator") && f->rec[i] <= 1) orig = (int)f->rec[i];
        /* a SYN (S, s) or SYN-ACK (H, h) in the history letters: the originator is known */
        for (uint64_t v = f->rec[i]; k->letters && (v & 15u); v >>= 4) {
            const uint64_t c = v & 15u;
            if (c <= strlen(k->letters) && strchr("SHsh", k->letters[c - 1])) handshake = 1;
        }
    }
    return orig >= 0 && handshake ? orig : 0;
}
