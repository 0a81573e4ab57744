/* rg_nf_flowexport.c - the "flowexport" NF: IPFIX-like bidirectional flow records (RFC 7011
 * information elements, RFC 5103 reverse counters) as JSON lines, one per transport instance
 * (a layer whose key has both ports: TCP, UDP, SCTP...) when it ends.
 *
 * OUT/flows.ipfix.jsonl, one line per flow:
 *   {"sourceIPAddress","destinationIPAddress","sourceTransportPort","destinationTransportPort",
 *    "protocolIdentifier" (6 tcp, 17 udp, 132 sctp; null for another protocol),
 *    "flowStartNanoseconds","flowEndNanoseconds" (packet time of the first and last packet),
 *    "packetDeltaCount","transportOctetDeltaCount" (initiator -> responder),
 *    "reversePacketDeltaCount","reverseTransportOctetDeltaCount" (responder -> initiator),
 *    "flowEndReason" (RFC 7012 5.11.3: 1 idle timeout, 3 end of flow detected, 4 forced end,
 *    5 lack of resources), "layer", "closeReason" (the runtime's name of it)}
 * The source is the side that created the instance.  Octets are the transport layer's bytes
 * (its header and payload, what the layer parsed), not IPFIX's IP-level octetDeltaCount:
 * the NF sees the transport layer, whose instance outlives the IP datagrams.  A flow still open
 * when the run ends (no flush) is written with flowEndReason 4 and closeReason "open". */
#include "rg_nf_int.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx_flow {
    uint16_t layer;
    uint64_t packets[2], octets[2];
    uint64_t start, end;
    rg_nf_endpoints ep; /* read at open: the keys are gone after on_close */
} fx_flow;

typedef struct nf_flowexport {
    rg_nf base;
    FILE *out;
    rg_nf_map flows; /* uid -> fx_flow */
} nf_flowexport;

static int proto_number(const char *p)
{
    if (!p) return -1;
    if (!strcmp(p, "tcp")) return 6;
    if (!strcmp(p, "udp")) return 17;
    if (!strcmp(p, "sctp")) return 132;
    return -1;
}

/* RFC 7012 flowEndReason for a close reason */
static int end_reason(int reason)
{
    switch (reason) {
    case RG_CLOSE_EXPIRED: return 1; /* idle timeout */
    case RG_CLOSE_ACCEPT: return 3;  /* end of flow detected (FIN, RST, PSM accept) */
    case RG_CLOSE_EVICTED: return 5; /* lack of resources (instance cap) */
    default: return 4;               /* forced end: end of capture, shutdown */
    }
}

static fx_flow *flow_of(nf_flowexport *nf, const rg_flow_info *f, uint64_t ts_ns)
{
    int created;
    fx_flow *r =
        rg_nf_flow_of(&nf->base, &nf->flows, f, sizeof *r, offsetof(fx_flow, ep), &created);
    if (r && created) {
        r->layer = f->layer;
        r->start = r->end = ts_ns;
    }
    return r;
}

/* whether the layer's instances are transport flows: both ports in the key */
static int is_transport(const fx_flow *r)
{
    return r->ep.has_sport && r->ep.has_dport && r->ep.src[0] && r->ep.dst[0];
}

static void write_flow(nf_flowexport *nf, const fx_flow *r, int reason, const char *close)
{
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, r->layer);
    FILE *out = nf->out;
    int pn = proto_number(l ? l->protocol : NULL);
    fprintf(out,
            "{\"sourceIPAddress\":\"%s\",\"destinationIPAddress\":\"%s\","
            "\"sourceTransportPort\":%u,\"destinationTransportPort\":%u,\"protocolIdentifier\":",
            r->ep.src, r->ep.dst, (unsigned)r->ep.sport, (unsigned)r->ep.dport);
    if (pn < 0)
        fputs("null", out);
    else
        fprintf(out, "%d", pn);
    fprintf(out,
            ",\"flowStartNanoseconds\":%" PRIu64 ",\"flowEndNanoseconds\":%" PRIu64
            ",\"packetDeltaCount\":%" PRIu64 ",\"transportOctetDeltaCount\":%" PRIu64
            ",\"reversePacketDeltaCount\":%" PRIu64
            ",\"reverseTransportOctetDeltaCount\":%" PRIu64 ",\"flowEndReason\":%d,\"layer\":",
            r->start, r->end, r->packets[0], r->octets[0], r->packets[1], r->octets[1], reason);
    rg_json_string(out, l ? l->name : NULL);
    fprintf(out, ",\"closeReason\":\"%s\"}\n", close);
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    flow_of(self, f, ts_ns);
}

static void on_packet(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns)
{
    fx_flow *r = flow_of(self, f, ts_ns);
    if (!r) return;
    r->packets[dir != 0]++;
    r->octets[dir != 0] += len;
    r->end = ts_ns;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)complete;
    nf_flowexport *nf = self;
    fx_flow *r = flow_of(nf, f, ts_ns);
    if (!r) return;
    if (is_transport(r)) write_flow(nf, r, end_reason(reason), rg_close_name(reason));
    free(rg_nf_map_del(&nf->flows, f->uid));
}

static void write_open(void *self, void *v)
{
    fx_flow *r = v;
    if (is_transport(r)) write_flow(self, r, 4, "open");
    free(r);
}

static int finish(rg_nf *base)
{
    nf_flowexport *nf = (nf_flowexport *)base;
    rg_nf_map_drain(&nf->flows, write_open, nf);
    rg_nf_close_out(base, nf->out, "flows.ipfix.jsonl");
    return RG_OK;
}

rg_nf *rg_nf_flowexport_new(const rg_stack_desc *stack, const char *outdir, char *err,
                            size_t errlen)
{
    (void)stack;
    if (rg_nf_mkdirs(outdir, err, errlen)) return NULL;
    nf_flowexport *nf = calloc(1, sizeof *nf);
    if (!nf || rg_nf_map_init(&nf->flows)) {
        free(nf);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    nf->out = rg_nf_open_out(outdir, "flows.ipfix.jsonl", err, errlen);
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
