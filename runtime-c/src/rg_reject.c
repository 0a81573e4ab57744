/* rg_reject.c - the replies that reject a packet (rg_reject.h). */
#include "rg/rg_reject.h"

#include <string.h>

#include "rg/rg_pcap.h"

#define NS_PER_S 1000000000ull

static uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void st32(uint8_t *p, uint32_t v)
{
    st16(p, (uint16_t)(v >> 16));
    st16(p + 2, (uint16_t)v);
}

/* one's complement sum of 16-bit words (RFC 1071), an odd last byte padded with zero */
static uint32_t sum16(const uint8_t *p, uint32_t n, uint32_t acc)
{
    for (uint32_t i = 0; i + 1 < n; i += 2)
        acc += ld16(p + i);
    if (n & 1) acc += (uint32_t)p[n - 1] << 8;
    while (acc >> 16)
        acc = (acc & 0xffffu) + (acc >> 16);
    return acc;
}

static uint16_t fold(uint32_t acc)
{
    while (acc >> 16)
        acc = (acc & 0xffffu) + (acc >> 16);
    return (uint16_t)~acc;
}

/* What the offending packet is, as far as the replies need it. */
typedef struct pkt {
    const uint8_t *ip; /* the network header */
    uint32_t iplen;    /* bytes of the datagram available: min(its length, captured) */
    int v6;
    uint32_t l4off; /* offset of the upper-layer header from ip */
    uint8_t proto;  /* upper-layer protocol */
    int first_frag; /* offset 0, more fragments follow */
    uint32_t l4len; /* upper-layer bytes the header says (not just those captured) */
} pkt;

/* A single host: not 0/8 ("this network"), 224/4 (multicast), 240/4 and the limited
 * broadcast; loopback (127/8) only when loop (RFC 1122 3.2.2 sends no ICMP error about it; a
 * RST on a loopback connection is an ordinary RST) */
static int v4_unicast(const uint8_t *a, int loop)
{
    return a[0] != 0 && (loop || a[0] != 127) && a[0] < 224;
}

static int v6_unicast(const uint8_t *a, int loop)
{
    static const uint8_t zero[16], one[16] = {[15] = 1};
    return a[0] != 0xff && memcmp(a, zero, 16) != 0 && (loop || memcmp(a, one, 16) != 0);
}

/* Parse the IP datagram at ip (cap bytes captured).  0 or an rg_reject_why. */
static int parse_ip(const uint8_t *ip, uint32_t cap, int v6, pkt *k)
{
    memset(k, 0, sizeof *k);
    k->ip = ip;
    k->v6 = v6;
    if (!v6) {
        if (cap < 20 || ip[0] >> 4 != 4) return RG_REJECT_CUT;
        uint32_t hl = (uint32_t)(ip[0] & 15) * 4u, tot = ld16(ip + 2);
        if (hl < 20 || tot < hl || cap < hl) return RG_REJECT_CUT;
        const int loop = ip[9] == 6;
        if (!v4_unicast(ip + 12, loop) || !v4_unicast(ip + 16, loop)) return RG_REJECT_NO_ERROR;
        uint16_t frag = ld16(ip + 6);
        if (frag & 0x1fff) return RG_REJECT_NO_ERROR; /* a non-initial fragment */
        k->first_frag = (frag & 0x2000) != 0;
        k->iplen = tot < cap ? tot : cap;
        k->l4off = hl;
        k->proto = ip[9];
        k->l4len = tot - hl;
        return 0;
    }
    if (cap < 40 || ip[0] >> 4 != 6) return RG_REJECT_CUT;
    /* loopback checked once the upper layer is known */
    if (!v6_unicast(ip + 8, 1) || !v6_unicast(ip + 24, 1)) return RG_REJECT_NO_ERROR;
    uint32_t plen = ld16(ip + 4);
    /* a jumbogram (payload length 0, RFC 2675) counts what was captured */
    uint32_t tot = plen ? 40u + plen : cap;
    k->iplen = tot < cap ? tot : cap;
    uint8_t nh = ip[6];
    uint32_t off = 40;
    for (int hops = 0; hops < 16; hops++) {
        if (nh != 0 && nh != 43 && nh != 60 && nh != 44 && nh != 51) break;
        if (off + 8 > k->iplen) return RG_REJECT_CUT;
        if (nh == 44) { /* fragment */
            uint16_t fo = ld16(ip + off + 2);
            if (fo & 0xfff8) return RG_REJECT_NO_ERROR;
            k->first_frag = (fo & 1) != 0;
            nh = ip[off];
            off += 8;
            continue;
        }
        uint32_t len =
            nh == 51 ? ((uint32_t)ip[off + 1] + 2u) * 4u : ((uint32_t)ip[off + 1] + 1u) * 8u;
        nh = ip[off];
        off += len;
    }
    if (nh == 0 || nh == 43 || nh == 60 || nh == 44 || nh == 51) return RG_REJECT_CUT;
    if (nh != 6 && (!v6_unicast(ip + 8, 0) || !v6_unicast(ip + 24, 0))) return RG_REJECT_NO_ERROR;
    if (off > tot) return RG_REJECT_CUT;
    k->l4off = off;
    k->proto = nh;
    k->l4len = tot - off;
    return 0;
}

/* An ICMP(v6) message that must not be answered with an error: an error itself, or one whose
 * type was not captured. */
static int icmp_error(const pkt *k)
{
    if (k->proto != (k->v6 ? 58 : 1)) return 0;
    if (k->l4off >= k->iplen) return 1;
    uint8_t t = k->ip[k->l4off];
    if (k->v6) return t < 128; /* RFC 4443 2.1: 0-127 are errors */
    /* RFC 792/950/1256: the queries and replies; anything else is treated as an error */
    return !(t == 0 || t == 8 || t == 9 || t == 10 || (t >= 13 && t <= 18));
}

/* The IP header of a reply from src to dst (the order given), payload bytes after it, at q. */
static uint32_t ip_header(uint8_t *q, const pkt *k, int swap, uint8_t proto, uint32_t payload)
{
    const uint8_t *ip = k->ip;
    if (!k->v6) {
        memset(q, 0, 20);
        q[0] = 0x45;
        st16(q + 2, (uint16_t)(20u + payload));
        q[6] = 0x40; /* DF */
        q[8] = 64;
        q[9] = proto;
        memcpy(q + 12, ip + (swap ? 16 : 12), 4);
        memcpy(q + 16, ip + (swap ? 12 : 16), 4);
        st16(q + 10, fold(sum16(q, 20, 0)));
        return 20;
    }
    memset(q, 0, 40);
    q[0] = 0x60;
    st16(q + 4, (uint16_t)payload);
    q[6] = proto;
    q[7] = 64;
    memcpy(q + 8, ip + (swap ? 24 : 8), 16);
    memcpy(q + 24, ip + (swap ? 8 : 24), 16);
    return 40;
}

/* The upper-layer checksum over the pseudo-header of the reply's IP header iph. */
static uint16_t l4_sum(const uint8_t *iph, int v6, uint8_t proto, const uint8_t *l4, uint32_t n)
{
    uint32_t acc;
    if (!v6) {
        acc = sum16(iph + 12, 8, 0) + proto + n;
    } else {
        acc = sum16(iph + 8, 32, 0) + proto + (n >> 16) + (n & 0xffffu);
    }
    return fold(sum16(l4, n, acc));
}

/* The link header of a reply: the offending frame's, turned around for the sender. */
static void link_header(uint8_t *q, const uint8_t *p, uint32_t off, const rg_linkinfo *li,
                        int to_sender)
{
    memcpy(q, p, off);
    if (li->dlt == 1 /* DLT_EN10MB */ && to_sender) {
        memcpy(q, p + 6, 6);
        memcpy(q + 6, p, 6);
    } else if (!strcmp(li->name, "sll")) {
        st16(q, 4); /* LINUX_SLL_OUTGOING */
    } else if (!strcmp(li->name, "sll2")) {
        q[10] = 4;
    }
}

static uint32_t tcp_rst(uint8_t *q, const pkt *k, int to_receiver)
{
    const uint8_t *t = k->ip + k->l4off;
    uint8_t fl = t[13];
    uint32_t seq = ld32(t + 4), ack = ld32(t + 8);
    uint32_t doff = (uint32_t)(t[12] >> 4) * 4u;
    /* SEG.LEN: the data and SYN and FIN, each one sequence number */
    uint32_t seglen = k->l4len - doff + ((fl & 0x02) != 0) + ((fl & 0x01) != 0);
    uint32_t ih = ip_header(q, k, !to_receiver, 6, 20);
    uint8_t *r = q + ih;
    memset(r, 0, 20);
    if (to_receiver) { /* as if the sender had sent it: the receiver's RCV.NXT */
        memcpy(r, t, 4);
        st32(r + 4, seq);
        st32(r + 8, ack);
        r[13] = 0x14; /* RST, ACK */
    } else {
        memcpy(r, t + 2, 2);
        memcpy(r + 2, t, 2);
        if (fl & 0x10) { /* <SEQ=SEG.ACK><CTL=RST> */
            st32(r + 4, ack);
            r[13] = 0x04;
        } else { /* <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK> */
            st32(r + 8, seq + seglen);
            r[13] = 0x14;
        }
    }
    r[12] = 5u << 4;
    st16(r + 16, l4_sum(q, k->v6, 6, r, 20));
    return ih + 20;
}

static uint32_t icmp_unreach(uint8_t *q, const pkt *k, unsigned flags)
{
    /* the quote: RFC 792, the IP header and 64 bits of data; RFC 4443, as much as fits in
     * 1280 bytes (40 of IPv6 header, 8 of ICMPv6) */
    uint32_t want = k->v6 ? 1280u - 48u : k->l4off + 8u;
    uint32_t quote = k->iplen < want ? k->iplen : want;
    uint8_t proto = k->v6 ? 58 : 1;
    uint32_t ih = ip_header(q, k, 1, proto, 8u + quote);
    uint8_t *m = q + ih;
    memset(m, 0, 8);
    if (k->v6) {
        m[0] = 1;
        m[1] = (flags & RG_REJECT_F_ADMIN) ? 1 : 4;
    } else {
        m[0] = 3;
        m[1] = (flags & RG_REJECT_F_ADMIN) ? 13 : 3;
    }
    memcpy(m + 8, k->ip, quote);
    uint16_t cs = k->v6 ? l4_sum(q, 1, 58, m, 8u + quote) : fold(sum16(m, 8u + quote, 0));
    st16(m + 2, cs);
    return ih + 8u + quote;
}

unsigned rg_reject_build(int dlt, const uint8_t *p, uint32_t caplen, unsigned flags,
                         rg_reject_out *out)
{
    out->n = 0;
    out->why = RG_REJECT_NOT_IP;
    rg_linkinfo li;
    rg_netpos np;
    if (p == NULL || rg_link_info(dlt, &li) != 0 || !strcmp(li.name, "ppp")) return 0;
    if (rg_link_locate(&li, p, caplen, &np) != 0) {
        out->why = RG_REJECT_CUT;
        return 0;
    }
    if (np.proto != RG_ENTRY_IPV4 && np.proto != RG_ENTRY_IPV6) return 0;
    if (np.off > RG_REJECT_LINK_MAX) return 0;
    if (np.off > caplen) {
        out->why = RG_REJECT_CUT;
        return 0;
    }
    /* link-layer multicast or broadcast destination (the group bit): no reply */
    if (dlt == 1 && np.off >= 14 && ((p[0] & 1) || (p[6] & 1))) {
        out->why = RG_REJECT_NO_ERROR;
        return 0;
    }
    pkt k;
    int why = parse_ip(p + np.off, caplen - np.off, np.proto == RG_ENTRY_IPV6, &k);
    if (why) {
        out->why = why;
        return 0;
    }
    if (k.proto == 6) {
        const uint8_t *t = k.ip + k.l4off;
        if (k.l4off + 20u > k.iplen) {
            out->why = RG_REJECT_CUT;
            return 0;
        }
        uint32_t doff = (uint32_t)(t[12] >> 4) * 4u;
        uint8_t fl = t[13];
        if (doff < 20 || doff > k.l4len) {
            out->why = RG_REJECT_CUT;
            return 0;
        }
        if (fl & 0x04) {
            out->why = RG_REJECT_TCP_RST;
            return 0;
        }
        if (k.first_frag && !(fl & 0x10)) { /* SEG.LEN is not in this fragment */
            out->why = RG_REJECT_CUT;
            return 0;
        }
        link_header(out->frame[0], p, np.off, &li, 1);
        out->len[0] = np.off + tcp_rst(out->frame[0] + np.off, &k, 0);
        out->to_receiver[0] = 0;
        out->n = 1;
        if ((flags & RG_REJECT_F_BOTH) && (fl & 0x10)) {
            link_header(out->frame[1], p, np.off, &li, 0);
            out->len[1] = np.off + tcp_rst(out->frame[1] + np.off, &k, 1);
            out->to_receiver[1] = 1;
            out->n = 2;
        }
        out->why = RG_REJECT_SENT;
        return out->n;
    }
    if (icmp_error(&k)) {
        out->why = RG_REJECT_NO_ERROR;
        return 0;
    }
    link_header(out->frame[0], p, np.off, &li, 1);
    out->len[0] = np.off + icmp_unreach(out->frame[0] + np.off, &k, flags);
    out->to_receiver[0] = 0;
    out->n = 1;
    out->why = RG_REJECT_SENT;
    return 1;
}

void rg_reject_rate_init(rg_reject_rate *r, uint64_t rate)
{
    r->rate = rate;
    r->credit = NS_PER_S; /* a full bucket: the first second's rejects are answered */
    r->last = 0;
}

int rg_reject_rate_take(rg_reject_rate *r, uint64_t now_ns)
{
    if (r->rate == 0) return 1;
    if (r->last != 0 && now_ns > r->last) {
        uint64_t d = now_ns - r->last;
        r->credit = d >= NS_PER_S || r->credit + d >= NS_PER_S ? NS_PER_S : r->credit + d;
    }
    if (r->last == 0 || now_ns > r->last) r->last = now_ns;
    uint64_t cost = NS_PER_S / r->rate;
    if (cost == 0) cost = 1;
    if (r->credit < cost) return 0;
    r->credit -= cost;
    return 1;
}
