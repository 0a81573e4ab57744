/* rg_csum.c - checksum verification and setter fix-up (rg_csum.h). */
#include "rg/rg_csum.h"

#include <string.h>

/* The one's complement accumulation of n bytes as big-endian 16-bit words (an odd last
 * byte padded with zero), added to acc; fold16 folds it to 16 bits. */
static uint32_t add16(const uint8_t *p, size_t n, uint32_t acc)
{
    uint64_t s = acc;
    size_t i = 0;
    for (; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    if (i < n) s += (uint32_t)p[i] << 8;
    while (s >> 32)
        s = (s & 0xffffffffu) + (s >> 32);
    return (uint32_t)s;
}

static uint16_t fold16(uint32_t acc)
{
    while (acc >> 16)
        acc = (acc & 0xffffu) + (acc >> 16);
    return (uint16_t)acc;
}

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), one byte at a time: a constant
 * table, so that workers on several threads share it without initialising it */
static const uint32_t crc_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu, 0x26a1e7e8u,
    0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu, 0x4d43cfd0u, 0xbf284cd3u,
    0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu, 0xf165b798u, 0x030e349bu, 0xd7c45070u,
    0x25afd373u, 0x36ff2087u, 0xc494a384u, 0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u,
    0x5d1d08bfu, 0xaf768bbcu, 0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u,
    0x33ed7d2au, 0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau, 0x30e349b1u,
    0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu, 0x1642ae59u, 0xe4292d5au,
    0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au, 0x7da08661u, 0x8fcb0562u, 0x9c9bf696u,
    0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu, 0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u,
    0x67dafa54u, 0x95b17957u, 0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu,
    0xfe53516fu, 0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu, 0x3ac7f2ebu,
    0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u, 0x61c69362u, 0x93ad1061u,
    0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu, 0x4767748au, 0xb50cf789u, 0xeb1fcbadu,
    0x197448aeu, 0x0a24bb5au, 0xf84f3859u, 0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u,
    0x7198540du, 0x83f3d70eu, 0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u,
    0xa55230e6u, 0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu, 0x456cac67u,
    0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u, 0xe9141340u, 0x1b7f9043u,
    0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu, 0x92a8fc17u, 0x60c37f14u, 0x73938ce0u,
    0x81f80fe3u, 0x55326b08u, 0xa759e80bu, 0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu,
    0xf94ad42fu, 0x0b21572cu, 0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u,
    0x502036a5u, 0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u, 0x0e330a81u,
    0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du, 0x758fe5d6u, 0x87e466d5u,
    0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u, 0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u,
    0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu, 0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u,
    0x0417b1dbu, 0xf67c32d8u, 0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu,
    0x5a048dffu, 0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u, 0x590ab964u,
    0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u, 0x7fab5e8cu, 0x8dc0dd8fu,
    0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu, 0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u,
    0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u, 0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u,
    0x4f48173du, 0xbd23943eu, 0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au,
    0xc69f7b69u, 0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

uint32_t rg_crc32c(const uint8_t *p, size_t n, uint32_t crc)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
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
        uint32_t want =
            (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
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
#define RG_CSUM_MAX_DEPTH    16

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
        for (unsigned k = 0; k < np; k++)
            dup |= pd[k].layer == d->ph_layer;
        for (unsigned k = 0; k < na; k++)
            dup |= a[k].d->ph_layer == d->ph_layer; /* fixed now */
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
        if (p < field + fw && field < p + n) continue;         /* the field itself */
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
            for (int k = 0; k < 4; k++)
                nb[k] = (uint8_t)(crc >> (8 * k));
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

int rg_tcp_clamp_mss(const rg_csum_pkt *c, unsigned layer, uint16_t mss)
{
    uint8_t *h = rg_csum_header(c, layer, 20);
    if (h == NULL || !(h[13] & 0x02)) return 0; /* SYN and SYN-ACK carry the MSS */
    uint32_t hl = (uint32_t)(h[12] >> 4) * 4u;
    if (hl > c->spans[layer].hlen || !within(c->frame, c->caplen, h, hl)) return 0;
    for (uint32_t i = 20; i < hl;) {
        uint8_t k = h[i];
        if (k == 0) break;
        if (k == 1) {
            i++;
            continue;
        }
        if (i + 1 >= hl) break;
        uint32_t len = h[i + 1];
        if (len < 2 || len > hl - i) break;
        if (k == 2 && len == 4) {
            if (be16(h + i + 2) <= mss) return 0;
            const uint8_t nb[2] = {(uint8_t)(mss >> 8), (uint8_t)mss};
            return rg_csum_write(c, h + i + 2, nb, 2) == 0;
        }
        i += len;
    }
    return 0;
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
