/* rg_rss.c - the symmetric Toeplitz hash and the software distributor
 * (see rg_rss.h). */
#include "rg/rg_rss.h"

#include <string.h>

#include "rg/rg_pkt.h"

const uint8_t rg_rss_key_symmetric[RG_RSS_KEY_LEN] = {
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
};

static inline uint8_t key_byte(const uint8_t *key, size_t keylen, size_t i)
{
    return i < keylen ? key[i] : 0;
}

uint32_t rg_toeplitz(const uint8_t *key, size_t keylen, const uint8_t *data, size_t len)
{
    /* v: the 32 key bits starting at the current input bit */
    uint32_t v = (uint32_t)key_byte(key, keylen, 0) << 24 |
                 (uint32_t)key_byte(key, keylen, 1) << 16 |
                 (uint32_t)key_byte(key, keylen, 2) << 8 | key_byte(key, keylen, 3);
    uint32_t h = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t next = key_byte(key, keylen, i + 4);
        for (int b = 7; b >= 0; b--) {
            if (data[i] >> b & 1) h ^= v;
            v = v << 1 | (uint32_t)(next >> b & 1);
        }
    }
    return h;
}

static int l4_has_ports(uint8_t proto)
{
    return proto == 6 || proto == 17 || proto == 132; /* TCP, UDP, SCTP */
}

/* Past PPPoE session and MPLS headers to an IP header: 4, 6 or 0. */
static int skip_shim(const uint8_t *p, uint32_t caplen, uint16_t et, uint32_t *off)
{
    if (et == 0x8864) { /* PPPoE session: 6-byte header, 2-byte PPP protocol */
        if (*off + 8 > caplen) return 0;
        uint16_t ppp = rg_load_be16(p + *off + 6);
        *off += 8;
        return ppp == 0x0021 ? 4 : ppp == 0x0057 ? 6 : 0;
    }
    if (et == 0x8847 || et == 0x8848) { /* MPLS: labels up to bottom of stack */
        for (int n = 0; n < 16; n++) {
            if (*off + 4 > caplen) return 0;
            int bos = p[*off + 2] & 1;
            *off += 4;
            if (bos) break;
            if (n == 15) return 0;
        }
        if (*off >= caplen) return 0;
        int v = p[*off] >> 4; /* no protocol field: the version nibble says */
        return v == 4 || v == 6 ? v : 0;
    }
    return 0;
}

static size_t tuple_v4(const uint8_t *p, uint32_t caplen, uint32_t off, rg_rss_mode mode,
                       uint8_t *out)
{
    if (off + 20 > caplen || p[off] >> 4 != 4) return 0;
    uint32_t ihl = (uint32_t)(p[off] & 15) * 4;
    if (ihl < 20) return 0;
    memcpy(out, p + off + 12, 8);
    uint16_t frag = rg_load_be16(p + off + 6);
    if (mode == RG_RSS_L3 || (frag & 0x3fff)) return 8; /* MF or offset: addresses only */
    uint32_t l4 = off + ihl;
    if (!l4_has_ports(p[off + 9]) || l4 + 4 > caplen) return 8;
    memcpy(out + 8, p + l4, 4);
    return 12;
}

static size_t tuple_v6(const uint8_t *p, uint32_t caplen, uint32_t off, rg_rss_mode mode,
                       uint8_t *out)
{
    if (off + 40 > caplen || p[off] >> 4 != 6) return 0;
    memcpy(out, p + off + 8, 32);
    if (mode == RG_RSS_L3) return 32;
    uint8_t nh = p[off + 6];
    uint32_t q = off + 40;
    for (int n = 0; n < 8; n++) {
        if (nh == 0 || nh == 43 || nh == 60) { /* hop-by-hop, routing, destination */
            if (q + 2 > caplen) return 32;
            nh = p[q];
            q += ((uint32_t)p[q + 1] + 1) * 8;
        } else if (nh == 51) { /* AH */
            if (q + 2 > caplen) return 32;
            nh = p[q];
            q += ((uint32_t)p[q + 1] + 2) * 4;
        } else if (nh == 44) { /* fragment: a real one hashes on addresses */
            if (q + 8 > caplen) return 32;
            if (rg_load_be16(p + q + 2) & 0xfff9) return 32;
            nh = p[q];
            q += 8; /* atomic fragment (offset 0, M 0): a whole datagram */
        } else {
            break;
        }
    }
    if (!l4_has_ports(nh) || q + 4 > caplen) return 32;
    memcpy(out + 32, p + q, 4);
    return 36;
}

size_t rg_rss_tuple(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_rss_mode mode,
                    uint8_t out[RG_RSS_TUPLE_MAX])
{
    rg_netpos np;
    if (rg_link_locate(li, p, caplen, &np) != RG_OK) return 0;
    uint32_t off = np.off;
    int v = np.proto == RG_ENTRY_IPV4 ? 4 : np.proto == RG_ENTRY_IPV6 ? 6 : 0;
    if (!v && li->entry == RG_ENTRY_ETHER) v = skip_shim(p, caplen, np.ethertype, &off);
    if (v == 4) return tuple_v4(p, caplen, off, mode, out);
    if (v == 6) return tuple_v6(p, caplen, off, mode, out);
    return 0;
}

uint32_t rg_rss_hash(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_rss_mode mode)
{
    uint8_t t[RG_RSS_TUPLE_MAX];
    size_t n = rg_rss_tuple(li, p, caplen, mode, t);
    return n ? rg_toeplitz(rg_rss_key_symmetric, RG_RSS_KEY_LEN, t, n) : 0;
}

void rg_rss_dist_init(rg_rss_dist *d, unsigned nworkers, rg_rss_mode mode)
{
    memset(d, 0, sizeof *d);
    d->nworkers = nworkers ? nworkers : 1;
    d->mode = mode;
    d->dlt = -1;
}

unsigned rg_rss_dist_worker(rg_rss_dist *d, const rg_frame *f)
{
    if (d->nworkers == 1) return 0;
    if (f->dlt != d->dlt) {
        d->dlt = f->dlt;
        if (rg_link_info(f->dlt, &d->li) != RG_OK) d->li.entry = RG_ENTRY_UNKNOWN;
    }
    if (d->li.entry == RG_ENTRY_UNKNOWN) return 0;
    return rg_rss_worker(rg_rss_hash(&d->li, f->data, f->caplen, d->mode), d->nworkers);
}
