/* rg_pkt.h - bounds-checked header access.
 *
 * Three layers of helpers, all inline:
 *   rg_load_*   unchecked loads from a pointer (use after one length check);
 *   rg_get_*    checked loads at an absolute offset of (ptr, len): return
 *               RG_OK or RG_ETRUNC and never read past len;
 *   rg_cur_*    a cursor over (ptr, len) that advances on success and stays
 *               put on failure.
 * plus MSB-first bit runs, clamping slices and the QUIC varint.
 * Nothing here allocates, asserts or faults on any input. */
#ifndef RG_PKT_H
#define RG_PKT_H

#include <string.h>

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- unchecked loads ---- */
RG_INLINE uint8_t rg_load_u8(const uint8_t *p)
{
    return p[0];
}
RG_INLINE uint16_t rg_load_be16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}
RG_INLINE uint32_t rg_load_be24(const uint8_t *p)
{
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}
RG_INLINE uint32_t rg_load_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_bswap32(v);
#else
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
#endif
}
RG_INLINE uint64_t rg_load_be48(const uint8_t *p)
{
    return (uint64_t)rg_load_be16(p) << 32 | rg_load_be32(p + 2);
}
RG_INLINE uint64_t rg_load_be64(const uint8_t *p)
{
    return (uint64_t)rg_load_be32(p) << 32 | rg_load_be32(p + 4);
}
RG_INLINE uint16_t rg_load_le16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[1] << 8 | p[0]);
}
RG_INLINE uint32_t rg_load_le24(const uint8_t *p)
{
    return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
RG_INLINE uint32_t rg_load_le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
RG_INLINE uint64_t rg_load_le48(const uint8_t *p)
{
    return (uint64_t)rg_load_le16(p + 4) << 32 | rg_load_le32(p);
}
RG_INLINE uint64_t rg_load_le64(const uint8_t *p)
{
    return (uint64_t)rg_load_le32(p + 4) << 32 | rg_load_le32(p);
}

/* Big-endian load of n bytes (0..8) into the low bits of the result. */
RG_INLINE uint64_t rg_load_ben(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* ---- range check ---- */
/* True when [off, off + n) lies inside a buffer of len bytes (overflow-safe). */
RG_INLINE int rg_has(size_t len, size_t off, size_t n)
{
    return off <= len && len - off >= n;
}

/* ---- checked loads at an absolute offset ---- */
#define RG_DEF_GET(name, type, nbytes, loader)                                                     \
    RG_INLINE int rg_get_##name(const uint8_t *p, size_t len, size_t off, type *out)               \
    {                                                                                              \
        if (RG_UNLIKELY(!rg_has(len, off, nbytes))) return RG_ETRUNC;                              \
        *out = (type)loader(p + off);                                                              \
        return RG_OK;                                                                              \
    }
RG_DEF_GET(u8, uint8_t, 1, rg_load_u8)
RG_DEF_GET(be16, uint16_t, 2, rg_load_be16)
RG_DEF_GET(be24, uint32_t, 3, rg_load_be24)
RG_DEF_GET(be32, uint32_t, 4, rg_load_be32)
RG_DEF_GET(be48, uint64_t, 6, rg_load_be48)
RG_DEF_GET(be64, uint64_t, 8, rg_load_be64)
RG_DEF_GET(le16, uint16_t, 2, rg_load_le16)
RG_DEF_GET(le24, uint32_t, 3, rg_load_le24)
RG_DEF_GET(le32, uint32_t, 4, rg_load_le32)
RG_DEF_GET(le48, uint64_t, 6, rg_load_le48)
RG_DEF_GET(le64, uint64_t, 8, rg_load_le64)
#undef RG_DEF_GET

/* ---- bit runs ---- */
/* Extract nbits (1..64) starting bit_off bits into p, MSB first, treating the
 * bytes as one big-endian run (network bit order: bit 0 is the MSB of p[0]).
 * Unchecked: the caller guarantees (bit_off + nbits + 7) / 8 bytes exist.
 * Example, IPv4: version = rg_bits_u(p, 0, 4), ihl = rg_bits_u(p, 4, 4),
 * frag_off = rg_bits_u(p, 51, 13). */
RG_INLINE uint64_t rg_bits_u(const uint8_t *p, size_t bit_off, unsigned nbits)
{
    const uint8_t *q = p + (bit_off >> 3);
    unsigned lead = (unsigned)(bit_off & 7); /* bits to drop in the first byte */
    unsigned total = lead + nbits;           /* bits spanned from q[0] */
    if (RG_LIKELY(total <= 64)) {
        unsigned nbytes = (total + 7) >> 3;
        uint64_t v = rg_load_ben(q, nbytes);
        v >>= (nbytes << 3) - total; /* drop trailing bits of the last byte */
        return nbits >= 64 ? v : (v & ((UINT64_C(1) << nbits) - 1));
    }
    /* 65..71 bits spanned: 9 bytes; nbits > 56 here. */
    {
        uint64_t hi = rg_load_ben(q, 8);
        unsigned tail = total - 64; /* bits taken from q[8], 1..7 */
        uint64_t v = (hi << tail) | ((uint64_t)q[8] >> (8 - tail));
        return nbits >= 64 ? v : (v & ((UINT64_C(1) << nbits) - 1));
    }
}

/* Checked bit run inside (p, len): RG_OK, RG_ETRUNC or RG_EINVAL (nbits 0 or > 64). */
RG_INLINE int rg_get_bits(const uint8_t *p, size_t len, size_t bit_off, unsigned nbits,
                          uint64_t *out)
{
    if (RG_UNLIKELY(nbits == 0 || nbits > 64)) return RG_EINVAL;
    if (RG_UNLIKELY(bit_off > (SIZE_MAX - 71))) return RG_ETRUNC;
    size_t need = (bit_off + nbits + 7) >> 3;
    if (RG_UNLIKELY(need > len)) return RG_ETRUNC;
    *out = rg_bits_u(p, bit_off, nbits);
    return RG_OK;
}

/* ---- cursor ---- */
typedef struct rg_cursor {
    const uint8_t *ptr; /* start of the buffer */
    size_t len;         /* bytes available */
    size_t off;         /* current position, always <= len */
} rg_cursor;

RG_INLINE rg_cursor rg_cur_make(const uint8_t *p, size_t len)
{
    rg_cursor c;
    c.ptr = p ? p : rg_empty_byte;
    c.len = p ? len : 0;
    c.off = 0;
    return c;
}
RG_INLINE size_t rg_cur_left(const rg_cursor *c)
{
    return c->len - c->off;
}
RG_INLINE const uint8_t *rg_cur_pos(const rg_cursor *c)
{
    return c->ptr + c->off;
}
/* RG_OK when n more bytes are available. */
RG_INLINE int rg_cur_need(const rg_cursor *c, size_t n)
{
    return RG_LIKELY(c->len - c->off >= n) ? RG_OK : RG_ETRUNC;
}
RG_INLINE int rg_cur_skip(rg_cursor *c, size_t n)
{
    if (RG_UNLIKELY(c->len - c->off < n)) return RG_ETRUNC;
    c->off += n;
    return RG_OK;
}
/* Take n bytes as a view (no copy). */
RG_INLINE int rg_cur_bytes(rg_cursor *c, size_t n, rg_bytes *out)
{
    if (RG_UNLIKELY(c->len - c->off < n)) return RG_ETRUNC;
    out->ptr = c->ptr + c->off;
    out->len = n;
    c->off += n;
    return RG_OK;
}
/* The rest of the buffer as a view; the cursor moves to the end. */
RG_INLINE rg_bytes rg_cur_rest(rg_cursor *c)
{
    rg_bytes b;
    b.ptr = c->ptr + c->off;
    b.len = c->len - c->off;
    c->off = c->len;
    return b;
}

#define RG_DEF_CUR(name, type, nbytes, loader)                                                     \
    RG_INLINE int rg_cur_##name(rg_cursor *c, type *out)                                           \
    {                                                                                              \
        if (RG_UNLIKELY(c->len - c->off < (nbytes))) return RG_ETRUNC;                             \
        *out = (type)loader(c->ptr + c->off);                                                      \
        c->off += (nbytes);                                                                        \
        return RG_OK;                                                                              \
    }
RG_DEF_CUR(u8, uint8_t, 1, rg_load_u8)
RG_DEF_CUR(be16, uint16_t, 2, rg_load_be16)
RG_DEF_CUR(be24, uint32_t, 3, rg_load_be24)
RG_DEF_CUR(be32, uint32_t, 4, rg_load_be32)
RG_DEF_CUR(be48, uint64_t, 6, rg_load_be48)
RG_DEF_CUR(be64, uint64_t, 8, rg_load_be64)
RG_DEF_CUR(le16, uint16_t, 2, rg_load_le16)
RG_DEF_CUR(le24, uint32_t, 3, rg_load_le24)
RG_DEF_CUR(le32, uint32_t, 4, rg_load_le32)
RG_DEF_CUR(le48, uint64_t, 6, rg_load_le48)
RG_DEF_CUR(le64, uint64_t, 8, rg_load_le64)
#undef RG_DEF_CUR

/* Bit run relative to the cursor position; does not move the cursor (bit
 * fields are read from a run of whole bytes, then the run is skipped). */
RG_INLINE int rg_cur_bits(const rg_cursor *c, size_t bit_off, unsigned nbits, uint64_t *out)
{
    return rg_get_bits(c->ptr + c->off, c->len - c->off, bit_off, nbits, out);
}

/* ---- clamping slices (spec expressions s[a:b], s[a:], s[:b], s[i]) ---- */
/* Indices are unsigned and clamp to [0, len]; b < a gives an empty view.  The
 * result never has a NULL pointer. */
RG_INLINE rg_bytes rg_slice(rg_bytes s, uint64_t a, uint64_t b)
{
    rg_bytes r;
    const uint8_t *base = s.ptr ? s.ptr : rg_empty_byte;
    size_t len = s.ptr ? s.len : 0;
    if (a > len) a = len;
    if (b > len) b = len;
    if (b < a) b = a;
    r.ptr = base + a;
    r.len = (size_t)(b - a);
    return r;
}
RG_INLINE rg_bytes rg_slice_from(rg_bytes s, uint64_t a)
{
    return rg_slice(s, a, UINT64_MAX);
}
RG_INLINE rg_bytes rg_slice_to(rg_bytes s, uint64_t b)
{
    return rg_slice(s, 0, b);
}
/* s[i], 0 when out of range.  No object is larger than PTRDIFF_MAX; saying so
 * lets gcc -O2 drop the load for a constant index of 2^63 rather than report it
 * (-Warray-bounds, an error in -Werror builds of generated code). */
RG_INLINE uint64_t rg_index(rg_bytes s, uint64_t i)
{
    return (s.ptr && i < s.len && i <= (uint64_t)PTRDIFF_MAX) ? s.ptr[i] : 0;
}
/* s == t (same length and bytes). */
RG_INLINE int rg_bytes_eq(rg_bytes s, rg_bytes t)
{
    return s.len == t.len && (s.len == 0 || memcmp(s.ptr, t.ptr, s.len) == 0);
}
/* Assignment to a fixed-size bytes variable: copy the first min(len(v), size)
 * bytes of v into dst and zero the rest of its size bytes.  v may overlap
 * dst (`temp.x = temp.x[1:]`). */
RG_INLINE void rg_bytes_store(uint8_t *dst, size_t size, rg_bytes v)
{
    size_t n = v.ptr ? (v.len < size ? v.len : size) : 0;
    if (n) memmove(dst, v.ptr, n);
    if (n < size) memset(dst + n, 0, size - n);
}

/* ---- spec expression operators (docs/spec-language.md 4.2, 4.5) ---- */
/* Numbers are uint64_t.  Generated code calls these instead of writing the C
 * operator so that no input is undefined behaviour (x / 0, x << 64) and so
 * that comparisons with constants a spec may legitimately contain
 * (`header.version == 16` on a 4-bit field, `x >= 0`) do not trip
 * -Wtype-limits or -Wtautological-compare under -Werror.  Each argument is
 * evaluated once. */
RG_INLINE uint64_t rg_op_div(uint64_t a, uint64_t b)
{
    return b ? a / b : 0;
}
RG_INLINE uint64_t rg_op_mod(uint64_t a, uint64_t b)
{
    return b ? a % b : 0;
}
RG_INLINE uint64_t rg_op_shl(uint64_t a, uint64_t b)
{
    return b < 64 ? a << b : 0;
}
RG_INLINE uint64_t rg_op_shr(uint64_t a, uint64_t b)
{
    return b < 64 ? a >> b : 0;
}
RG_INLINE uint64_t rg_op_min(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}
RG_INLINE uint64_t rg_op_max(uint64_t a, uint64_t b)
{
    return a < b ? b : a;
}
/* Truth value (non-zero is true); also keeps -Wint-in-bool-context quiet for
 * `a * b && c`. */
RG_INLINE int rg_op_truth(uint64_t a)
{
    return a != 0;
}
RG_INLINE uint64_t rg_op_eq(uint64_t a, uint64_t b)
{
    return a == b;
}
RG_INLINE uint64_t rg_op_ne(uint64_t a, uint64_t b)
{
    return a != b;
}
RG_INLINE uint64_t rg_op_lt(uint64_t a, uint64_t b)
{
    return a < b;
}
RG_INLINE uint64_t rg_op_le(uint64_t a, uint64_t b)
{
    return a <= b;
}
RG_INLINE uint64_t rg_op_gt(uint64_t a, uint64_t b)
{
    return a > b;
}
RG_INLINE uint64_t rg_op_ge(uint64_t a, uint64_t b)
{
    return a >= b;
}

/* ---- QUIC variable-length integer (RFC 9000 section 16) ---- */
/* Encoded length from the first byte: 1, 2, 4 or 8. */
RG_INLINE unsigned rg_varint_size(uint8_t first)
{
    return 1u << (first >> 6);
}
/* Decode at p (len bytes available).  Returns the number of bytes consumed
 * (1, 2, 4, 8) and stores the value, or returns 0 and stores 0 when the
 * buffer is empty or too short. */
RG_INLINE unsigned rg_varint_decode(const uint8_t *p, size_t len, uint64_t *val)
{
    if (RG_UNLIKELY(len == 0)) {
        *val = 0;
        return 0;
    }
    unsigned n = rg_varint_size(p[0]);
    if (RG_UNLIKELY(len < n)) {
        *val = 0;
        return 0;
    }
    uint64_t v = p[0] & 0x3f;
    for (unsigned i = 1; i < n; i++)
        v = v << 8 | p[i];
    *val = v;
    return n;
}
/* Spec expressions varint(s) and varint_len(s): value and encoded length, both
 * 0 when s is too short. */
RG_INLINE uint64_t rg_varint(rg_bytes s)
{
    uint64_t v;
    (void)rg_varint_decode(s.ptr, s.ptr ? s.len : 0, &v);
    return v;
}
RG_INLINE uint64_t rg_varint_len(rg_bytes s)
{
    uint64_t v;
    return rg_varint_decode(s.ptr, s.ptr ? s.len : 0, &v);
}
/* Cursor form: RG_OK and advance, or RG_ETRUNC and stay. */
RG_INLINE int rg_cur_varint(rg_cursor *c, uint64_t *out)
{
    unsigned n = rg_varint_decode(c->ptr + c->off, c->len - c->off, out);
    if (RG_UNLIKELY(n == 0)) return RG_ETRUNC;
    c->off += n;
    return RG_OK;
}

/* ---- domain names (RFC 1035 3.1, 4.1.4) ---- */
/* A domain name as DNS, mDNS and LLMNR write it: labels (a length byte 1..63 and its bytes)
 * ending with a zero byte or with a compression pointer (two bytes, top bits 11: the offset in
 * the message where the rest of the name is).  Pointers are followed anywhere in the message,
 * but at most RG_NAME_JUMPS of them (a pointer loop is an error, never a hang), and the name
 * may not pass RG_NAME_MAX bytes decompressed (its labels, their length bytes and the final
 * zero: RFC 1035 2.3.4), which also bounds its labels to 127. */
enum { RG_NAME_MAX = 255, RG_NAME_JUMPS = 127, RG_NAME_TEXT_MAX = 4 * RG_NAME_MAX + 1 };
/* The name at offset off of msg (len bytes: the whole message, which pointers count from).
 * Returns the bytes it occupies at off (its labels up to the zero byte, or up to and including
 * the first pointer), or 0 when it is malformed: truncated, a label type 01 or 10 (RFC 6891
 * 6.2: no longer used), more than RG_NAME_JUMPS pointers, or longer than RG_NAME_MAX.  text
 * (NULL: not wanted; cap bytes, RG_NAME_TEXT_MAX always suffice) receives the name in master
 * file form (RFC 1035 5.1), NUL-terminated: labels joined by '.', no final dot (the root is
 * ""), "." and "\" escaped with a backslash, bytes outside printable ASCII as \DDD; *text_len
 * (NULL: not wanted) its length, 0 on error.  Out of line: rg_pkt.c. */
size_t rg_name_read(const uint8_t *msg, size_t len, size_t off, char *text, size_t cap,
                    size_t *text_len);
/* Spec expression name_len(msg, off): rg_name_read's result, 0 for an off past msg. */
RG_INLINE uint64_t rg_name_len(rg_bytes msg, uint64_t off)
{
    if (!msg.ptr || off >= msg.len) return 0;
    return rg_name_read(msg.ptr, msg.len, (size_t)off, NULL, 0, NULL);
}

/* ---- Internet checksum ---- */
/* One's-complement sum of (p, len) folded to 16 bits, added to `sum`
 * (call with sum = 0, or a pseudo-header sum).  Out of line: rg_pkt.c. */
uint32_t rg_csum_add(uint32_t sum, const uint8_t *p, size_t len);
/* Final complement: 0 means the checksum over the covered data is valid. */
RG_INLINE uint16_t rg_csum_fold(uint32_t sum)
{
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* Zero n bytes, n a constant (a record or result struct of the generated
 * code).  gcc turns a memset of more than 128 bytes into `rep stos`, slow to
 * start for the 100 to 300 bytes of a per-packet record, and even one of 64
 * bytes in a block it takes to be cold (the inner layers of a tunnel stack:
 * each iteration of `rep stos` counts as an instruction, and it is slow to
 * start).  With GNU C, 16-byte vector stores, which it keeps as stores; the
 * tail below 16 bytes by memset. */
#if defined(__GNUC__)
typedef uint64_t rg_zero_v __attribute__((vector_size(16), aligned(1), may_alias));
#endif
RG_INLINE void rg_zero(void *p, size_t n)
{
    unsigned char *z = (unsigned char *)p;
#if defined(__GNUC__)
    const rg_zero_v v0 = {0, 0};
    for (; n >= 64; n -= 64, z += 64) { /* few iterations: unrolled completely */
        *(rg_zero_v *)(void *)z = v0;
        *(rg_zero_v *)(void *)(z + 16) = v0;
        *(rg_zero_v *)(void *)(z + 32) = v0;
        *(rg_zero_v *)(void *)(z + 48) = v0;
    }
    for (; n >= 16; n -= 16, z += 16)
        *(rg_zero_v *)(void *)z = v0;
#else
    for (; n >= 64; n -= 64, z += 64)
        memset(z, 0, 64);
#endif
    memset(z, 0, n);
}

/* Copy n bytes, n a constant (a lazily created record committed to its
 * table): 16-byte vector loads and stores with GNU C, for the same reason as
 * rg_zero (gcc made the memcpy of a 256-byte TCP record a `rep movs`, an
 * instruction per 4 bytes).  The areas do not overlap. */
RG_INLINE void rg_copy(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
#if defined(__GNUC__)
#pragma GCC unroll 32 /* n is a constant: straight-line code even in a cold block */
    for (; n >= 16; n -= 16, d += 16, s += 16)
        *(rg_zero_v *)(void *)d = *(const rg_zero_v *)(const void *)s;
#endif
    memcpy(d, s, n);
}

#ifdef __cplusplus
}
#endif
#endif /* RG_PKT_H */
