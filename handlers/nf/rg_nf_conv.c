/* rg_nf_conv.c - the "conv" NF: the conversation table of the transport layers, as tshark's
 * `-z conv,tcp` / `-z conv,udp` give it, one JSON line per transport instance (a layer whose
 * key has both ports: TCP, UDP, SCTP...) when it ends.
 *
 * OUT/conv.jsonl, one line per conversation:
 *   {"uid", "layer", "proto" (the layer's protocol), "a": [address, port] (the side that
 *    created the instance), "b": [address, port], "frames_ab", "frames_ba" (the packets of
 *    each direction), "bytes_ab", "bytes_ba" (the transport layer's bytes: its header and
 *    payload), "start_ns" (packet time of its first packet), "duration_ns" (to its last)}
 * tshark's rows are the same conversations (A <-> B, "->" is A to B); its bytes are the
 * frames' and its start is relative to the first frame of the capture. */
#include "rg_nf_int.h"

#include <inttypes.h>

static void write_rec(rg_nf_flows *nf, const rg_nf_flowrec *r, const rg_flow_info *f, int reason,
                      int complete)
{
    (void)f, (void)reason, (void)complete;
    if (!r->ep.has_sport || !r->ep.has_dport || !r->ep.src[0] || !r->ep.dst[0]) return;
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, r->layer);
    FILE *out = nf->out;
    fprintf(out, "{\"uid\":%" PRIu64 ",\"layer\":", r->uid);
    rg_json_string(out, l ? l->name : NULL);
    fputs(",\"proto\":", out);
    rg_json_string(out, l ? l->protocol : NULL);
    fprintf(out,
            ",\"a\":[\"%s\",%u],\"b\":[\"%s\",%u],\"frames_ab\":%" PRIu64 ",\"frames_ba\":%" PRIu64
            ",\"bytes_ab\":%" PRIu64 ",\"bytes_ba\":%" PRIu64 ",\"start_ns\":%" PRIu64
            ",\"duration_ns\":%" PRIu64 "}\n",
            r->ep.src, (unsigned)r->ep.sport, r->ep.dst, (unsigned)r->ep.dport, r->packets[0],
            r->packets[1], r->bytes[0], r->bytes[1], r->first_ts, r->last_ts - r->first_ts);
}

static rg_nf *conv_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    rg_nf_flows *nf =
        rg_nf_flows_new(sizeof(rg_nf_flows), outdir, "conv.jsonl", write_rec, err, errlen);
    return nf ? &nf->base : NULL;
}

RG_STOCK_NF(conv, conv_new, "tshark's conversation table of TCP, UDP...: OUT/conv.jsonl");
