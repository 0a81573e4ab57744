/* rg_nf_eve.c - the "eve" NF: Suricata's EVE JSON output, OUT/eve.json, one object per line in
 * Suricata's field names (its published schema, etc/schema.json, validates every line):
 *
 *   one per ended flow (a transport instance, TCP, UDP, SCTP, or an ICMP conversation):
 *     {"timestamp","flow_id","event_type":"flow","src_ip","src_port","dest_ip","dest_port",
 *      "proto": "TCP"|"UDP"|"SCTP"|"ICMP"|"IPv6-ICMP", ["icmp_type","icmp_code",]
 *      "community_id","flow":{"pkts_toserver","pkts_toclient","bytes_toserver",
 *      "bytes_toclient","start","end","age","state","reason","alerted": false}}
 *   one per reassembly gap, overlap with differing bytes, memcap hit and clock jump (the
 *   events NF's built-in events), as Suricata's anomaly events:
 *     {"timestamp","flow_id"?,"event_type":"anomaly","src_ip"?,...,"proto"?,"community_id"?,
 *      "anomaly":{"type","event","layer"}}
 *
 * src is the client: the SYN sender when the handshake was seen (rg_nf_client_side), else the
 * sender of the flow's first packet; toserver counts what the client sent.  Times are packet
 * times as Suricata writes them: ISO 8601, microseconds, "+0000" (UTC).  flow_id is the
 * instance's uid (unique in the run, with --workers too: rg_uid_global in the driver).  The
 * mapping of states, reasons and anomaly events is in docs/operating.md
 * ("EVE output"). */
#include "rg_nf_int.h"

#include <inttypes.h>
#include <string.h>
#include <time.h>

static uint64_t flow_id(const rg_nf_flows *nf, uint64_t uid)
{
    (void)nf;
    return uid;
}

/* Suricata's "proto" of a layer's protocol, NULL: no EVE flow (an IP datagram, ARP...) */
static const char *eve_proto(const rg_layer_desc *l)
{
    static const char *const names[][2] = {{"tcp", "TCP"},
                                           {"udp", "UDP"},
                                           {"sctp", "SCTP"},
                                           {"icmp", "ICMP"},
                                           {"icmpv6", "IPv6-ICMP"}};
    for (size_t i = 0; l && l->protocol && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(l->protocol, names[i][0])) return names[i][1];
    return NULL;
}

/* A packet time as Suricata writes it: 2024-05-01T12:00:00.123456+0000 */
static void eve_time(char *buf, size_t n, uint64_t ts_ns)
{
    time_t sec = (time_t)(ts_ns / 1000000000u);
    struct tm tm;
    if (!gmtime_r(&sec, &tm)) memset(&tm, 0, sizeof tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%06u+0000", day, (unsigned)(ts_ns % 1000000000u / 1000u));
}

/* "timestamp", "flow_id" (uid 0: none) and "event_type": the members every line starts with */
static void eve_head(FILE *out, uint64_t ts_ns, uint64_t uid, const char *type)
{
    char ts[48];
    eve_time(ts, sizeof ts, ts_ns);
    fprintf(out, "{\"timestamp\":\"%s\"", ts);
    if (uid) fprintf(out, ",\"flow_id\":%" PRIu64, uid);
    fprintf(out, ",\"event_type\":\"%s\"", type);
}

/* "src_ip", "src_port", "dest_ip", "dest_port", "proto", "community_id": those present */
static void eve_endpoints(FILE *out, const rg_nf_endpoints *ep, const char *proto)
{
    if (ep->src[0]) fprintf(out, ",\"src_ip\":\"%s\"", ep->src);
    if (ep->has_sport) fprintf(out, ",\"src_port\":%u", (unsigned)ep->sport);
    if (ep->dst[0]) fprintf(out, ",\"dest_ip\":\"%s\"", ep->dst);
    if (ep->has_dport) fprintf(out, ",\"dest_port\":%u", (unsigned)ep->dport);
    if (proto) fprintf(out, ",\"proto\":\"%s\"", proto);
}

/* Suricata's flow.state: "closed" (the PSM reached accept: FIN, RST), "established" (both
 * sides sent), "new" (one side only) */
static const char *eve_state(const rg_nf_flowrec *r, int reason)
{
    if (reason == RG_CLOSE_ACCEPT) return "closed";
    return r->packets[0] && r->packets[1] ? "established" : "new";
}

/* Suricata's flow.reason: "timeout" (it ends its flows when they time out, closed ones too),
 * "forced" (evicted for room), "shutdown" (still open when the run ended) */
static const char *eve_reason(int reason, int open)
{
    if (open || reason == RG_CLOSE_FLUSHED) return "shutdown";
    return reason == RG_CLOSE_EVICTED ? "forced" : "timeout";
}

/* The flow event of r (client: rg_nf_client_side; open: never closed) */
static void eve_flow_json(FILE *out, const rg_nf_flowrec *r, uint64_t id, const char *proto,
                          int client, int reason, int open)
{
    rg_nf_endpoints ep;
    if (client)
        rg_nf_endpoints_reverse(&r->ep, &ep);
    else
        ep = r->ep;
    const int s = client != 0; /* the direction the client sent */
    eve_head(out, r->last_ts, id, "flow");
    eve_endpoints(out, &ep, proto);
    if (r->icmp.type >= 0)
        fprintf(out, ",\"icmp_type\":%d,\"icmp_code\":%d", r->icmp.type, r->icmp.code);
    if (ep.community_id[0]) fprintf(out, ",\"community_id\":\"%s\"", ep.community_id);
    char start[48], end[48];
    eve_time(start, sizeof start, r->first_ts);
    eve_time(end, sizeof end, r->last_ts);
    fprintf(out,
            ",\"flow\":{\"pkts_toserver\":%" PRIu64 ",\"pkts_toclient\":%" PRIu64
            ",\"bytes_toserver\":%" PRIu64 ",\"bytes_toclient\":%" PRIu64
            ",\"start\":\"%s\",\"end\":\"%s\",\"age\":%" PRIu64
            ",\"state\":\"%s\",\"reason\":\"%s\",\"alerted\":false}}\n",
            r->packets[s], r->packets[!s], r->bytes[s], r->bytes[!s], start, end,
            (r->last_ts - r->first_ts) / 1000000000u, open ? "established" : eve_state(r, reason),
            eve_reason(reason, open));
}

/* An anomaly event of instance f (NULL: none) seen in direction dir: its endpoints are the
 * packet's sender and receiver. */
static void eve_anomaly_json(FILE *out, const rg_nf_flows *nf, const rg_flow_info *f, int dir,
                             uint64_t ts_ns, const char *type, const char *event, unsigned layer)
{
    const rg_layer_desc *l = rg_nf_layer(nf->base.stack, f ? f->layer : layer);
    const rg_nf_flowrec *r = f ? rg_nf_map_get(&nf->flows, f->uid) : NULL;
    eve_head(out, ts_ns, flow_id(nf, f ? f->uid : 0), "anomaly");
    if (r) {
        rg_nf_endpoints ep;
        if (dir)
            rg_nf_endpoints_reverse(&r->ep, &ep);
        else
            ep = r->ep;
        eve_endpoints(out, &ep, eve_proto(l));
        if (ep.community_id[0]) fprintf(out, ",\"community_id\":\"%s\"", ep.community_id);
    }
    fprintf(out, ",\"anomaly\":{\"type\":\"%s\",\"event\":\"%s\"", type, event);
    if (l) {
        fputs(",\"layer\":", out);
        rg_json_string(out, l->name);
    }
    fputs("}}\n", out);
}

static void write_rec(rg_nf_flows *nf, const rg_nf_flowrec *r, const rg_flow_info *f, int reason,
                      int complete)
{
    (void)complete;
    const char *proto = eve_proto(rg_nf_layer(nf->base.stack, r->layer));
    if (!proto || !r->ep.src[0] || !r->ep.dst[0]) return;
    eve_flow_json(nf->out, r, flow_id(nf, r->uid), proto, rg_nf_client_side(nf->base.stack, f),
                  reason, f == NULL);
}

static void on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                   uint32_t at, uint64_t ts_ns)
{
    (void)seq, (void)len, (void)at;
    rg_nf_flows *nf = self;
    eve_anomaly_json(nf->out, nf, f, dir, ts_ns, "stream", "stream.reassembly_seq_gap", 0);
}

static void on_overlap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                       uint32_t new_bytes, uint32_t old_len, uint32_t new_len, int policy,
                       uint64_t ts_ns)
{
    (void)seq, (void)len, (void)new_bytes, (void)old_len, (void)new_len, (void)policy;
    rg_nf_flows *nf = self;
    eve_anomaly_json(nf->out, nf, f, dir, ts_ns, "stream",
                     "stream.reassembly_overlap_different_data", 0);
}

static void on_memcap(void *self, const rg_flow_info *f, unsigned layer, int policy, uint64_t asked,
                      uint64_t ts_ns)
{
    (void)policy, (void)asked;
    rg_nf_flows *nf = self;
    /* Suricata has no event of its own for these: the names are rubikgen's */
    eve_anomaly_json(nf->out, nf, f, 0, ts_ns, f ? "stream" : "decode",
                     f ? "rubikgen.reassembly_memcap" : "rubikgen.flow_memcap", layer);
}

static void on_clock_jump(void *self, uint64_t pkt_no, uint64_t pkt_ts_ns, uint64_t clock_ns,
                          int fwd)
{
    (void)pkt_no, (void)pkt_ts_ns;
    rg_nf_flows *nf = self;
    eve_head(nf->out, clock_ns, 0, "anomaly");
    fprintf(nf->out, ",\"anomaly\":{\"type\":\"decode\",\"event\":\"rubikgen.clock_jump_%s\"}}\n",
            fwd ? "forward" : "backward");
}

static rg_nf *eve_new(const rg_stack_desc *stack, const char *outdir, char *err, size_t errlen)
{
    (void)stack;
    rg_nf_flows *nf =
        rg_nf_flows_new(sizeof(rg_nf_flows), outdir, "eve.json", write_rec, err, errlen);
    if (!nf) return NULL;
    nf->base.obs.on_gap = on_gap;
    nf->base.obs.on_overlap = on_overlap;
    nf->base.obs.on_memcap = on_memcap;
    nf->base.obs.on_clock_jump = on_clock_jump;
    return &nf->base;
}

static void *init_eve(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                      const rg_nf_host *host, char *err, size_t errlen)
{
    return rg_nf_stock_init(eve_new, "eve", stack, cfg, ncfg, host, err, errlen);
}
static const rg_nf_abi abi_eve = {RG_NF_ABI_VERSION,
                                  sizeof(rg_nf_abi),
                                  "eve",
                                  "Suricata EVE JSON: flows and anomalies, OUT/eve.json",
                                  rg_nf_stock_subs,
                                  RG_NF_STOCK_NSUBS,
                                  0,
                                  init_eve,
                                  rg_nf_stock_fini,
                                  NULL};
const rg_nf_desc rg_nf_desc_eve = {&abi_eve, NULL, NULL, NULL};
