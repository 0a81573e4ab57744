/* test_csum.c - rg_csum.h: verification against published values, and the incremental
 * fix-up of writes against a full recomputation by an independent sum. */
#include "rg_test.h"

#include "rg/rg_csum.h"

/* RFC 1071 by the definition: the complement of the one's complement sum of 16-bit words */
static uint16_t ref_sum(const uint8_t *p, size_t n, uint32_t acc)
{
    for (size_t i = 0; i < n; i += 2)
        acc += (uint32_t)(p[i] << 8) | (i + 1 < n ? p[i + 1] : 0);
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return (uint16_t)~acc;
}

static void test_crc32c_vector(void **state)
{
    (void)state;
    /* RFC 3720 B.4 / the check value of CRC-32C */
    assert_int_equal(rg_crc32c((const uint8_t *)"123456789", 9, 0), 0xe3069283u);
    uint8_t zeros[32] = {0};
    assert_int_equal(rg_crc32c(zeros, 32, 0), 0x8a9136aau); /* RFC 3720 B.4: 32 bytes of 0 */
}

/* the IPv4 header of the usual RFC 1071 example (checksum 0xb861 with total length 0x73),
 * shortened to 35 bytes (0xb8b1), and a UDP datagram */
static uint8_t pkt[] = {
    0x45, 0x00, 0x00, 0x23, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0xb1, 0xc0, 0xa8, 0x00,
    0x01, 0xc0, 0xa8, 0x00, 0xc7, /* IPv4, 20 bytes */
    0x30, 0x39, 0x00, 0x35, 0x00, 0x0f, 0x00, 0x00, 'h',  'e',  'l',  'l',  'o',  '!',  '!',
};

static const rg_csum_desc descs[] = {
    {0, 10, RG_CSUM_INTERNET, RG_CSUM_HEADER, 0, 0, -1, 0, 0, 0, -1, 0, "ip"},
    {1, 6, RG_CSUM_INTERNET, RG_CSUM_LAYER, 1, 17, 0, 12, 16, 4, 2, 0, "udp"},
};

static void setup_pkt(rg_span *spans, rg_csum_pkt *c)
{
    static uint8_t pristine[sizeof pkt];
    static int saved;
    if (!saved) memcpy(pristine, pkt, sizeof pkt), saved = 1;
    memcpy(pkt, pristine, sizeof pkt); /* what earlier writes changed */
    spans[0] = (rg_span){pkt, 20, sizeof pkt, 7, 0};
    spans[1] = (rg_span){pkt + 20, 8, sizeof pkt - 20, 7, 0};
    *c = (rg_csum_pkt){descs, 2, spans, 7, pkt, sizeof pkt};
    /* the UDP checksum by the reference sum over pseudo-header and datagram */
    pkt[26] = pkt[27] = 0;
    uint32_t ph = 0xc0a8 + 0x0001 + 0xc0a8 + 0x00c7 + 17 + 15;
    uint16_t u = ref_sum(pkt + 20, 15, ph);
    pkt[26] = (uint8_t)(u >> 8);
    pkt[27] = (uint8_t)u;
}

static void test_verify(void **state)
{
    (void)state;
    rg_span spans[2];
    rg_csum_pkt c;
    setup_pkt(spans, &c);
    assert_int_equal(ref_sum(pkt, 20, 0), 0); /* the reference sum agrees */
    assert_int_equal(rg_csum_verify(&c, &descs[0]), 1);
    assert_int_equal(rg_csum_verify(&c, &descs[1]), 1);
    pkt[33] ^= 1;
    assert_int_equal(rg_csum_verify(&c, &descs[1]), 0);
    pkt[33] ^= 1;
    spans[0].pkt = 6; /* stale: the pseudo-header's layer is not in this packet */
    assert_int_equal(rg_csum_verify(&c, &descs[1]), -1);
}

static void test_write_fixes_up(void **state)
{
    (void)state;
    rg_span spans[2];
    rg_csum_pkt c;
    uint32_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        setup_pkt(spans, &c);
        seed = seed * 1103515245u + 12345u;
        /* any byte range outside the checksum fields: ttl, addresses, ports, payload (odd
         * offsets and lengths included) */
        static const uint8_t at[] = {8, 9, 12, 13, 15, 16, 19, 20, 21, 22, 28, 29, 31, 34};
        uint8_t off = at[(seed >> 8) % sizeof at];
        uint8_t n = (uint8_t)(1 + (seed >> 16) % 3);
        if (off + n > sizeof pkt || (off < 12 && off + n > 10) || (off < 28 && off + n > 26)) n = 1;
        uint8_t v[3] = {(uint8_t)(seed >> 3), (uint8_t)(seed >> 11), (uint8_t)(seed >> 19)};
        assert_int_equal(rg_csum_write(&c, pkt + off, v, n), 0);
        assert_memory_equal(pkt + off, v, n);
        assert_int_equal(rg_csum_verify(&c, &descs[0]), 1);
        assert_int_equal(rg_csum_verify(&c, &descs[1]), 1);
        assert_int_not_equal(pkt[26] | pkt[27], 0); /* a computed zero is sent as 0xffff */
    }
    uint8_t outside[2] = {1, 2};
    assert_int_equal(rg_csum_write(&c, outside, outside, 2), -1); /* not in the frame */
}

/* A SYN with options MSS 1460, NOP, NOP, SACK-permitted... over IPv4 (RFC 1071 sums by the
 * reference): the MSS lowered, the checksum still right (verified by the reference sum, not
 * by the code under test); not raised, not touched in a segment without SYN. */
static void test_clamp_mss(void **state)
{
    (void)state;
    uint8_t f[20 + 32] = {0x45, 0, 0, 52, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2};
    uint8_t *t = f + 20;
    static const uint8_t tcp[32] = {0x9c, 0x40,   0,    80,   0,    0, 0x10, 0, 0, 0, 0,
                                    0,    8 << 4, 0x02, 0xfa, 0xf0, 0, 0,    0, 0, 2, 4,
                                    0x05, 0xb4,   1,    1,    4,    2, 3,    3, 7, 0};
    static const rg_csum_desc tdesc[] = {
        {0, 10, RG_CSUM_INTERNET, RG_CSUM_HEADER, 0, 0, -1, 0, 0, 0, -1, 0, "ip"},
        {1, 16, RG_CSUM_INTERNET, RG_CSUM_LAYER, 0, 6, 0, 12, 16, 4, 2, 0, "tcp"},
    };
    for (int round = 0; round < 4; round++) {
        memcpy(t, tcp, 32);
        if (round == 3) t[13] = 0x10; /* an ACK: no MSS to clamp */
        uint32_t ph = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 6 + 32;
        uint16_t cs = ref_sum(t, 32, ph);
        t[16] = (uint8_t)(cs >> 8), t[17] = (uint8_t)cs;
        rg_span spans[2] = {{f, 20, sizeof f, 3, 0}, {t, 32, 32, 3, 0}};
        rg_csum_pkt c = {tdesc, 2, spans, 3, f, sizeof f};
        const uint16_t to[] = {1360, 1460, 1500, 1000};
        int got = rg_tcp_clamp_mss(&c, 1, to[round]);
        assert_int_equal(got, round == 0);
        assert_int_equal(t[22] << 8 | t[23], round == 0 ? 1360 : 1460);
        assert_int_equal(ref_sum(t, 32, ph), 0); /* the checksum verifies */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vector),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_write_fixes_up),
        cmocka_unit_test(test_clamp_mss),
    };
    return cmocka_run_group_tests_name("rg_csum", tests, NULL, NULL);
}
