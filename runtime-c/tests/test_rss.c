/* test_rss.c - the Toeplitz hash against Microsoft's RSS verification suite,
 * the symmetric key on real captures (both directions of every connection
 * reach one worker), fragments of one datagram on one worker. */
#include "rg_test.h"

#include <arpa/inet.h>
#include <dirent.h>

#include "rg/rg_rss.h"

/* The key of Microsoft's "Verifying the RSS Hash Calculation" (also the
 * 82599 datasheet's RSS verification suite). */
static const uint8_t ms_key[40] = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
};

typedef struct {
    const char *src, *dst;
    uint16_t sport, dport;
    uint32_t l3, l4;
} vector;

/* the published table: destination/source columns, hashes with and without ports */
static const vector v4[] = {
    {"66.9.149.187", "161.142.100.80", 2794, 1766, 0x323e8fc2, 0x51ccc178},
    {"199.92.111.2", "65.69.140.83", 14230, 4739, 0xd718262a, 0xc626b0ea},
    {"24.19.198.95", "12.22.207.184", 12898, 38024, 0xd2d0a5de, 0x5c2b394a},
    {"38.27.205.30", "209.142.163.6", 48228, 2217, 0x82989176, 0xafc7327f},
    {"153.39.163.191", "202.188.127.2", 44251, 1303, 0x5d1809c5, 0x10e828a2},
};
static const vector v6[] = {
    {"3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 2794, 1766, 0x2cc18cd5, 0x40207d3d},
    {"3ffe:501:8::260:97ff:fe40:efab", "ff02::1", 14230, 4739, 0x0f0c461c, 0xdde51bbf},
    {"3ffe:1900:4545:3:200:f8ff:fe21:67cf", "fe80::200:f8ff:fe21:67cf", 44251, 38024, 0x4b61e985,
     0x02d1feef},
};

static size_t make_tuple(int af, const vector *v, uint8_t *t, int swap)
{
    size_t a = af == AF_INET ? 4 : 16;
    assert_int_equal(inet_pton(af, swap ? v->dst : v->src, t), 1);
    assert_int_equal(inet_pton(af, swap ? v->src : v->dst, t + a), 1);
    uint16_t sp = htons(swap ? v->dport : v->sport), dp = htons(swap ? v->sport : v->dport);
    memcpy(t + 2 * a, &sp, 2);
    memcpy(t + 2 * a + 2, &dp, 2);
    return 2 * a;
}

static void test_ms_vectors(void **state)
{
    (void)state;
    uint8_t t[36];
    for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++) {
        size_t n = make_tuple(AF_INET, &v4[i], t, 0);
        assert_int_equal(rg_toeplitz(ms_key, 40, t, n), v4[i].l3);
        assert_int_equal(rg_toeplitz(ms_key, 40, t, n + 4), v4[i].l4);
    }
    for (size_t i = 0; i < sizeof v6 / sizeof v6[0]; i++) {
        size_t n = make_tuple(AF_INET6, &v6[i], t, 0);
        assert_int_equal(rg_toeplitz(ms_key, 40, t, n), v6[i].l3);
        assert_int_equal(rg_toeplitz(ms_key, 40, t, n + 4), v6[i].l4);
    }
}

/* The symmetric key: swapped tuples hash alike; the Microsoft key does not
 * (so the comparison can tell). */
static void test_symmetric_key(void **state)
{
    (void)state;
    uint8_t a[36], b[36];
    int asym = 0;
    for (int fam = 0; fam < 2; fam++) {
        const vector *vs = fam ? v6 : v4;
        size_t nv = fam ? sizeof v6 / sizeof v6[0] : sizeof v4 / sizeof v4[0];
        int af = fam ? AF_INET6 : AF_INET;
        for (size_t i = 0; i < nv; i++) {
            size_t n = make_tuple(af, &vs[i], a, 0) + 4;
            make_tuple(af, &vs[i], b, 1);
            assert_int_equal(rg_toeplitz(rg_rss_key_symmetric, 40, a, n),
                             rg_toeplitz(rg_rss_key_symmetric, 40, b, n));
            assert_int_equal(rg_toeplitz(rg_rss_key_symmetric, 40, a, n - 4),
                             rg_toeplitz(rg_rss_key_symmetric, 40, b, n - 4));
            asym += rg_toeplitz(ms_key, 40, a, n) != rg_toeplitz(ms_key, 40, b, n);
        }
    }
    assert_int_equal(asym, 8);
}

static const char *traces_dir(void)
{
    const char *d = getenv("RG_TRACES");
    if (!d || !*d) d = "../../shared/traces";
    DIR *x = opendir(d);
    if (!x) return NULL;
    closedir(x);
    return d;
}

/* ---- connections of the real captures ---- */

/* A connection: its endpoints in canonical order (the smaller address:port
 * first), the hash its first frame had, which directions were seen. */
typedef struct {
    uint8_t key[36];
    size_t len;
    uint32_t hash;
    int dirs;
} conn;

typedef struct {
    conn *v;
    size_t n, cap;
} conns;

/* Canonical form of an RSS tuple: endpoints ordered; returns 1 or 2 (which
 * direction the frame was). */
static int canonical(const uint8_t *t, size_t len, uint8_t *out)
{
    size_t a = len == 12 ? 4 : 16;
    uint8_t e1[18], e2[18];
    memcpy(e1, t, a);
    memcpy(e1 + a, t + 2 * a, 2);
    memcpy(e2, t + a, a);
    memcpy(e2 + a, t + 2 * a + 2, 2);
    int swap = memcmp(e1, e2, a + 2) > 0;
    memcpy(out, swap ? e2 : e1, a + 2);
    memcpy(out + a + 2, swap ? e1 : e2, a + 2);
    return swap ? 2 : 1;
}

static conn *find_conn(conns *cs, const uint8_t *key, size_t len)
{
    for (size_t i = 0; i < cs->n; i++)
        if (cs->v[i].len == len && !memcmp(cs->v[i].key, key, len)) return &cs->v[i];
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 64;
        cs->v = realloc(cs->v, cs->cap * sizeof *cs->v);
        assert_non_null(cs->v);
    }
    conn *c = &cs->v[cs->n++];
    memset(c, 0, sizeof *c);
    memcpy(c->key, key, len);
    c->len = len;
    return c;
}

/* An independent look at plain Ethernet/IPv4 frames: the addresses and
 * ports the hash must cover. */
static int indep_eth_v4(const uint8_t *p, uint32_t caplen, uint8_t *t)
{
    if (caplen < 14 + 20 + 4 || p[12] != 0x08 || p[13] != 0x00) return 0;
    const uint8_t *ip = p + 14;
    unsigned ihl = (ip[0] & 15u) * 4;
    if (ip[0] >> 4 != 4 || ihl < 20 || (ip[9] != 6 && ip[9] != 17)) return 0;
    if (((ip[6] << 8 | ip[7]) & 0x3fff) || 14 + ihl + 4 > caplen) return 0;
    memcpy(t, ip + 12, 8);
    memcpy(t + 8, ip + ihl, 4);
    return 1;
}

static void test_real_connections_one_worker(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping real captures\n");
        skip();
        return;
    }
    DIR *dir = opendir(d);
    struct dirent *e;
    uint64_t frames = 0, hashed = 0, checked_v4 = 0;
    size_t bidir = 0, bidir6 = 0, total = 0, workers_seen[4] = {0};
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || (strcmp(e->d_name + n - 5, ".pcap") && strcmp(e->d_name + n - 7, ".pcapng")))
            continue;
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/%s", d, e->d_name);
        rg_pcap *c = rg_pcap_open(path, err, sizeof err);
        if (!c) fail_msg("%s: %s", path, err);
        conns cs = {0};
        rg_frame f;
        while (rg_pcap_next(c, &f) == 1) {
            frames++;
            rg_linkinfo li;
            if (rg_link_info(f.dlt, &li) != RG_OK) continue;
            uint8_t t[36], key[36], ind[12];
            size_t len = rg_rss_tuple(&li, f.data, f.caplen, RG_RSS_L4, t);
            uint32_t h = rg_rss_hash(&li, f.data, f.caplen, RG_RSS_L4);
            assert_int_equal(h, len ? rg_toeplitz(rg_rss_key_symmetric, 40, t, len) : 0);
            if (li.entry == RG_ENTRY_ETHER && indep_eth_v4(f.data, f.caplen, ind)) {
                assert_int_equal(len, 12);
                assert_memory_equal(t, ind, 12);
                checked_v4++;
            }
            if (len != 12 && len != 36) continue;
            hashed++;
            int dir1 = canonical(t, len, key);
            conn *cn = find_conn(&cs, key, len);
            if (cn->dirs && cn->hash != h)
                fail_msg("%s: frame %llu: hash %08x, the connection's %08x", path,
                         (unsigned long long)frames, h, cn->hash);
            cn->hash = h;
            cn->dirs |= dir1;
        }
        rg_pcap_close(c);
        for (size_t i = 0; i < cs.n; i++) {
            total++;
            if (cs.v[i].dirs == 3) {
                bidir++;
                bidir6 += cs.v[i].len == 36;
                workers_seen[rg_rss_worker(cs.v[i].hash, 4)]++;
            }
        }
        free(cs.v);
    }
    closedir(dir);
    print_message("  %llu frames, %llu hashed on ports; %zu connections, %zu with both "
                  "directions (%zu IPv6); %llu checked against an independent parse; "
                  "4 workers get %zu/%zu/%zu/%zu\n",
                  (unsigned long long)frames, (unsigned long long)hashed, total, bidir, bidir6,
                  (unsigned long long)checked_v4, workers_seen[0], workers_seen[1], workers_seen[2],
                  workers_seen[3]);
    /* the captures have dozens of two-way connections, IPv4 and IPv6 */
    assert_true(bidir >= 20);
    assert_true(bidir6 >= 3);
    assert_true(checked_v4 >= 500);
    for (int w = 0; w < 4; w++)
        assert_true(workers_seen[w] > 0); /* it balances at all */
}

/* IPv4 fragments of one datagram: one hash (the addresses'), though the first
 * fragment carries the ports. */
static void test_ipv4_fragments_one_worker(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping real captures\n");
        skip();
        return;
    }
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/ipv4-frag-socks5-http.pcap", d);
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    if (!c) fail_msg("%s: %s", path, err);
    rg_frame f;
    int frags = 0, firsts = 0, lasts = 0;
    while (rg_pcap_next(c, &f) == 1) {
        rg_linkinfo li;
        assert_int_equal(rg_link_info(f.dlt, &li), RG_OK);
        const uint8_t *p = f.data;
        if (f.caplen < 34 || p[12] != 0x08 || p[13] != 0x00) continue;
        const uint8_t *ip = p + 14;
        unsigned fo = (unsigned)(ip[6] << 8 | ip[7]);
        if (!(fo & 0x3fff)) continue;
        frags++;
        firsts += (fo & 0x1fff) == 0;
        lasts += !(fo & 0x2000);
        uint32_t want = rg_toeplitz(rg_rss_key_symmetric, 40, ip + 12, 8);
        assert_int_equal(rg_rss_hash(&li, p, f.caplen, RG_RSS_L4), want);
        /* and the reverse direction's fragments: same addresses swapped */
        uint8_t sw[8];
        memcpy(sw, ip + 16, 4);
        memcpy(sw + 4, ip + 12, 4);
        assert_int_equal(rg_toeplitz(rg_rss_key_symmetric, 40, sw, 8), want);
    }
    rg_pcap_close(c);
    print_message("  %d fragments (%d first, %d last) hashed on their addresses\n", frags, firsts,
                  lasts);
    assert_true(frags >= 60 && firsts >= 4 && lasts >= 4);
}

/* IPv6: a UDP datagram in two fragments, and an atomic fragment (a whole
 * datagram: hashed with its ports). */
static size_t v6_frame(uint8_t *b, int swap, int frag, uint16_t fo_m)
{
    static const uint8_t a1[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
    static const uint8_t a2[16] = {0x20, 0x01, 0x0d, 0xb8, [14] = 0x12, [15] = 0x34};
    memset(b, 0, 128);
    b[12] = 0x86;
    b[13] = 0xdd;
    uint8_t *ip = b + 14;
    ip[0] = 0x60;
    ip[6] = frag ? 44 : 17;
    ip[7] = 64;
    memcpy(ip + 8, swap ? a2 : a1, 16);
    memcpy(ip + 24, swap ? a1 : a2, 16);
    uint8_t *q = ip + 40;
    if (frag) {
        q[0] = 17;
        q[2] = (uint8_t)(fo_m >> 8);
        q[3] = (uint8_t)fo_m;
        q[7] = 0x77; /* identification */
        q += 8;
    }
    q[0] = swap ? 0x00 : 0x30; /* ports 12345 <-> 53 */
    q[1] = swap ? 0x35 : 0x39;
    q[2] = swap ? 0x30 : 0x00;
    q[3] = swap ? 0x39 : 0x35;
    return 14 + 40 + (frag ? 8 : 0) + 8 + 16;
}

static void test_ipv6_fragments_one_worker(void **state)
{
    (void)state;
    rg_linkinfo li;
    assert_int_equal(rg_link_info(1, &li), RG_OK);
    uint8_t b[128];
    size_t n = v6_frame(b, 0, 0, 0);
    uint32_t whole = rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4);
    n = v6_frame(b, 1, 0, 0);
    assert_int_equal(rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4), whole); /* reverse */
    n = v6_frame(b, 0, 1, 0);                                             /* atomic */
    assert_int_equal(rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4), whole);
    n = v6_frame(b, 0, 1, 1); /* first fragment: offset 0, M */
    uint32_t first = rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4);
    n = v6_frame(b, 0, 1, 2 << 3); /* last: offset 16 bytes */
    uint32_t last = rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4);
    n = v6_frame(b, 1, 1, 1); /* the reverse direction's first fragment */
    uint32_t rfirst = rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4);
    assert_int_equal(first, last);
    assert_int_equal(first, rfirst);
    assert_int_equal(first, rg_toeplitz(rg_rss_key_symmetric, 40, b + 14 + 8, 32));
    assert_int_not_equal(first, whole); /* ports make a difference here */
    assert_int_equal(rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L3), first);
}

/* Bad input: every prefix of a frame hashes without reading past it (ASan
 * watches), and frames without IP hash to 0. */
static void test_truncated_frames(void **state)
{
    (void)state;
    rg_linkinfo li;
    assert_int_equal(rg_link_info(1, &li), RG_OK);
    uint8_t b[128];
    size_t n = v6_frame(b, 0, 1, 1);
    for (size_t k = 0; k <= n; k++) {
        uint8_t *cut = malloc(k ? k : 1);
        memcpy(cut, b, k);
        (void)rg_rss_hash(&li, cut, (uint32_t)k, RG_RSS_L4);
        free(cut);
    }
    uint8_t arp[42] = {[12] = 0x08, [13] = 0x06};
    assert_int_equal(rg_rss_hash(&li, arp, sizeof arp, RG_RSS_L4), 0);
    rg_rss_dist dist;
    rg_rss_dist_init(&dist, 3, RG_RSS_L4);
    rg_frame f = {.data = arp, .caplen = sizeof arp, .len = sizeof arp, .dlt = 1};
    assert_int_equal(rg_rss_dist_worker(&dist, &f), 0);
    f.data = b;
    f.caplen = f.len = (uint32_t)n;
    uint32_t h = rg_rss_hash(&li, b, (uint32_t)n, RG_RSS_L4);
    assert_int_equal(rg_rss_dist_worker(&dist, &f), (h & 127) % 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ms_vectors),
        cmocka_unit_test(test_symmetric_key),
        cmocka_unit_test(test_real_connections_one_worker),
        cmocka_unit_test(test_ipv4_fragments_one_worker),
        cmocka_unit_test(test_ipv6_fragments_one_worker),
        cmocka_unit_test(test_truncated_frames),
    };
    return cmocka_run_group_tests_name("rss", tests, NULL, NULL);
}
