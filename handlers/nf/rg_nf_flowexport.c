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
 *    5 lack of resources), "layer", "closeReason" (the runtime's name of it),
 *    "community_id" (Community ID v1, rg_nf.h), then how it ended as flowstats writes it
 *    (rg_nf_end_fields): "reason", "late_packets" and the layer's record fields (TCP:
 *    "originator", "conn_state", "history"), and "icmp_errors" when ICMP errors quoted the
 *    flow's datagrams}
 * The source is the side that created the instance.  Octets are the transport layer's bytes
 * (its header and payload, what the layer parsed), not IPFIX's IP-level octetDeltaCount:
 * the NF sees the transport layer, whose instance outlives the IP datagrams.  A flow still open
 * when the run ends (no flush) is written with flowEndReason 4 and closeReason "open". */
#include "rg_nf_int.h"

#include <inttypes.h>
#include <string.h>

static void write_flow(rg_nf_flows *nf, const rg_nf_flowrec *r, int reason, const char *close,
                       const char *end)
{
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, r->layer);
    FILE *out = nf->out;
    int pn = rg_nf_proto_number(l ? l->protocol : NULL);
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
            ",\"reversePacketDeltaCount\":%" PRIu64 ",\"reverseTransportOctetDeltaCount\":%" PRIu64
            ",\"flowEndReason\":%d,\"layer\":",
            r->first_ts, r->last_ts, r->packets[0], r->bytes[0], r->packets[1], r->bytes[1],
            reason);
    rg_json_string(out, l ? l->name : NULL);
    fprintf(out, ",\"closeReason\":\"%s\",\"community_id\":", close);
    rg_json_string(out, r->ep.community_id[0] ? r->ep.community_id : NULL);
    fputs(end, out);
    rg_nf_icmp_json(out, &r->icmp);
    fputs("}\n", out);
}

static void write_rec(rg_nf_flows *nf, const rg_nf_flowrec *r, const rg_flow_info *f, int reason,
                      int complete)
{
    (void)complete;
    if (!rg_nf_is_transport(r)) return;
    if (f) {
        char end[512];
        rg_nf_end_fields(end, sizeof end, nf->base.stack, f, reason);
        write_flow(nf, r, rg_nf_end_reason(reason), rg_close_name(reason), end);
    } else { /* still open when the run ended: a forced end */
        write_flow(nf, r, 4, "open", "");
    }
}

rg_nf *rg_nf_flowexport_new(const rg_stack_desc *stack, const char *outdir, char *err,
                            size_t errlen)
{
    (void)stack;
    rg_nf_flows *nf =
        rg_nf_flows_new(sizeof(rg_nf_flows), outdir, "flows.ipfix.jsonl", write_rec, err, errlen);
    return nf ? &nf->base : NULL;
}
