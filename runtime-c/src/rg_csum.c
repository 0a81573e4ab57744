/* rg_csum.c - checksum verification and setter fix-up (rg_csum.h). */
#include "rg/rg_csum.h"

#include <string.h>

/* The one's complement accumulation of n bytes as big-endian 16-bit words (an odd last
 * byte padded with zero), added to acc; fold16 folds it to 16 bits. */
static uint32_t add16(const uint8_t *p, size_t n, uint32_t acc)
{
    uint64_t s = acc;
    size_t i = 0;
    for (; i + 1 < n; i += 2) s += (uint32_t)p[i] << 8 | p[i + 1];
    if (i < n) s += (uint32_t)p[i] << 8;
    while (s >> 32) s = (s & 0xffffffffu) + (s >> 32);
    return (uint32_t)s;
}

static uint16_t fold16(uint32_t acc)
{
    while (acc >> 16) acc = (acc & 0xffffu) + (acc >> 16);
    return (uint16_t)acc;
}

static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (c & 1 ? 0x82f63b78u : 0);
        crc_table[i] = c;
    }
    crc_ready = 1; /* idempotent: a race writes the same table */
}

uint32_t rg_crc32c(const uint8_t *p, size_t n, uint32_t crc)
{
    if (!crc_ready) crc_init();
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static int live(const rg_span *s, uint64_t pkt)
{
    return s->hdr != NULL && s->pkt == pkt;
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* The bytes a checksum covers: [*start, *start + *len); 0 when its layer is not live. */
static int coverage(const rg_csum_desc *d, const rg_span *spans, uint64_t pkt, uint8_t **start,
                    uint32_t *len)
{
    const rg_span *s = &spans[d->layer];
    if (!live(s, pkt) || s->hlen < (uint32_t)d->off + (d->algo == RG_CSUM_CRC32C ? 4u : 2u))
        return 0;
    *start = s->hdr;
    *len = d->covers == RG_CSUM_HEADER ? s->hlen : s->len;
    return 1;
}

/* The pseudo-header's span, NULL if d has none or it is not live. */
static const rg_span *pseudo(const rg_csum_desc *d, const rg_span *spans, uint64_t pkt)
{
    if (d->ph_layer < 0) return NULL;
    const rg_span *p = &spans[d->ph_layer];
    if (!live(p, pkt) || p->hlen < (uint32_t)d->ph_src + d->ph_alen ||
        p->hlen < (uint32_t)d->ph_dst + d->ph_alen)
        return NULL;
    return p;
}

static int within(const uint8_t *frame, uint32_t caplen, const uint8_t *p, uint32_t n)
{
    uintptr_t f = (uintptr_t)frame, q = (uintptr_t)p;
    return frame != NULL && q >= f && q - f <= caplen && n <= caplen - (q - f);
}

int rg_csum_verify(const rg_csum_pkt *c, const rg_csum_desc *d)
{
    const rg_span *spans = c->spans;
    uint64_t pkt = c->pkt;
    uint8_t *start;
    uint32_t len;
    if (!coverage(d, spans, pkt, &start, &len)) return -1;
    const uint8_t *f = start + d->off;
    if (d->algo == RG_CSUM_CRC32C) {
        uint32_t want = (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 |
                        (uint32_t)f[3] << 24;
        static const uint8_t zero[4];
        uint32_t crc = rg_crc32c(start, d->off, 0);
        crc = rg_crc32c(zero, 4, crc);
        crc = rg_crc32c(f + 4, len - d->off - 4u, crc);
        return crc == want;
    }
    if (d->zero_none && f[0] == 0 && f[1] == 0) return 1;
    uint32_t acc = add16(start, len, 0);
    if (d->ph_layer >= 0) {
        const rg_span *p = pseudo(d, spans, pkt);
        if (p == NULL) return -1;
        if (d->ph_lenoff >= 0 && p->hlen >= (uint32_t)d->ph_lenoff + 2u) {
            /* the length the network layer declares: shorter input is a capture cut short
             * (tshark: unverified); a reassembled datagram's is the whole one's */
            uint32_t decl = be16(p->hdr + d->ph_lenoff);
            uint32_t hdr = p->hlen - d->ph_lenfrom;
            int reassembled = !within(c->frame, c->caplen, start, len);
            if (!reassembled && (decl < hdr || decl - hdr != len)) return -1;
        }
        acc = add16(p->hdr + d->ph_src, d->ph_alen, acc);
        acc = add16(p->hdr + d->ph_dst, d->ph_alen, acc);
        acc = add16((const uint8_t[]){0, d->proto}, 2, acc);
        const uint8_t l[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                              (uint8_t)len};
        acc = add16(l, 4, acc);
    }
    return fold16(acc) == 0xffff;
}

/* A byte range a checksum covers, aligned on 16-bit words from origin. */
typedef struct range {
    uint8_t *origin, *end;
} range;

/* Sum of the words of r that hold bytes of [p, p + n); 0 when none does (*hit = 0). */
static uint32_t part(range r, const uint8_t *p, uint32_t n, int *hit)
{
    uint8_t *lo = (uint8_t *)(uintptr_t)p, *hi = (uint8_t *)(uintptr_t)p + n;
    if (hi <= r.origin || lo >= r.end) return 0;
    if (lo < r.origin) lo = r.origin;
    if (hi > r.end) hi = r.end;
    if ((lo - r.origin) & 1) lo--;
    if ((hi - r.origin) & 1) hi++;
    if (hi > r.end) hi = r.end; /* an odd last byte: padded with zero, as in the checksum */
    *hit = 1;
    return add16(lo, (size_t)(hi - lo), 0);
}

#define RG_CSUM_MAX_AFFECTED 32
#define RG_CSUM_MAX_DEPTH 16

typedef struct affected {
    const rg_csum_desc *d;
    uint8_t *field;
    range r[3];
    unsigned nr;
    uint32_t old;
} affected;

/* A lender of pseudo-header addresses that a write touches. */
typedef struct pend {
    int layer;
    range r[2];
    uint32_t old;
} pend;

static unsigned pending_before(const rg_csum_pkt *c, const affected *a, unsigned na,
                               const uint8_t *p, uint32_t n, pend *pd)
{
    unsigned np = 0;
    for (unsigned i = 0; i < c->ndesc && np < 4; i++) {
        const rg_csum_desc *d = &c->desc[i];
        if (d->ph_layer < 0 || d->algo != RG_CSUM_INTERNET) continue;
        int dup = 0;
        for (unsigned k = 0; k < np; k++) dup |= pd[k].layer == d->ph_layer;
        for (unsigned k = 0; k < na; k++) dup |= a[k].d->ph_layer == d->ph_layer; /* fixed now */
        const rg_span *ph = pseudo(d, c->spans, c->pkt);
        if (dup || ph == NULL) continue;
        pend *x = &pd[np];
        x->layer = d->ph_layer;
        x->r[0] = (range){ph->hdr + d->ph_src, ph->hdr + d->ph_src + d->ph_alen};
        x->r[1] = (range){ph->hdr + d->ph_dst, ph->hdr + d->ph_dst + d->ph_alen};
        int hit = 0;
        x->old = fold16(fold16(part(x->r[0], p, n, &hit)) + fold16(part(x->r[1], p, n, &hit)));
        if (hit) np++;
    }
    return np;
}

static void pending_after(const rg_csum_pkt *c, const pend *pd, unsigned np, const uint8_t *p,
                          uint32_t n)
{
    for (unsigned k = 0; k < np; k++) {
        int hit = 0;
        uint32_t now =
            fold16(fold16(part(pd[k].r[0], p, n, &hit)) + fold16(part(pd[k].r[1], p, n, &hit)));
        rg_span *s = &c->spans[pd[k].layer];
        s->ph_delta = fold16(s->ph_delta + (uint16_t)~fold16(pd[k].old) + now);
    }
}

static int write_rec(const rg_csum_pkt *c, uint8_t *p, const uint8_t *src, uint32_t n,
                     unsigned depth)
{
    if (!within(c->frame, c->caplen, p, n)) return -1;
    affected a[RG_CSUM_MAX_AFFECTED];
    unsigned na = 0;
    for (unsigned i = 0; i < c->ndesc && depth < RG_CSUM_MAX_DEPTH && na < RG_CSUM_MAX_AFFECTED;
         i++) {
        const rg_csum_desc *d = &c->desc[i];
        uint8_t *start;
        uint32_t len;
        if (!coverage(d, c->spans, c->pkt, &start, &len)) continue;
        uint8_t *field = start + d->off;
        uint32_t fw = d->algo == RG_CSUM_CRC32C ? 4u : 2u;
        if (!within(c->frame, c->caplen, field, fw)) continue; /* not in this frame */
        if (p < field + fw && field < p + n) continue;          /* the field itself */
        if (d->zero_none && field[0] == 0 && field[1] == 0) continue;
        affected *x = &a[na];
        x->d = d;
        x->field = field;
        x->nr = 0;
        x->r[x->nr++] = (range){start, start + len};
        const rg_span *ph = d->algo == RG_CSUM_INTERNET ? pseudo(d, c->spans, c->pkt) : NULL;
        if (ph != NULL) {
            x->r[x->nr++] = (range){ph->hdr + d->ph_src, ph->hdr + d->ph_src + d->ph_alen};
            x->r[x->nr++] = (range){ph->hdr + d->ph_dst, ph->hdr + d->ph_dst + d->ph_alen};
        }
        int hit = 0;
        uint32_t old = 0;
        for (unsigned k = 0; k < x->nr; k++)
            old = fold16(old + fold16(part(x->r[k], p, n, &hit)));
        if (!hit) continue;
        if (d->algo == RG_CSUM_CRC32C && !within(c->frame, c->caplen, start, len)) continue;
        x->old = old;
        na++;
    }
    /* addresses of a pseudo-header whose upper layers are not parsed yet in this packet: the
     * change waits in the lender's span (rg_csum_pending) */
    pend pd[4];
    unsigned np = depth < RG_CSUM_MAX_DEPTH ? pending_before(c, a, na, p, n, pd) : 0;
    memmove(p, src, n);
    pending_after(c, pd, np, p, n);
    for (unsigned i = 0; i < na; i++) {
        affected *x = &a[i];
        const rg_csum_desc *d = x->d;
        uint8_t nb[4];
        if (d->algo == RG_CSUM_CRC32C) {
            uint8_t *start = x->r[0].origin;
            uint32_t len = (uint32_t)(x->r[0].end - start);
            static const uint8_t zero[4];
            uint32_t crc = rg_crc32c(start, d->off, 0);
            crc = rg_crc32c(zero, 4, crc);
            crc = rg_crc32c(start + d->off + 4, len - d->off - 4u, crc);
            for (int k = 0; k < 4; k++) nb[k] = (uint8_t)(crc >> (8 * k));
            write_rec(c, x->field, nb, 4, depth + 1);
            continue;
        }
        int hit = 0;
        uint32_t now = 0;
        for (unsigned k = 0; k < x->nr; k++)
            now = fold16(now + fold16(part(x->r[k], p, n, &hit)));
        /* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') */
        uint16_t hc = be16(x->field);
        uint32_t acc = (uint16_t)~hc + (uint32_t)(uint16_t)~fold16(x->old) + fold16(now);
        uint16_t v = (uint16_t)~fold16(acc);
        if (d->zero_none && v == 0) v = 0xffff; /* a computed zero is sent as all ones */
        nb[0] = (uint8_t)(v >> 8);
        nb[1] = (uint8_t)v;
        write_rec(c, x->field, nb, 2, depth + 1);
    }
    return 0;
}

int rg_csum_write(const rg_csum_pkt *c, uint8_t *p, const uint8_t *src, uint32_t n)
{
    return write_rec(c, p, src, n, 0);
}

uint8_t *rg_csum_header(const rg_csum_pkt *c, unsigned layer, uint32_t need)
{
    const rg_span *s = &c->spans[layer];
    if (!live(s, c->pkt) || s->hlen < need || !within(c->frame, c->caplen, s->hdr, need))
        return NULL;
    return s->hdr;
}

int rg_tcp_strip_option(const rg_csum_pkt *c, unsigned layer, uint8_t kind)
{
    uint8_t *h = rg_csum_header(c, layer, 20);
    if (h == NULL || kind < 2) return 0;
    uint32_t hl = (uint32_t)(h[12] >> 4) * 4u;
    if (hl > c->spans[layer].hlen || !within(c->frame, c->caplen, h, hl)) return 0;
    static const uint8_t nops[40] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                     1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    int n = 0;
    for (uint32_t i = 20; i < hl;) {
        uint8_t k = h[i];
        if (k == 0) break; /* end of the list */
        if (k == 1) {
            i++;
            continue;
        }
        if (i + 1 >= hl) break;
        uint32_t len = h[i + 1];
        if (len < 2 || len > hl - i) break;
        if (k == kind) {
            rg_csum_write(c, h + i, nops, len);
            n++;
        }
        i += len;
    }
    return n;
}

void rg_csum_pending(const rg_csum_pkt *c, unsigned layer)
{
    for (unsigned i = 0; i < c->ndesc; i++) {
        const rg_csum_desc *d = &c->desc[i];
        if (d->layer != layer || d->ph_layer < 0 || d->algo != RG_CSUM_INTERNET) continue;
        const rg_span *ph = pseudo(d, c->spans, c->pkt);
        if (ph == NULL || ph->ph_delta == 0) continue;
        uint8_t *start;
        uint32_t len;
        if (!coverage(d, c->spans, c->pkt, &start, &len)) continue;
        uint8_t *field = start + d->off;
        if (!within(c->frame, c->caplen, field, 2)) continue;
        if (d->zero_none && field[0] == 0 && field[1] == 0) continue;
        /* RFC 1624 eqn. 3 with the lender's accumulated ~m + m' */
        uint16_t v = (uint16_t)~fold16((uint16_t)~be16(field) + ph->ph_delta);
        if (d->zero_none && v == 0) v = 0xffff;
        const uint8_t nb[2] = {(uint8_t)(v >> 8), (uint8_t)v};
        rg_csum_write(c, field, nb, 2);
    }
}
