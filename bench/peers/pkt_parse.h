/* pkt_parse.h - the hand-written header parse of the physical-bound peers
 * (parse_only, parse_hash).
 *
 * Ethernet (up to two 802.1Q / 802.1ad tags) -> IPv4 -> TCP, every read
 * bounds-checked against caplen.  An IPv4 UDP datagram to or from port 2152
 * carrying a GTP-U G-PDU (message type 255) is decapsulated (GTPv1 header,
 * optional sequence / N-PDU / extension headers) and its inner IPv4 -> TCP
 * parsed the same way, so workload (e) has a bound too.  IP fragments,
 * IPv6 and anything else are not TCP segments here (counted as "other").
 *
 * No state, no reassembly, no checksums: the least work any TCP stack must do
 * per frame. */
#ifndef BENCH_PKT_PARSE_H
#define BENCH_PKT_PARSE_H

#include <stdint.h>
#include <string.h>

typedef struct pkt_tcp {
    uint32_t saddr, daddr; /* network byte order, as in the packet */
    uint16_t sport, dport; /* network byte order */
    uint32_t payload_len;  /* TCP payload bytes (IP total length minus headers) */
    uint8_t flags;         /* TCP flags byte */
} pkt_tcp;

static inline uint16_t pp_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t pp_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* IPv4 -> TCP at p (len bytes).  1 = a TCP segment in *t; 0 = not one. */
static inline int pp_ipv4_tcp(const uint8_t *p, uint32_t len, pkt_tcp *t, int depth);

/* GTP-U payload of a UDP datagram: the inner IPv4 -> TCP. */
static inline int pp_gtpu(const uint8_t *p, uint32_t len, pkt_tcp *t, int depth)
{
    if (len < 8) return 0;
    uint8_t fl = p[0];
    if ((fl >> 5) != 1 || !(fl & 0x10) || p[1] != 255) return 0; /* GTPv1, PT=1, G-PDU */
    uint32_t glen = pp_be16(p + 2);                              /* bytes after the 8 */
    if (glen > len - 8) return 0;
    uint32_t off = 8, end = 8 + glen;
    if (fl & 0x07) { /* E, S or PN: the 4 optional bytes are present */
        if (end < 12) return 0;
        uint8_t next = p[11];
        off = 12;
        while (next) { /* extension headers: length in 4-byte units, next type last */
            if (off >= end) return 0;
            uint32_t elen = (uint32_t)p[off] * 4;
            if (!elen || elen > end - off) return 0;
            next = p[off + elen - 1];
            off += elen;
        }
    }
    if (off >= end || (p[off] >> 4) != 4) return 0;
    return pp_ipv4_tcp(p + off, end - off, t, depth + 1);
}

static inline int pp_ipv4_tcp(const uint8_t *p, uint32_t len, pkt_tcp *t, int depth)
{
    if (len < 20 || (p[0] >> 4) != 4) return 0;
    uint32_t ihl = (uint32_t)(p[0] & 15) * 4;
    uint32_t tot = pp_be16(p + 2);
    if (ihl < 20 || tot < ihl || tot > len) return 0;
    if (pp_be16(p + 6) & 0x3fff) return 0; /* a fragment (MF or an offset) */
    const uint8_t *l4 = p + ihl;
    uint32_t l4len = tot - ihl;
    if (p[9] == 6) {
        if (l4len < 20) return 0;
        uint32_t doff = (uint32_t)(l4[12] >> 4) * 4;
        if (doff < 20 || doff > l4len) return 0;
        t->saddr = pp_u32(p + 12);
        t->daddr = pp_u32(p + 16);
        memcpy(&t->sport, l4, 2);
        memcpy(&t->dport, l4 + 2, 2);
        t->payload_len = l4len - doff;
        t->flags = l4[13];
        return 1;
    }
    if (p[9] == 17 && depth == 0 && l4len >= 8) {
        uint16_t sp = pp_be16(l4), dp = pp_be16(l4 + 2);
        uint32_t ulen = pp_be16(l4 + 4);
        if ((sp == 2152 || dp == 2152) && ulen >= 8 && ulen <= l4len)
            return pp_gtpu(l4 + 8, ulen - 8, t, depth);
    }
    return 0;
}

/* A whole Ethernet frame. */
static inline int pp_ether_tcp(const uint8_t *p, uint32_t caplen, pkt_tcp *t)
{
    if (caplen < 14) return 0;
    uint32_t off = 12;
    uint16_t et = pp_be16(p + off);
    for (int tags = 0; (et == 0x8100 || et == 0x88a8) && tags < 2; tags++) {
        off += 4;
        if (caplen < off + 2) return 0;
        et = pp_be16(p + off);
    }
    off += 2;
    if (et != 0x0800) return 0;
    return pp_ipv4_tcp(p + off, caplen - off, t, 0);
}

#endif /* BENCH_PKT_PARSE_H */
