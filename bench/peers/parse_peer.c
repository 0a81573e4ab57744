/* parse_peer.c - the physical-bound peers.
 *
 *   parse_only  (PEER_HASH=0)  Ethernet -> IPv4 -> TCP header parse of every
 *               frame (pkt_parse.h), summing the TCP payload lengths.
 *   parse_hash  (PEER_HASH=1)  the same plus one lookup of the connection's
 *               4-tuple in the runtime's bidirectional flow table (rg_flow,
 *               the table the generated stacks use), creating the entry on a
 *               miss, and a per-flow packet/byte counter update: a plain hash
 *               lookup, without LRU touches, timers or state.
 *
 * Both take the frames in bursts (--burst N, default 32, as the generated
 * stacks): parse_hash parses a burst's frames and hashes their keys first,
 * prefetching the index slots when the table has left the cache (the rule
 * of rubikgen's stage 1, rg_flow_cold), then looks them up in order.
 *
 * "payload_bytes" is the sum of the TCP payload lengths of the frames (every
 * copy of a retransmitted segment counts): a bound's work, not a
 * reassembler's answer.  parse_hash reports the 4-tuples it created as
 * "flows_opened"; neither closes flows. */
#include <inttypes.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>

#include "peer.h"
#include "pkt_parse.h"
#include "rg/rg_flow.h"

#ifndef PEER_HASH
#define PEER_HASH 0
#endif

enum { BURST_MAX = 256 };

typedef struct parse_state {
    int ether; /* Ethernet link: pkt_parse's own fast path */
    unsigned burst;
    uint64_t tcp_pkts, other_pkts, payload;
#if PEER_HASH
    rg_flow *table;
    uint64_t created;
#endif
} parse_state;

static parse_state st;

#if PEER_HASH
enum { KEY_LEN = 12 };

typedef struct flow_rec {
    uint64_t pkts, bytes;
} flow_rec;

static uint64_t table_cap(const peer_opts *o)
{
    return o->cap ? o->cap : (uint64_t)1 << 20;
}
#endif

static int prepare(const rg_capture *cap, const peer_opts *o)
{
    (void)o;
    st.ether = cap->link.dlt == DLT_EN10MB;
    if (!st.ether && cap->link.entry == RG_ENTRY_UNKNOWN) {
        fprintf(stderr, "parse: link type %d is not supported\n", cap->link.dlt);
        return -1;
    }
    return 0;
}

static int setup(const rg_capture *cap, const peer_opts *o)
{
    (void)cap;
    st.tcp_pkts = st.other_pkts = st.payload = 0;
    st.burst = (unsigned)o->burst;
#if PEER_HASH
    rg_flow_cfg cfg = {.key_len = KEY_LEN,
                       .payload_size = sizeof(flow_rec),
                       .cap = (uint32_t)table_cap(o),
                       .bidir = 1,
                       .seed = UINT64_C(0x5eed5eed5eed5eed)};
    st.table = rg_flow_new(&cfg);
    st.created = 0;
    if (!st.table) {
        fprintf(stderr, "parse_hash: cannot create a table of %" PRIu64 " flows\n", table_cap(o));
        return -1;
    }
#else
    (void)o;
#endif
    return 0;
}

static inline int parse_frame(const rg_capture *cap, const rg_frame *f, pkt_tcp *t)
{
    if (RG_LIKELY(st.ether)) return pp_ether_tcp(f->data, f->caplen, t);
    rg_netpos np;
    if (rg_link_locate(&cap->link, f->data, f->caplen, &np) || np.proto != RG_ENTRY_IPV4 ||
        np.off > f->caplen)
        return 0;
    return pp_ipv4_tcp(f->data + np.off, f->caplen - np.off, t, 0);
}

static void run(const rg_capture *cap)
{
    for (size_t i = 0; i < cap->count; i += st.burst) {
        const unsigned n = (unsigned)(cap->count - i < st.burst ? cap->count - i : st.burst);
        pkt_tcp t[BURST_MAX];
        uint8_t ok[BURST_MAX];
#if PEER_HASH
        uint8_t key[BURST_MAX][KEY_LEN];
        uint64_t h[BURST_MAX];
        const int pf = n > 1 && rg_flow_cold(st.table);
#endif
        /* stage 1: parse the burst (and hash, prefetch) */
        for (unsigned j = 0; j < n; j++) {
            ok[j] = (uint8_t)parse_frame(cap, &cap->frames[i + j], &t[j]);
#if PEER_HASH
            if (!ok[j]) continue;
            memcpy(key[j], &t[j].saddr, 4);
            memcpy(key[j] + 4, &t[j].sport, 2);
            memcpy(key[j] + 6, &t[j].daddr, 4);
            memcpy(key[j] + 10, &t[j].dport, 2);
            h[j] = rg_hash_bytes(key[j], KEY_LEN, st.table->seed);
            if (pf) rg_flow_prefetch_h(st.table, h[j]);
#endif
        }
        /* stage 2: in order */
        for (unsigned j = 0; j < n; j++) {
            if (!ok[j]) {
                st.other_pkts++;
                continue;
            }
            st.tcp_pkts++;
            st.payload += t[j].payload_len;
#if PEER_HASH
            flow_rec *r = rg_flow_find_hn(st.table, key[j], KEY_LEN, h[j], NULL);
            if (RG_UNLIKELY(!r)) {
                uint8_t rev[KEY_LEN];
                memcpy(rev, key[j] + 6, 6);
                memcpy(rev + 6, key[j], 6);
                r = rg_flow_create_h(st.table, key[j], h[j], rev,
                                     rg_hash_bytes(rev, KEY_LEN, st.table->seed));
                st.created++;
                if (RG_UNLIKELY(!r)) continue;
            }
            r->pkts++;
            r->bytes += t[j].payload_len;
#endif
        }
    }
}

static void teardown(peer_counts *out)
{
    peer_count_set(out, "payload_bytes", st.payload);
#if PEER_HASH
    peer_count_set(out, "flows_opened", st.created);
    peer_count_set(out, "flows_closed", 0);
    peer_count_set(out, "flows_live", rg_flow_live(st.table));
    rg_flow_free(st.table);
    st.table = NULL;
#else
    peer_count_set(out, "flows_opened", 0);
    peer_count_set(out, "flows_closed", 0);
#endif
    peer_count_set(out, "tcp_pkts", st.tcp_pkts);
    peer_count_set(out, "other_pkts", st.other_pkts);
}

int main(int argc, char **argv)
{
    static const peer_ops ops = {
        .name = PEER_HASH ? "parse_hash" : "parse_only",
        .prepare = prepare,
        .setup = setup,
        .run = run,
        .teardown = teardown,
    };
    return peer_main(argc, argv, &ops);
}
