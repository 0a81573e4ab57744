/* test_pkt.c - bounds-checked header access. */
#include "rg_test.h"

#include "rg/rg_pkt.h"

static const uint8_t B[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                              0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};

static void test_loads(void **state)
{
    (void)state;
    assert_int_equal(rg_load_u8(B), 0x01);
    assert_int_equal(rg_load_be16(B), 0x0123);
    assert_int_equal(rg_load_be24(B), 0x012345);
    assert_int_equal(rg_load_be32(B), 0x01234567);
    assert_true(rg_load_be48(B) == UINT64_C(0x0123456789ab));
    assert_true(rg_load_be64(B) == UINT64_C(0x0123456789abcdef));
    assert_int_equal(rg_load_le16(B), 0x2301);
    assert_int_equal(rg_load_le24(B), 0x452301);
    assert_int_equal(rg_load_le32(B), 0x67452301);
    assert_true(rg_load_le48(B) == UINT64_C(0xab8967452301));
    assert_true(rg_load_le64(B) == UINT64_C(0xefcdab8967452301));
    /* unaligned */
    assert_int_equal(rg_load_be32(B + 1), 0x23456789);
    assert_true(rg_load_be64(B + 3) == UINT64_C(0x6789abcdeffedcba));
}

static void test_checked_gets(void **state)
{
    (void)state;
    uint8_t *p = malloc(6); /* exact size: ASan catches over-reads */
    memcpy(p, B, 6);
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    assert_int_equal(rg_get_u8(p, 6, 5, &u8), RG_OK);
    assert_int_equal(u8, 0xab);
    assert_int_equal(rg_get_u8(p, 6, 6, &u8), RG_ETRUNC);
    assert_int_equal(rg_get_be16(p, 6, 4, &u16), RG_OK);
    assert_int_equal(u16, 0x89ab);
    assert_int_equal(rg_get_be16(p, 6, 5, &u16), RG_ETRUNC);
    assert_int_equal(rg_get_be24(p, 6, 3, &u32), RG_OK);
    assert_int_equal(u32, 0x6789ab);
    assert_int_equal(rg_get_be32(p, 6, 3, &u32), RG_ETRUNC);
    assert_int_equal(rg_get_be48(p, 6, 0, &u64), RG_OK);
    assert_true(u64 == UINT64_C(0x0123456789ab));
    assert_int_equal(rg_get_be48(p, 6, 1, &u64), RG_ETRUNC);
    assert_int_equal(rg_get_be64(p, 6, 0, &u64), RG_ETRUNC);
    assert_int_equal(rg_get_le16(p, 6, 0, &u16), RG_OK);
    assert_int_equal(u16, 0x2301);
    assert_int_equal(rg_get_le32(p, 6, 2, &u32), RG_OK);
    assert_int_equal(u32, 0xab896745);
    assert_int_equal(rg_get_le64(p, 6, 0, &u64), RG_ETRUNC);
    /* huge offsets do not wrap around */
    assert_int_equal(rg_get_be32(p, 6, SIZE_MAX, &u32), RG_ETRUNC);
    assert_int_equal(rg_get_be32(p, 6, SIZE_MAX - 2, &u32), RG_ETRUNC);
    assert_int_equal(rg_get_be16(p, 0, 0, &u16), RG_ETRUNC);
    assert_false(rg_has(6, 7, 0));
    assert_true(rg_has(6, 6, 0));
    free(p);
}

static void test_cursor(void **state)
{
    (void)state;
    uint8_t *p = malloc(11);
    memcpy(p, B, 11);
    rg_cursor c = rg_cur_make(p, 11);
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    assert_int_equal(rg_cur_u8(&c, &u8), RG_OK);
    assert_int_equal(u8, 0x01);
    assert_int_equal(rg_cur_be16(&c, &u16), RG_OK);
    assert_int_equal(u16, 0x2345);
    assert_int_equal(rg_cur_be24(&c, &u32), RG_OK);
    assert_int_equal(u32, 0x6789ab);
    assert_int_equal(rg_cur_left(&c), 5);
    assert_int_equal(rg_cur_be64(&c, &u64), RG_ETRUNC); /* fails, stays */
    assert_int_equal(c.off, 6);
    assert_int_equal(rg_cur_le32(&c, &u32), RG_OK);
    assert_int_equal(u32, 0xdcfeefcd);
    assert_int_equal(rg_cur_need(&c, 1), RG_OK);
    assert_int_equal(rg_cur_need(&c, 2), RG_ETRUNC);
    rg_bytes b;
    assert_int_equal(rg_cur_bytes(&c, 2, &b), RG_ETRUNC);
    assert_int_equal(rg_cur_bytes(&c, 1, &b), RG_OK);
    assert_int_equal(b.len, 1);
    assert_int_equal(b.ptr[0], 0xba);
    assert_int_equal(rg_cur_skip(&c, 1), RG_ETRUNC);
    assert_int_equal(rg_cur_skip(&c, 0), RG_OK);
    rg_bytes rest = rg_cur_rest(&c);
    assert_int_equal(rest.len, 0);
    assert_non_null(rest.ptr);
    /* other widths */
    c = rg_cur_make(p, 11);
    assert_int_equal(rg_cur_be48(&c, &u64), RG_OK);
    assert_true(u64 == UINT64_C(0x0123456789ab));
    assert_int_equal(rg_cur_le16(&c, &u16), RG_OK);
    assert_int_equal(u16, 0xefcd);
    assert_int_equal(rg_cur_le24(&c, &u32), RG_OK);
    assert_int_equal(u32, 0xbadcfe);
    assert_int_equal(rg_cur_le48(&c, &u64), RG_ETRUNC);
    c = rg_cur_make(p, 11);
    assert_int_equal(rg_cur_be16(&c, &u16), RG_OK);
    assert_int_equal(rg_cur_le64(&c, &u64), RG_OK);
    assert_true(u64 == UINT64_C(0xdcfeefcdab896745));
    assert_int_equal(rg_cur_be64(&c, &u64), RG_ETRUNC);
    /* a NULL buffer is an empty one */
    c = rg_cur_make(NULL, 100);
    assert_int_equal(rg_cur_left(&c), 0);
    assert_int_equal(rg_cur_u8(&c, &u8), RG_ETRUNC);
    free(p);
}

/* Reference: one bit at a time. */
static uint64_t bits_naive(const uint8_t *p, size_t off, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t b = off + i;
        v = v << 1 | ((p[b >> 3] >> (7 - (b & 7))) & 1);
    }
    return v;
}

static void test_bits(void **state)
{
    (void)state;
    /* IPv4 header: version 4, ihl 5, flags DF, fragment offset 0x1234 >> 3 */
    const uint8_t ip[20] = {0x45, 0x00, 0x00, 0x54, 0xab, 0xcd, 0x40 | 0x12, 0x34, 64, 6};
    uint64_t v;
    assert_int_equal(rg_get_bits(ip, 20, 0, 4, &v), RG_OK);
    assert_int_equal(v, 4);
    assert_int_equal(rg_get_bits(ip, 20, 4, 4, &v), RG_OK);
    assert_int_equal(v, 5);
    assert_int_equal(rg_bits_u(ip, 48, 3), 2);       /* flags: DF */
    assert_int_equal(rg_bits_u(ip, 51, 13), 0x1234); /* fragment offset */
    assert_int_equal(rg_bits_u(ip, 16, 16), 0x54);   /* total length */
    /* exhaustive against the naive extraction over a 16-byte buffer */
    uint8_t *p = malloc(16);
    memcpy(p, B, 16);
    for (size_t off = 0; off < 64; off++) {
        for (unsigned n = 1; n <= 64; n++) {
            uint64_t got;
            assert_int_equal(rg_get_bits(p, 16, off, n, &got), RG_OK);
            if (got != bits_naive(p, off, n)) fail_msg("off %zu n %u", off, n);
        }
    }
    /* truncation: the run must fit in len bytes */
    assert_int_equal(rg_get_bits(p, 16, 124, 4, &v), RG_OK);
    assert_int_equal(v, 0x0);
    assert_int_equal(rg_get_bits(p, 16, 125, 4, &v), RG_ETRUNC);
    assert_int_equal(rg_get_bits(p, 2, 12, 5, &v), RG_ETRUNC);
    assert_int_equal(rg_get_bits(p, 16, 0, 0, &v), RG_EINVAL);
    assert_int_equal(rg_get_bits(p, 16, 0, 65, &v), RG_EINVAL);
    assert_int_equal(rg_get_bits(p, 16, SIZE_MAX - 3, 8, &v), RG_ETRUNC);
    rg_cursor c = rg_cur_make(p, 16);
    rg_cur_skip(&c, 15);
    assert_int_equal(rg_cur_bits(&c, 4, 4, &v), RG_OK);
    assert_int_equal(v, 0x0);
    assert_int_equal(rg_cur_bits(&c, 4, 5, &v), RG_ETRUNC);
    free(p);
}

static void test_slices(void **state)
{
    (void)state;
    rg_bytes s = rg_bytes_make(B, 10);
    rg_bytes r = rg_slice(s, 2, 5);
    assert_ptr_equal(r.ptr, B + 2);
    assert_int_equal(r.len, 3);
    r = rg_slice(s, 8, 100); /* end clamps */
    assert_int_equal(r.len, 2);
    r = rg_slice(s, 100, 200); /* both clamp: empty at the end */
    assert_int_equal(r.len, 0);
    assert_ptr_equal(r.ptr, B + 10);
    r = rg_slice(s, 7, 3); /* reversed: empty */
    assert_int_equal(r.len, 0);
    r = rg_slice(s, UINT64_MAX, UINT64_MAX);
    assert_int_equal(r.len, 0);
    r = rg_slice_from(s, 4);
    assert_int_equal(r.len, 6);
    r = rg_slice_to(s, 4);
    assert_int_equal(r.len, 4);
    r = rg_slice_to(s, 40);
    assert_int_equal(r.len, 10);
    assert_int_equal(rg_index(s, 9), 0xdc);
    assert_int_equal(rg_index(s, 10), 0);
    assert_int_equal(rg_index(s, UINT64_MAX), 0);
    assert_int_equal(rg_index(s, UINT64_C(1) << 63), 0);
    /* NULL / empty views never give a NULL pointer */
    rg_bytes n = {NULL, 5};
    r = rg_slice(n, 1, 3);
    assert_non_null(r.ptr);
    assert_int_equal(r.len, 0);
    assert_int_equal(rg_index(n, 0), 0);
    n = rg_bytes_make(NULL, 7);
    assert_non_null(n.ptr);
    assert_int_equal(n.len, 0);
    assert_true(rg_bytes_eq(rg_slice(s, 0, 2), rg_bytes_make(B, 2)));
    assert_false(rg_bytes_eq(rg_slice(s, 0, 2), rg_slice(s, 1, 3)));
    assert_true(rg_bytes_eq(rg_bytes_empty(), rg_slice(s, 5, 5)));
}

static void test_bytes_store(void **state)
{
    (void)state;
    uint8_t d[6];
    memset(d, 0xaa, sizeof d);
    rg_bytes_store(d, 4, rg_bytes_make(B, 3)); /* short: zero-padded, d[4..] untouched */
    const uint8_t e1[6] = {0x01, 0x23, 0x45, 0x00, 0xaa, 0xaa};
    assert_memory_equal(d, e1, 6);
    rg_bytes_store(d, 2, rg_bytes_make(B + 8, 5)); /* long: truncated */
    const uint8_t e2[6] = {0xfe, 0xdc, 0x45, 0x00, 0xaa, 0xaa};
    assert_memory_equal(d, e2, 6);
    rg_bytes_store(d, 4, rg_slice_from(rg_bytes_make(d, 4), 1)); /* overlapping source */
    const uint8_t e3[6] = {0xdc, 0x45, 0x00, 0x00, 0xaa, 0xaa};
    assert_memory_equal(d, e3, 6);
    rg_bytes nul = {NULL, 3}; /* a NULL view is empty */
    rg_bytes_store(d, 3, nul);
    const uint8_t e4[6] = {0x00, 0x00, 0x00, 0x00, 0xaa, 0xaa};
    assert_memory_equal(d, e4, 6);
    rg_bytes_store(d, 0, rg_bytes_make(B, 16)); /* size 0 writes nothing */
    assert_memory_equal(d, e4, 6);
}

static void test_varint(void **state)
{
    (void)state;
    /* RFC 9000, appendix A.1 examples */
    const uint8_t v8[] = {0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c};
    const uint8_t v4[] = {0x9d, 0x7f, 0x3e, 0x7d};
    const uint8_t v2[] = {0x7b, 0xbd};
    const uint8_t v1[] = {0x25};
    const uint8_t v2b[] = {0x40, 0x25};
    uint64_t v;
    assert_int_equal(rg_varint_decode(v8, 8, &v), 8);
    assert_true(v == UINT64_C(151288809941952652));
    assert_int_equal(rg_varint_decode(v4, 4, &v), 4);
    assert_int_equal(v, 494878333);
    assert_int_equal(rg_varint_decode(v2, 2, &v), 2);
    assert_int_equal(v, 15293);
    assert_int_equal(rg_varint_decode(v1, 1, &v), 1);
    assert_int_equal(v, 37);
    assert_int_equal(rg_varint_decode(v2b, 2, &v), 2);
    assert_int_equal(v, 37);
    /* truncated */
    assert_int_equal(rg_varint_decode(v8, 7, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(rg_varint_decode(v8, 0, &v), 0);
    assert_true(rg_varint(rg_bytes_make(v4, 4)) == 494878333);
    assert_int_equal(rg_varint_len(rg_bytes_make(v4, 4)), 4);
    assert_int_equal(rg_varint_len(rg_bytes_make(v4, 3)), 0);
    assert_int_equal(rg_varint(rg_bytes_empty()), 0);
    rg_bytes nul = {NULL, 9};
    assert_int_equal(rg_varint_len(nul), 0);
    rg_cursor c = rg_cur_make(v8, 8);
    assert_int_equal(rg_cur_varint(&c, &v), RG_OK);
    assert_int_equal(c.off, 8);
    assert_int_equal(rg_cur_varint(&c, &v), RG_ETRUNC);
    assert_int_equal(c.off, 8);
}

static void test_expr_ops(void **state)
{
    (void)state;
    const uint64_t M = UINT64_MAX;
    assert_true(rg_op_div(7, 2) == 3);
    assert_true(rg_op_div(7, 0) == 0);
    assert_true(rg_op_div(M, 1) == M);
    assert_true(rg_op_mod(7, 4) == 3);
    assert_true(rg_op_mod(7, 0) == 0);
    assert_true(rg_op_shl(1, 63) == UINT64_C(1) << 63);
    assert_true(rg_op_shl(1, 64) == 0);
    assert_true(rg_op_shl(M, 200) == 0);
    assert_true(rg_op_shl(3, M) == 0);
    assert_true(rg_op_shr(M, 63) == 1);
    assert_true(rg_op_shr(M, 64) == 0);
    assert_true(rg_op_shr(M, M) == 0);
    assert_true(rg_op_min(3, M) == 3 && rg_op_max(3, M) == M);
    assert_true(rg_op_min(5, 5) == 5 && rg_op_max(0, 0) == 0);
    assert_int_equal(rg_op_truth(0), 0);
    assert_int_equal(rg_op_truth(UINT64_C(1) << 63), 1);
    assert_true(rg_op_eq(M, M) == 1 && rg_op_eq(M, 0) == 0);
    assert_true(rg_op_ne(M, M) == 0 && rg_op_ne(M, 0) == 1);
    /* unsigned: M is the largest value, not -1 */
    assert_true(rg_op_lt(0, M) == 1 && rg_op_lt(M, 0) == 0 && rg_op_lt(4, 4) == 0);
    assert_true(rg_op_le(4, 4) == 1 && rg_op_le(M, 0) == 0);
    assert_true(rg_op_gt(M, 0) == 1 && rg_op_gt(4, 4) == 0);
    assert_true(rg_op_ge(4, 4) == 1 && rg_op_ge(0, M) == 0);
}

static void test_checksum(void **state)
{
    (void)state;
    /* IPv4 header from RFC 1071 style example (checksum field 0xb861) */
    uint8_t ip[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                      0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
    assert_int_equal(rg_csum_fold(rg_csum_add(0, ip, 20)), 0);
    ip[10] = ip[11] = 0;
    assert_int_equal(rg_csum_fold(rg_csum_add(0, ip, 20)), 0xb861);
    /* odd length and chaining (even-length first chunk) */
    uint8_t odd[5] = {0x01, 0x02, 0x03, 0x04, 0x05};
    uint32_t s1 = rg_csum_add(0, odd, 5);
    uint32_t s2 = rg_csum_add(rg_csum_add(0, odd, 2), odd + 2, 3);
    assert_int_equal(rg_csum_fold(s1), rg_csum_fold(s2));
    assert_int_equal(rg_csum_fold(s1), (uint16_t) ~(0x0102 + 0x0304 + 0x0500));
    /* long buffer against a 16-bit reference */
    rg_rng rng = {3};
    uint8_t big[1501];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)rng_next(&rng);
    uint64_t ref = 0;
    for (size_t i = 0; i + 1 < sizeof big; i += 2)
        ref += (uint32_t)big[i] << 8 | big[i + 1];
    ref += (uint32_t)big[1500] << 8;
    while (ref >> 16)
        ref = (ref & 0xffff) + (ref >> 16);
    assert_int_equal(rg_csum_fold(rg_csum_add(0, big, sizeof big)), (uint16_t)~ref);
    assert_int_equal(rg_csum_add(7, NULL, 10), 7);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(rg_strerror(RG_OK), "ok");
    assert_string_equal(rg_strerror(RG_ETRUNC), "truncated");
    assert_string_equal(rg_strerror(12345), "unknown error");
    assert_true(rg_random_seed() != rg_random_seed());
}

/* rg_zero clears exactly [p, p + n), for sizes around its 64- and 16-byte
 * pieces, at any alignment (its vector stores are unaligned ones) */
static void test_zero(void **state)
{
    (void)state;
    uint8_t buf[400];
    for (size_t n = 0; n <= 300; n++)
        for (size_t off = 0; off < 9; off++) {
            memset(buf, 0xA5, sizeof buf);
            rg_zero(buf + 8 + off, n);
            for (size_t i = 0; i < sizeof buf; i++) {
                const int inside = i >= 8 + off && i < 8 + off + n;
                assert_int_equal(buf[i], inside ? 0 : 0xA5);
            }
        }
}

/* rg_copy copies exactly [src, src + n) to dst, at any alignment of either */
static void test_copy(void **state)
{
    (void)state;
    uint8_t src[400], dst[400];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    for (size_t n = 0; n <= 300; n++)
        for (size_t off = 0; off < 9; off++) {
            memset(dst, 0xA5, sizeof dst);
            rg_copy(dst + 8 + off, src + 17 - off, n);
            for (size_t i = 0; i < sizeof dst; i++) {
                const int inside = i >= 8 + off && i < 8 + off + n;
                assert_int_equal(dst[i], inside ? src[17 - off + (i - 8 - off)] : 0xA5);
            }
        }
}

/* RFC 1035 4.1.4's example: F.ISI.ARPA at offset 20, FOO.F.ISI.ARPA at 40 as FOO and a pointer
 * to 20, ARPA at 64 as a pointer to 26, the root at 92 */
static void test_names(void **state)
{
    (void)state;
    uint8_t m[96] = {0};
    static const uint8_t f[] = {1, 'F', 3, 'I', 'S', 'I', 4, 'A', 'R', 'P', 'A', 0};
    memcpy(m + 20, f, sizeof f);
    static const uint8_t foo[] = {3, 'F', 'O', 'O', 0xc0, 20};
    memcpy(m + 40, foo, sizeof foo);
    m[64] = 0xc0, m[65] = 26;
    char t[RG_NAME_TEXT_MAX];
    size_t n;
    assert_int_equal(rg_name_read(m, sizeof m, 20, t, sizeof t, &n), 12);
    assert_string_equal(t, "F.ISI.ARPA");
    assert_int_equal(n, 10);
    assert_int_equal(rg_name_read(m, sizeof m, 40, t, sizeof t, &n), 6);
    assert_string_equal(t, "FOO.F.ISI.ARPA");
    assert_int_equal(rg_name_read(m, sizeof m, 64, t, sizeof t, &n), 2);
    assert_string_equal(t, "ARPA");
    assert_int_equal(rg_name_read(m, sizeof m, 92, t, sizeof t, &n), 1);
    assert_string_equal(t, "");
    assert_int_equal(rg_name_len(rg_bytes_make(m, sizeof m), 40), 6);
    /* a text buffer too small fails; no buffer reads the name all the same */
    assert_int_equal(rg_name_read(m, sizeof m, 40, t, 8, &n), 0);
    assert_int_equal(rg_name_read(m, sizeof m, 40, NULL, 0, NULL), 6);
    /* escapes: a dot and a backslash in a label, a byte outside printable ASCII */
    static const uint8_t odd[] = {4, 'a', '.', '\\', 1, 0};
    assert_int_equal(rg_name_read(odd, sizeof odd, 0, t, sizeof t, &n), 6);
    assert_string_equal(t, "a\\.\\\\\\001");
    /* a pointer to itself, a pointer loop through a label, past the end, reserved types */
    static const uint8_t self[] = {0xc0, 0};
    assert_int_equal(rg_name_read(self, sizeof self, 0, t, sizeof t, &n), 0);
    assert_int_equal(n, 0);
    static const uint8_t loop[] = {1, 'b', 0xc0, 0};
    assert_int_equal(rg_name_read(loop, sizeof loop, 0, NULL, 0, NULL), 0);
    static const uint8_t past[] = {0xc0, 9};
    assert_int_equal(rg_name_read(past, sizeof past, 0, NULL, 0, NULL), 0);
    static const uint8_t ext[] = {0x41, 'a', 0}, res[] = {0x81, 'a', 0};
    assert_int_equal(rg_name_read(ext, sizeof ext, 0, NULL, 0, NULL), 0);
    assert_int_equal(rg_name_read(res, sizeof res, 0, NULL, 0, NULL), 0);
    /* cut: in a label, before the final zero, in a pointer */
    assert_int_equal(rg_name_read(f, 5, 0, NULL, 0, NULL), 0);
    assert_int_equal(rg_name_read(f, 11, 0, NULL, 0, NULL), 0);
    assert_int_equal(rg_name_read(foo, 5, 0, NULL, 0, NULL), 0);
    assert_int_equal(rg_name_len(rg_bytes_make(f, sizeof f), 12), 0);
    /* 255 bytes is the limit (RFC 1035 2.3.4): 3 labels of 63 and one of 61, and one more */
    uint8_t big[300] = {0};
    size_t k = 0;
    for (int l = 0; l < 4; l++) {
        big[k++] = l < 3 ? 63 : 61;
        memset(big + k, 'x', big[k - 1]);
        k += big[k - 1];
    }
    big[k++] = 0;
    assert_int_equal(k, 255);
    assert_int_equal(rg_name_read(big, k, 0, t, sizeof t, &n), 255);
    assert_int_equal(n, 253);
    big[192] = 62; /* the last label one byte longer: 256 */
    memmove(big + 193 + 62, big + 193 + 61, 1);
    big[193 + 61] = 'x';
    assert_int_equal(rg_name_read(big, 256, 0, NULL, 0, NULL), 0);
    /* a chain of RG_NAME_JUMPS pointers is read, one more is not */
    uint8_t chain[2 * (RG_NAME_JUMPS + 1) + 1];
    for (unsigned i = 0; i <= RG_NAME_JUMPS; i++)
        chain[2 * i] = (uint8_t)(0xc0 | (2 * i + 2) >> 8), chain[2 * i + 1] = (uint8_t)(2 * i + 2);
    chain[2 * (RG_NAME_JUMPS + 1)] = 0;
    assert_int_equal(rg_name_read(chain, sizeof chain, 2, NULL, 0, NULL), 2);
    assert_int_equal(rg_name_read(chain, sizeof chain, 0, NULL, 0, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads),       cmocka_unit_test(test_checked_gets),
        cmocka_unit_test(test_cursor),      cmocka_unit_test(test_bits),
        cmocka_unit_test(test_slices),      cmocka_unit_test(test_varint),
        cmocka_unit_test(test_bytes_store), cmocka_unit_test(test_expr_ops),
        cmocka_unit_test(test_checksum),    cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_zero),        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests_name("rg_pkt", tests, NULL, NULL);
}
