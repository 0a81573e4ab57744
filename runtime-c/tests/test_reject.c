/* test_reject.c - rg_reject.h: the RSTs and ICMP replies against RFC 9293 3.10.7.1, RFC 792
 * and RFC 4443 field by field, their checksums by an independent sum, the cases that get no
 * reply, every truncation of a frame, and the rate limiter. */
#include "rg_test.h"

#include "rg/rg_reject.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint16_t be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* the one's complement sum by the definition (RFC 1071); 0xffff over a correct checksum */
static uint32_t ref_add(const uint8_t *p, size_t n, uint32_t acc)
{
    for (size_t i = 0; i < n; i += 2)
        acc += (uint32_t)(p[i] << 8) | (i + 1 < n ? p[i + 1] : 0);
    while (acc >> 16)
        acc = (acc & 0xffff) + (acc >> 16);
    return acc;
}

static int l4_ok(const uint8_t *ip, int v6, uint8_t proto, const uint8_t *l4, size_t n)
{
    uint32_t acc = v6 ? ref_add(ip + 8, 32, 0) : ref_add(ip + 12, 8, 0);
    acc = ref_add(l4, n, acc + proto + (uint32_t)n);
    return ref_add(NULL, 0, acc) == 0xffff;
}

static const uint8_t mac_a[6] = {0x02, 0, 0, 0, 0, 0xaa}, mac_b[6] = {0x02, 0, 0, 0, 0, 0xbb};

/* An Ethernet frame a -> b: IPv4 10.0.0.1 -> 10.0.0.2, TCP 40000 -> 80 with flags and n data
 * bytes.  Its length. */
static uint32_t tcp4(uint8_t *f, uint8_t flags, uint32_t seq, uint32_t ack, uint32_t n)
{
    memset(f, 0, 14 + 20 + 20 + n);
    memcpy(f, mac_b, 6);
    memcpy(f + 6, mac_a, 6);
    f[12] = 0x08;
    uint8_t *ip = f + 14;
    ip[0] = 0x45;
    ip[2] = (uint8_t)((40 + n) >> 8);
    ip[3] = (uint8_t)(40 + n);
    ip[8] = 64;
    ip[9] = 6;
    memcpy(ip + 12, (uint8_t[]){10, 0, 0, 1, 10, 0, 0, 2}, 8);
    uint8_t *t = ip + 20;
    t[0] = 40000 >> 8, t[1] = 40000 & 255, t[3] = 80;
    for (int i = 0; i < 4; i++)
        t[4 + i] = (uint8_t)(seq >> (24 - 8 * i)), t[8 + i] = (uint8_t)(ack >> (24 - 8 * i));
    t[12] = 5 << 4;
    t[13] = flags;
    for (uint32_t i = 0; i < n; i++)
        t[20 + i] = (uint8_t)i;
    return 14 + 40 + n;
}

static void check_rst4(const uint8_t *r, uint32_t len, int to_sender)
{
    assert_int_equal(len, 14 + 40);
    assert_memory_equal(r, to_sender ? mac_a : mac_b, 6);
    assert_memory_equal(r + 6, to_sender ? mac_b : mac_a, 6);
    const uint8_t *ip = r + 14;
    assert_int_equal(ref_add(ip, 20, 0), 0xffff);
    assert_int_equal(be16(ip + 2), 40);
    assert_int_equal(ip[9], 6);
    static const uint8_t a1[4] = {10, 0, 0, 1}, a2[4] = {10, 0, 0, 2};
    assert_memory_equal(ip + 12, to_sender ? a2 : a1, 4);
    assert_true(l4_ok(ip, 0, 6, ip + 20, 20));
    assert_int_equal(be16(ip + 20), to_sender ? 80 : 40000);
    assert_int_equal(ip[20 + 13] & 0x04, 0x04);
}

static void test_rst_to_syn(void **state)
{
    (void)state;
    uint8_t f[256];
    rg_reject_out o;
    uint32_t n = tcp4(f, 0x02, 1000, 0, 0);                              /* SYN: SEG.LEN 1 */
    assert_int_equal(rg_reject_build(1, f, n, RG_REJECT_F_BOTH, &o), 1); /* nothing to reset */
    check_rst4(o.frame[0], o.len[0], 1);
    const uint8_t *t = o.frame[0] + 34;
    assert_int_equal(be32(t + 4), 0);    /* SEQ=0 */
    assert_int_equal(be32(t + 8), 1001); /* ACK=SEG.SEQ+SEG.LEN */
    assert_int_equal(t[13], 0x14);       /* RST, ACK */
    /* SYN+FIN with data: SEG.LEN = data + 2; wraps modulo 2^32 */
    n = tcp4(f, 0x03, 0xfffffffeu, 0, 5);
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 1);
    assert_int_equal(be32(o.frame[0] + 34 + 8), 5u);
}

static void test_rst_to_ack(void **state)
{
    (void)state;
    uint8_t f[256];
    rg_reject_out o;
    uint32_t n = tcp4(f, 0x18, 5000, 7000, 10); /* PSH, ACK with 10 bytes */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 1);
    check_rst4(o.frame[0], o.len[0], 1);
    const uint8_t *t = o.frame[0] + 34;
    assert_int_equal(be32(t + 4), 7000); /* SEQ=SEG.ACK */
    assert_int_equal(t[13], 0x04);       /* RST alone */
    assert_int_equal(o.to_receiver[0], 0);
    /* both: the receiver's RST, as if from the sender, at its RCV.NXT */
    assert_int_equal(rg_reject_build(1, f, n, RG_REJECT_F_BOTH, &o), 2);
    check_rst4(o.frame[1], o.len[1], 0);
    t = o.frame[1] + 34;
    assert_int_equal(o.to_receiver[1], 1);
    assert_int_equal(be32(t + 4), 5000);
    assert_int_equal(be32(t + 8), 7000);
    assert_int_equal(t[13], 0x14);
    /* Ethernet padding after the datagram changes nothing */
    uint8_t g[256];
    memcpy(g, f, n);
    memset(g + n, 0xee, 20);
    rg_reject_out o2;
    assert_int_equal(rg_reject_build(1, g, n + 20, RG_REJECT_F_BOTH, &o2), 2);
    assert_memory_equal(o2.frame[0], o.frame[0], o.len[0]);
}

static void test_no_reply(void **state)
{
    (void)state;
    uint8_t f[256];
    rg_reject_out o;
    uint32_t n = tcp4(f, 0x14, 1, 2, 0); /* a RST */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    assert_int_equal(o.why, RG_REJECT_TCP_RST);
    n = tcp4(f, 0x10, 1, 2, 0);
    f[14 + 6] = 0x00, f[14 + 7] = 0x10; /* fragment offset 16 */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    assert_int_equal(o.why, RG_REJECT_NO_ERROR);
    n = tcp4(f, 0x02, 1, 0, 0);
    f[14 + 6] = 0x20; /* first fragment of a SYN: SEG.LEN unknown */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    n = tcp4(f, 0x02, 1, 0, 0);
    f[0] = 0xff; /* link broadcast */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    n = tcp4(f, 0x02, 1, 0, 0);
    f[14 + 16] = 224; /* multicast destination */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    n = tcp4(f, 0x02, 1, 0, 0);
    f[14 + 12] = 0; /* source 0.0.0.0 */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    n = tcp4(f, 0x02, 1, 0, 0);
    f[12] = 0x08, f[13] = 0x06; /* ARP */
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    assert_int_equal(o.why, RG_REJECT_NOT_IP);
    /* an ICMP error (port unreachable) is not answered; an echo request is */
    n = tcp4(f, 0, 0, 0, 0);
    f[14 + 9] = 1;
    f[14 + 20] = 3;
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 0);
    f[14 + 20] = 8;
    assert_int_equal(rg_reject_build(1, f, n, 0, &o), 1);
}

static void test_icmp4(void **state)
{
    (void)state;
    uint8_t f[256];
    rg_reject_out o;
    uint32_t n = tcp4(f, 0, 0, 0, 12);
    f[14 + 9] = 17; /* a UDP datagram of 32 bytes */
    for (unsigned flags = 0; flags < 4; flags++) {
        assert_int_equal(rg_reject_build(1, f, n, flags, &o), 1);
        const uint8_t *ip = o.frame[0] + 14;
        assert_memory_equal(o.frame[0], mac_a, 6);
        assert_int_equal(ref_add(ip, 20, 0), 0xffff);
        assert_int_equal(ip[9], 1);
        static const uint8_t swapped[8] = {10, 0, 0, 2, 10, 0, 0, 1};
        assert_memory_equal(ip + 12, swapped, 8);
        const uint8_t *m = ip + 20;
        assert_int_equal(m[0], 3);
        assert_int_equal(m[1], (flags & RG_REJECT_F_ADMIN) ? 13 : 3);
        /* RFC 792: the internet header and 64 bits of the original data */
        assert_int_equal(o.len[0], 14 + 20 + 8 + 28);
        assert_int_equal(be16(ip + 2), 20 + 8 + 28);
        assert_memory_equal(m + 8, f + 14, 28);
        assert_int_equal(ref_add(m, 8 + 28, 0), 0xffff);
    }
}

/* IPv6 with a hop-by-hop header, then UDP of n bytes, on raw IP (linktype 101) */
static uint32_t udp6(uint8_t *f, uint32_t n)
{
    memset(f, 0, 48 + 8 + n);
    f[0] = 0x60;
    f[4] = (uint8_t)((16 + n) >> 8), f[5] = (uint8_t)(16 + n);
    f[6] = 0; /* hop-by-hop */
    f[7] = 64;
    f[8] = 0x20, f[9] = 0x01, f[10] = 0x0d, f[11] = 0xb8, f[23] = 1;
    f[24] = 0x20, f[25] = 0x01, f[26] = 0x0d, f[27] = 0xb8, f[39] = 2;
    f[40] = 17; /* its next header; length 0: 8 bytes */
    f[42] = 1;  /* PadN */
    f[43] = 4;
    for (uint32_t i = 0; i < n; i++)
        f[56 + i] = (uint8_t)(i * 7);
    return 48 + 8 + n;
}

static void test_icmp6(void **state)
{
    (void)state;
    static uint8_t f[4096];
    static rg_reject_out o;
    uint32_t n = udp6(f, 100);
    assert_int_equal(rg_reject_build(101, f, n, 0, &o), 1);
    const uint8_t *ip = o.frame[0];
    assert_int_equal(ip[6], 58);
    assert_memory_equal(ip + 8, f + 24, 16);
    assert_memory_equal(ip + 24, f + 8, 16);
    assert_int_equal(ip[40], 1);
    assert_int_equal(ip[41], 4);
    assert_int_equal(o.len[0], 48 + n); /* the whole packet fits */
    assert_memory_equal(ip + 48, f, n);
    assert_true(l4_ok(ip, 1, 58, ip + 40, o.len[0] - 40));
    assert_int_equal(rg_reject_build(101, f, n, RG_REJECT_F_ADMIN, &o), 1);
    assert_int_equal(o.frame[0][41], 1);
    /* a big one: quoted up to 1280 bytes in all */
    n = udp6(f, 3000);
    assert_int_equal(rg_reject_build(101, f, n, 0, &o), 1);
    assert_int_equal(o.len[0], 1280);
    assert_int_equal(be16(o.frame[0] + 4), 1240);
    assert_memory_equal(o.frame[0] + 48, f, 1232);
    assert_true(l4_ok(o.frame[0], 1, 58, o.frame[0] + 40, 1240));
    /* an ICMPv6 error is not answered; an echo request is */
    n = udp6(f, 8);
    f[40] = 58;
    f[48] = 1;
    assert_int_equal(rg_reject_build(101, f, n, 0, &o), 0);
    f[48] = 128;
    assert_int_equal(rg_reject_build(101, f, n, 0, &o), 1);
    /* multicast destination */
    n = udp6(f, 8);
    f[24] = 0xff;
    assert_int_equal(rg_reject_build(101, f, n, 0, &o), 0);
}

/* Every prefix of a frame, and random bytes: no read past caplen (ASan), and a reply only
 * when the needed bytes are there. */
static void test_truncations(void **state)
{
    (void)state;
    static rg_reject_out o;
    uint8_t f[256];
    uint32_t n = tcp4(f, 0x18, 5, 6, 30);
    for (uint32_t cut = 0; cut <= n; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, f, cut);
        unsigned got = rg_reject_build(1, c, cut, RG_REJECT_F_BOTH, &o);
        assert_int_equal(got, cut >= 14 + 40 ? 2u : 0u);
        free(c);
    }
    rg_rng r = {42};
    for (int round = 0; round < 20000; round++) {
        uint32_t len = rng_below(&r, 200);
        uint8_t *c = malloc(len ? len : 1);
        memcpy(c, f, len < n ? len : n);
        for (uint32_t k = 0; k < 1 + rng_below(&r, 6); k++)
            if (len) c[rng_below(&r, len)] = (uint8_t)rng_next(&r);
        static const int dlts[] = {1, 101, 113, 276, 0, 108, 9, 228, 229};
        rg_reject_build(dlts[rng_below(&r, 9)], c, len, (unsigned)rng_below(&r, 4), &o);
        assert_true(o.n <= 2);
        for (unsigned i = 0; i < o.n; i++)
            assert_true(o.len[i] <= RG_REJECT_FRAME_MAX);
        free(c);
    }
}

static void test_rate(void **state)
{
    (void)state;
    rg_reject_rate r;
    rg_reject_rate_init(&r, 10);
    uint64_t t = 1000000000000ull;
    int ok = 0;
    for (int i = 0; i < 100; i++)
        ok += rg_reject_rate_take(&r, t); /* a burst at one instant: one second's worth */
    assert_int_equal(ok, 10);
    assert_int_equal(rg_reject_rate_take(&r, t + 50000000ull), 0);   /* 50 ms: half a token */
    assert_int_equal(rg_reject_rate_take(&r, t + 100000000ull), 1);  /* 100 ms: one */
    assert_int_equal(rg_reject_rate_take(&r, t - 5000000000ull), 0); /* back in time: none */
    ok = 0;
    for (int i = 0; i < 100; i++)
        ok += rg_reject_rate_take(&r, t + 100000000ull + 100000000ull * (uint64_t)(i + 1));
    assert_int_equal(ok, 100); /* ten a second, paced: all of them */
    rg_reject_rate_init(&r, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(rg_reject_rate_take(&r, t), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rst_to_syn), cmocka_unit_test(test_rst_to_ack),
        cmocka_unit_test(test_no_reply),   cmocka_unit_test(test_icmp4),
        cmocka_unit_test(test_icmp6),      cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_rate),
    };
    return cmocka_run_group_tests_name("rg_reject", tests, NULL, NULL);
}
