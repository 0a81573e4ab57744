/* test_pcap.c - capture input: link types, pcap/pcapng, real captures. */
#include "rg_test.h"

#include <dirent.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include "rg/rg_pcap.h"

/* ---- an independent reader of classic pcap record headers ---- */
typedef struct {
    int ok;            /* 1 when the file is classic pcap */
    uint32_t linktype; /* from the file header */
    uint32_t snaplen;
    uint64_t count, caplen_sum, wirelen_sum, truncated;
    uint64_t first_ns, last_ns;
} pcap_info;

static uint32_t rd32(const uint8_t *p, int swap)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return swap ? __builtin_bswap32(v) : v;
}

static pcap_info indep_parse(const char *path)
{
    pcap_info in;
    memset(&in, 0, sizeof in);
    FILE *f = fopen(path, "rb");
    if (!f) return in;
    uint8_t gh[24];
    if (fread(gh, 1, 24, f) != 24) {
        fclose(f);
        return in;
    }
    uint32_t magic;
    memcpy(&magic, gh, 4);
    int swap, nsec;
    if (magic == 0xa1b2c3d4 || magic == 0xa1b23c4d) {
        swap = 0;
    } else if (magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1) {
        swap = 1;
    } else {
        fclose(f); /* pcapng or something else */
        return in;
    }
    nsec = rd32(gh, swap) == 0xa1b23c4d;
    in.snaplen = rd32(gh + 16, swap);
    in.linktype = rd32(gh + 20, swap) & 0xffff;
    uint8_t rh[16];
    while (fread(rh, 1, 16, f) == 16) {
        uint64_t sec = rd32(rh, swap), frac = rd32(rh + 4, swap);
        uint32_t incl = rd32(rh + 8, swap), orig = rd32(rh + 12, swap);
        uint64_t ns = sec * 1000000000u + (nsec ? frac : frac * 1000u);
        if (!in.count) in.first_ns = ns;
        in.last_ns = ns;
        in.count++;
        in.caplen_sum += incl;
        in.wirelen_sum += orig;
        if (incl < orig) in.truncated++;
        if (fseek(f, incl, SEEK_CUR) != 0) break;
    }
    fclose(f);
    in.ok = 1;
    return in;
}

/* ---- writers for synthetic captures ---- */
typedef struct {
    uint64_t ts_ns;
    const uint8_t *data;
    uint32_t caplen, len;
} wframe;

static void put32(FILE *f, uint32_t v, int swap)
{
    if (swap) v = __builtin_bswap32(v);
    fwrite(&v, 4, 1, f);
}
static void put16(FILE *f, uint16_t v, int swap)
{
    if (swap) v = (uint16_t)(v >> 8 | v << 8);
    fwrite(&v, 2, 1, f);
}

static void write_pcap(const char *path, uint32_t linktype, int nsec, int swap, const wframe *fr,
                       int n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put32(f, nsec ? 0xa1b23c4d : 0xa1b2c3d4, swap);
    put16(f, 2, swap);
    put16(f, 4, swap);
    put32(f, 0, swap);
    put32(f, 0, swap);
    put32(f, 65535, swap);
    put32(f, linktype, swap);
    for (int i = 0; i < n; i++) {
        put32(f, (uint32_t)(fr[i].ts_ns / 1000000000u), swap);
        uint32_t frac = (uint32_t)(fr[i].ts_ns % 1000000000u);
        put32(f, nsec ? frac : frac / 1000u, swap);
        put32(f, fr[i].caplen, swap);
        put32(f, fr[i].len, swap);
        fwrite(fr[i].data, 1, fr[i].caplen, f);
    }
    fclose(f);
}

/* Minimal pcapng: SHB, IDB (optionally if_tsresol = 9), EPBs. */
static void write_pcapng(const char *path, uint16_t linktype, int tsresol_ns, const wframe *fr,
                         int n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    /* SHB */
    put32(f, 0x0A0D0D0A, 0);
    put32(f, 28, 0);
    put32(f, 0x1A2B3C4D, 0);
    put16(f, 1, 0);
    put16(f, 0, 0);
    put32(f, 0xffffffff, 0);
    put32(f, 0xffffffff, 0);
    put32(f, 28, 0);
    /* IDB */
    uint32_t idb_len = 20 + (tsresol_ns ? 12 : 0);
    put32(f, 1, 0);
    put32(f, idb_len, 0);
    put16(f, linktype, 0);
    put16(f, 0, 0);
    put32(f, 262144, 0);
    if (tsresol_ns) {
        put16(f, 9, 0); /* if_tsresol */
        put16(f, 1, 0);
        uint8_t opt[4] = {9, 0, 0, 0};
        fwrite(opt, 1, 4, f);
        put32(f, 0, 0); /* opt_endofopt */
    }
    put32(f, idb_len, 0);
    for (int i = 0; i < n; i++) {
        uint32_t pad = (4 - fr[i].caplen % 4) % 4;
        uint32_t blen = 32 + fr[i].caplen + pad;
        uint64_t ts = tsresol_ns ? fr[i].ts_ns : fr[i].ts_ns / 1000u;
        put32(f, 6, 0);
        put32(f, blen, 0);
        put32(f, 0, 0);
        put32(f, (uint32_t)(ts >> 32), 0);
        put32(f, (uint32_t)ts, 0);
        put32(f, fr[i].caplen, 0);
        put32(f, fr[i].len, 0);
        fwrite(fr[i].data, 1, fr[i].caplen, f);
        uint8_t z[3] = {0, 0, 0};
        fwrite(z, 1, pad, f);
        put32(f, blen, 0);
    }
    fclose(f);
}

/* ---- test packets ---- */
static const uint8_t IPV4[20] = {0x45, 0, 0, 20, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2};
static const uint8_t IPV6[40] = {0x60, 0, 0, 0, 0, 0, 6, 64};

static size_t cat(uint8_t *dst, const uint8_t *hdr, size_t hl, const uint8_t *net, size_t nl)
{
    if (hl) memcpy(dst, hdr, hl);
    memcpy(dst + hl, net, nl);
    return hl + nl;
}

static char tmpdir[64];

static int setup_dir(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/rg_pcap_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(tmpdir);
    return 0;
}

/* Locate on an exact-size heap copy, so ASan reports any read past caplen. */
static int locate_exact(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_netpos *np)
{
    uint8_t *c = malloc(caplen ? caplen : 1);
    if (caplen) memcpy(c, p, caplen);
    int rc = rg_link_locate(li, c, caplen, np);
    free(c);
    return rc;
}

static void test_link_info(void **state)
{
    (void)state;
    rg_linkinfo li;
    assert_int_equal(rg_link_info(DLT_EN10MB, &li), RG_OK);
    assert_int_equal(li.entry, RG_ENTRY_ETHER);
    assert_int_equal(li.net_off, 14);
    assert_int_equal(rg_link_info(DLT_RAW, &li), RG_OK);
    assert_int_equal(li.entry, RG_ENTRY_IP);
    assert_int_equal(li.net_off, 0);
    assert_int_equal(rg_link_info(101, &li), RG_OK);
    assert_int_equal(li.entry, RG_ENTRY_IP);
    assert_int_equal(rg_link_info(228, &li), RG_OK);
    assert_int_equal(li.entry, RG_ENTRY_IPV4);
    assert_int_equal(rg_link_info(229, &li), RG_OK);
    assert_int_equal(li.entry, RG_ENTRY_IPV6);
    assert_int_equal(rg_link_info(113, &li), RG_OK);
    assert_int_equal(li.net_off, 16);
    assert_int_equal(rg_link_info(276, &li), RG_OK);
    assert_int_equal(li.net_off, 20);
    assert_int_equal(rg_link_info(0, &li), RG_OK);
    assert_int_equal(li.net_off, 4);
    assert_int_equal(rg_link_info(DLT_LOOP, &li), RG_OK);
    assert_int_equal(li.net_off, 4);
    assert_int_equal(rg_link_info(105, &li), RG_EUNSUPPORTED); /* 802.11 */
    assert_int_equal(li.entry, RG_ENTRY_UNKNOWN);
    rg_netpos np;
    assert_int_equal(rg_link_locate(&li, IPV4, 20, &np), RG_EUNSUPPORTED);
}

static void test_locate(void **state)
{
    (void)state;
    rg_linkinfo li;
    rg_netpos np;
    uint8_t f[128];
    size_t n;
    /* Ethernet, QinQ + VLAN + IPv6 */
    const uint8_t eth_qinq[22] = {[12] = 0x88, 0xa8, 0, 10, 0x81, 0x00, 0, 20, 0x86, 0xdd};
    rg_link_info(DLT_EN10MB, &li);
    n = cat(f, eth_qinq, 22, IPV6, 40);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
    assert_int_equal(np.off, 22);
    assert_int_equal(np.vlans, 2);
    assert_int_equal(locate_exact(&li, f, 13, &np), RG_ETRUNC);
    assert_int_equal(locate_exact(&li, f, 17, &np), RG_ETRUNC); /* cut inside a tag */
    const uint8_t eth_arp[14] = {[12] = 0x08, 0x06};
    assert_int_equal(locate_exact(&li, eth_arp, 14, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_UNKNOWN);
    assert_int_equal(np.ethertype, 0x0806);
    /* SLL: protocol at 14 */
    const uint8_t sll[16] = {0, 0, 0, 1, 0, 6, [14] = 0x08, 0x00};
    rg_link_info(DLT_LINUX_SLL, &li);
    n = cat(f, sll, 16, IPV4, 20);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    assert_int_equal(np.off, 16);
    assert_int_equal(locate_exact(&li, f, 15, &np), RG_ETRUNC);
    /* SLL2: protocol at 0 */
    const uint8_t sll2[20] = {0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6};
    rg_link_info(DLT_LINUX_SLL2, &li);
    n = cat(f, sll2, 20, IPV6, 40);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
    assert_int_equal(np.off, 20);
    /* NULL: host byte order, both accepted; BSD AF_INET6 values */
    rg_link_info(DLT_NULL, &li);
    const uint8_t null_le4[4] = {2, 0, 0, 0}, null_be6[4] = {0, 0, 0, 30};
    const uint8_t null_le6[4] = {24, 0, 0, 0}, null_bad[4] = {0, 0, 0, 99};
    n = cat(f, null_le4, 4, IPV4, 20);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    assert_int_equal(np.off, 4);
    n = cat(f, null_be6, 4, IPV6, 40);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
    n = cat(f, null_le6, 4, IPV6, 40);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
    assert_int_equal(locate_exact(&li, null_bad, 4, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_UNKNOWN);
    assert_int_equal(locate_exact(&li, f, 3, &np), RG_ETRUNC);
    /* LOOP: network byte order */
    rg_link_info(DLT_LOOP, &li);
    const uint8_t loop4[4] = {0, 0, 0, 2};
    n = cat(f, loop4, 4, IPV4, 20);
    assert_int_equal(locate_exact(&li, f, (uint32_t)n, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    /* raw: version nibble */
    rg_link_info(DLT_RAW, &li);
    assert_int_equal(locate_exact(&li, IPV6, 40, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
    assert_int_equal(np.off, 0);
    assert_int_equal(locate_exact(&li, IPV4, 1, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    assert_int_equal(locate_exact(&li, IPV4, 0, &np), RG_ETRUNC);
    const uint8_t junk[1] = {0x20};
    assert_int_equal(locate_exact(&li, junk, 1, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_UNKNOWN);
    rg_link_info(228, &li);
    assert_int_equal(locate_exact(&li, IPV4, 20, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    rg_link_info(229, &li);
    assert_int_equal(locate_exact(&li, IPV6, 40, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV6);
}

/* Write a capture per link type and read it back. */
static void roundtrip(const char *name, uint32_t linktype, const uint8_t *hdr, size_t hl,
                      rg_entry want_proto, uint32_t want_off, int nsec, int swap)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.pcap", tmpdir, name);
    uint8_t f1[128], f2[128];
    size_t n1 = cat(f1, hdr, hl, IPV4, 20);
    size_t n2 = cat(f2, hdr, hl, IPV6, 40);
    if (want_proto == RG_ENTRY_IPV6) n1 = cat(f1, hdr, hl, IPV6, 40);
    wframe fr[3] = {
        {UINT64_C(1700000000123456789), f1, (uint32_t)n1, (uint32_t)n1},
        {UINT64_C(1700000001000000000), f2, (uint32_t)n2, (uint32_t)n2 + 100}, /* snapped */
        {UINT64_C(1700000002999999000), f1, (uint32_t)hl / 2, (uint32_t)n1},   /* link header cut */
    };
    write_pcap(path, linktype, nsec, swap, fr, 3);
    char err[256];
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    if (!c) fail_msg("%s: %s", name, err);
    const rg_linkinfo lic = *rg_pcap_link(c), *li = &lic;
    assert_int_not_equal(li->entry, RG_ENTRY_UNKNOWN);
    assert_int_equal(rg_pcap_snaplen(c), 65535);
    rg_frame f;
    rg_netpos np;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rg_pcap_next(c, &f), 1);
        assert_int_equal(f.caplen, fr[i].caplen);
        assert_int_equal(f.len, fr[i].len);
        uint64_t want_ts = nsec ? fr[i].ts_ns : fr[i].ts_ns / 1000 * 1000;
        assert_true(f.ts_ns == want_ts);
        assert_memory_equal(f.data, fr[i].data, f.caplen);
        int rc = locate_exact(li, f.data, f.caplen, &np);
        if (i == 2) { /* link header cut (raw: empty frame) */
            assert_int_equal(rc, RG_ETRUNC);
        } else {
            assert_int_equal(rc, RG_OK);
            assert_int_equal(np.off, want_off);
            /* the link header (or link type) decides; only raw IP reads the version */
            int raw = linktype == 101 || linktype == 12 || linktype == 14;
            assert_int_equal(np.proto, (i == 1 && raw) ? RG_ENTRY_IPV6 : want_proto);
        }
    }
    assert_int_equal(rg_pcap_next(c, &f), 0);
    assert_int_equal(rg_pcap_next(c, &f), 0);
    rg_pcap_close(c);
    /* in memory */
    rg_capture cap;
    assert_int_equal(rg_capture_load(path, &cap, err, sizeof err), RG_OK);
    assert_int_equal(cap.count, 3);
    assert_int_equal(cap.bytes, fr[0].caplen + fr[1].caplen + fr[2].caplen);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(((uintptr_t)cap.frames[i].data) % 8, 0);
        assert_int_equal(cap.frames[i].caplen, fr[i].caplen);
        assert_memory_equal(cap.frames[i].data, fr[i].data, fr[i].caplen);
    }
    assert_int_equal(cap.link.dlt, li->dlt);
    rg_capture_free(&cap);
}

static void test_synthetic_captures(void **state)
{
    (void)state;
    const uint8_t eth[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00};
    const uint8_t sll[16] = {0, 0, 0, 1, 0, 6, [14] = 0x08, 0x00};
    const uint8_t sll2[20] = {0x08, 0x00};
    const uint8_t null4[4] = {2, 0, 0, 0};
    const uint8_t loop4[4] = {0, 0, 0, 2};
    /* (the second frame of each carries IPv6 after the same link header) */
    const uint8_t null4_be[4] = {0, 0, 0, 2}; /* DLT_NULL from a big-endian host */
    const uint8_t null6[4] = {24, 0, 0, 0};   /* AF_INET6 of OpenBSD/NetBSD */
    const uint8_t loop6[4] = {0, 0, 0, 30};   /* AF_INET6 of macOS, network order */
    const uint8_t eth_qinq[22] = {1,  2,    3,    4, 5,   6,    7,    8, 9,   10,   11,
                                  12, 0x88, 0xa8, 0, 200, 0x81, 0x00, 0, 100, 0x86, 0xdd};
    roundtrip("eth_us", 1, eth, 14, RG_ENTRY_IPV4, 14, 0, 0);
    roundtrip("eth_ns_swapped", 1, eth, 14, RG_ENTRY_IPV4, 14, 1, 1);
    roundtrip("eth_qinq", 1, eth_qinq, 22, RG_ENTRY_IPV6, 22, 0, 0);
    roundtrip("raw101", 101, NULL, 0, RG_ENTRY_IPV4, 0, 0, 0);
    roundtrip("raw12", 12, NULL, 0, RG_ENTRY_IPV4, 0, 1, 0);
    roundtrip("raw14", 14, NULL, 0, RG_ENTRY_IPV4, 0, 0, 1);
    roundtrip("ipv4_228", 228, NULL, 0, RG_ENTRY_IPV4, 0, 1, 0);
    roundtrip("ipv6_229", 229, NULL, 0, RG_ENTRY_IPV6, 0, 0, 1);
    roundtrip("sll", 113, sll, 16, RG_ENTRY_IPV4, 16, 0, 0);
    roundtrip("sll2", 276, sll2, 20, RG_ENTRY_IPV4, 20, 1, 1);
    roundtrip("null_le", 0, null4, 4, RG_ENTRY_IPV4, 4, 0, 1);
    roundtrip("null_be", 0, null4_be, 4, RG_ENTRY_IPV4, 4, 1, 0);
    roundtrip("null6", 0, null6, 4, RG_ENTRY_IPV6, 4, 0, 0);
    roundtrip("loop", 108, loop4, 4, RG_ENTRY_IPV4, 4, 1, 1);
    roundtrip("loop6", 108, loop6, 4, RG_ENTRY_IPV6, 4, 0, 0);
}

/* Captures whose link header names the protocol: every frame IPv4. */
static void roundtrip_hdr(const char *name, uint32_t linktype, const uint8_t *hdr, size_t hl,
                          uint32_t want_off)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.pcap", tmpdir, name);
    uint8_t f1[128];
    size_t n1 = cat(f1, hdr, hl, IPV4, 20);
    wframe fr[2] = {{1000, f1, (uint32_t)n1, (uint32_t)n1}, {2000, f1, 2, (uint32_t)n1}};
    write_pcap(path, linktype, 0, 0, fr, 2);
    char err[256];
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    if (!c) fail_msg("%s: %s", name, err);
    rg_frame f;
    rg_netpos np;
    assert_int_equal(rg_pcap_next(c, &f), 1);
    assert_int_equal(locate_exact(rg_pcap_link(c), f.data, f.caplen, &np), RG_OK);
    assert_int_equal(np.proto, RG_ENTRY_IPV4);
    assert_int_equal(np.off, want_off);
    assert_int_equal(f.ts_ns, 1000);
    assert_int_equal(rg_pcap_next(c, &f), 1);
    assert_int_equal(f.caplen, 2);
    assert_int_equal(locate_exact(rg_pcap_link(c), f.data, f.caplen, &np), RG_ETRUNC);
    assert_int_equal(rg_pcap_next(c, &f), 0);
    rg_pcap_close(c);
}

static void test_synthetic_link_headers(void **state)
{
    (void)state;
    const uint8_t sll[16] = {0, 0, 0, 1, 0, 6, [14] = 0x08, 0x00};
    const uint8_t sll2[20] = {0x08, 0x00};
    const uint8_t null4[4] = {2, 0, 0, 0};
    const uint8_t loop4[4] = {0, 0, 0, 2};
    roundtrip_hdr("sll", 113, sll, 16, 16);
    roundtrip_hdr("sll2", 276, sll2, 20, 20);
    roundtrip_hdr("null", 0, null4, 4, 4);
    roundtrip_hdr("loop", 108, loop4, 4, 4);
}

static void test_pcapng(void **state)
{
    (void)state;
    uint8_t f1[64];
    const uint8_t eth[14] = {[12] = 0x86, 0xdd};
    size_t n1 = cat(f1, eth, 14, IPV6, 40);
    wframe fr[2] = {{UINT64_C(1600000000987654321), f1, (uint32_t)n1, (uint32_t)n1},
                    {UINT64_C(1600000001000000001), f1, 15, (uint32_t)n1}};
    for (int ns = 0; ns < 2; ns++) {
        char path[256];
        snprintf(path, sizeof path, "%s/ng%d.pcapng", tmpdir, ns);
        write_pcapng(path, 1, ns, fr, 2);
        char err[256];
        rg_pcap *c = rg_pcap_open(path, err, sizeof err);
        if (!c) fail_msg("pcapng: %s", err);
        assert_int_equal(rg_pcap_link(c)->entry, RG_ENTRY_ETHER);
        rg_frame f;
        rg_netpos np;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(rg_pcap_next(c, &f), 1);
            assert_int_equal(f.caplen, fr[i].caplen);
            assert_int_equal(f.len, fr[i].len);
            assert_true(f.ts_ns == (ns ? fr[i].ts_ns : fr[i].ts_ns / 1000 * 1000));
            assert_int_equal(locate_exact(rg_pcap_link(c), f.data, f.caplen, &np), RG_OK);
            assert_int_equal(np.proto, RG_ENTRY_IPV6);
        }
        assert_int_equal(rg_pcap_next(c, &f), 0);
        rg_pcap_close(c);
    }
}

/* ---- pcapng with several interfaces and sections (our own reader) ---- */
typedef struct {
    uint8_t b[4096];
    size_t n;
    int swap;
} ngbuf;

static void ng_put(ngbuf *g, const void *p, size_t n)
{
    assert_true(g->n + n <= sizeof g->b);
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void ng32p(ngbuf *g, uint32_t v)
{
    if (g->swap) v = __builtin_bswap32(v);
    ng_put(g, &v, 4);
}
static void ng16p(ngbuf *g, uint16_t v)
{
    if (g->swap) v = (uint16_t)(v >> 8 | v << 8);
    ng_put(g, &v, 2);
}
/* A block: type, total length, body (padded to 4), total length. */
static void ng_block_put(ngbuf *g, uint32_t type, const ngbuf *body)
{
    uint32_t pad = (uint32_t)((4 - body->n % 4) % 4), total = (uint32_t)(12 + body->n + pad);
    ng32p(g, type);
    ng32p(g, total);
    ng_put(g, body->b, body->n);
    static const uint8_t z[3] = {0, 0, 0};
    ng_put(g, z, pad);
    ng32p(g, total);
}
static void ng_shb(ngbuf *g, int swap)
{
    g->swap = swap;
    ngbuf b = {.swap = swap};
    ng32p(&b, 0x1A2B3C4D);
    ng16p(&b, 1);
    ng16p(&b, 0);
    ng32p(&b, 0xffffffff);
    ng32p(&b, 0xffffffff);
    ng_block_put(g, 0x0A0D0D0A, &b);
}
/* tsresol < 0: no option; tsoffset 0: no option */
static void ng_idb(ngbuf *g, uint16_t linktype, int tsresol, int64_t tsoffset)
{
    ngbuf b = {.swap = g->swap};
    ng16p(&b, linktype);
    ng16p(&b, 0);
    ng32p(&b, 262144);
    if (tsresol >= 0) {
        ng16p(&b, 9);
        ng16p(&b, 1);
        uint8_t o[4] = {(uint8_t)tsresol, 0, 0, 0};
        ng_put(&b, o, 4);
    }
    if (tsoffset) {
        ng16p(&b, 14);
        ng16p(&b, 8);
        uint64_t v = (uint64_t)tsoffset;
        if (g->swap) v = __builtin_bswap64(v);
        ng_put(&b, &v, 8);
    }
    ng16p(&b, 0);
    ng16p(&b, 0);
    ng_block_put(g, 1, &b);
}
static void ng_epb(ngbuf *g, uint32_t ifid, uint64_t ticks, const uint8_t *d, uint32_t n)
{
    ngbuf b = {.swap = g->swap};
    ng32p(&b, ifid);
    ng32p(&b, (uint32_t)(ticks >> 32));
    ng32p(&b, (uint32_t)ticks);
    ng32p(&b, n);
    ng32p(&b, n + 7); /* wire length: longer than captured */
    ng_put(&b, d, n);
    ng_block_put(g, 6, &b);
}
static void ng_spb(ngbuf *g, const uint8_t *d, uint32_t n)
{
    ngbuf b = {.swap = g->swap};
    ng32p(&b, n);
    ng_put(&b, d, n);
    ng_block_put(g, 3, &b);
}

static void write_buf(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Two sections (little-, then big-endian), interfaces of four link types,
 * if_tsresol in decimal and binary units, if_tsoffset, an SPB, and blocks
 * the reader skips; then the same file cut at every length. */
static void test_pcapng_interfaces(void **state)
{
    (void)state;
    uint8_t eth4[34], null6[44], raw4[20], loop6[44];
    const uint8_t eth[14] = {[12] = 0x08, 0x00}, nl[4] = {24, 0, 0, 0}, lp[4] = {0, 0, 0, 30};
    cat(eth4, eth, 14, IPV4, 20);
    cat(null6, nl, 4, IPV6, 40);
    cat(raw4, NULL, 0, IPV4, 20);
    cat(loop6, lp, 4, IPV6, 40);
    ngbuf g = {0};
    ng_shb(&g, 0);
    ng_idb(&g, 1, -1, 0);   /* ethernet, microseconds */
    ng_idb(&g, 0, 9, 1000); /* null, nanoseconds, +1000 s */
    ngbuf nrb = {0};        /* a name resolution block: skipped */
    ng32p(&nrb, 0);
    ng_block_put(&g, 4, &nrb);
    ng_epb(&g, 0, UINT64_C(1700000000123456), eth4, 34);
    ng_epb(&g, 1, UINT64_C(1699999000987654321), null6, 44);
    ng_shb(&g, 1);                    /* a new section: interfaces start again */
    ng_idb(&g, 101, 0x80 | 20, -100); /* raw, 2^-20 s, -100 s */
    ng_idb(&g, 108, 3, 0);            /* loop, milliseconds */
    ng_epb(&g, 1, UINT64_C(1700000002500), loop6, 44);
    ng_epb(&g, 0, (UINT64_C(1700000100) << 20) | (1u << 19), raw4, 20);
    ng_spb(&g, raw4, 20); /* interface 0 of this section, no time */
    const struct {
        int dlt;
        uint64_t ts;
        uint32_t caplen;
        rg_entry proto;
        uint32_t off;
    } want[] = {
        {1, UINT64_C(1700000000123456000), 34, RG_ENTRY_IPV4, 14},
        {0, UINT64_C(1700000000987654321), 44, RG_ENTRY_IPV6, 4},
        {108, UINT64_C(1700000002500000000), 44, RG_ENTRY_IPV6, 4},
        {12, UINT64_C(1700000000500000000), 20, RG_ENTRY_IPV4, 0},
        {12, 0, 20, RG_ENTRY_IPV4, 0},
    };
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/multi.pcapng", tmpdir);
    for (size_t cut = g.n; cut + 1 > 0; cut--) {
        write_buf(path, g.b, cut);
        rg_pcap *c = rg_pcap_open(path, err, sizeof err);
        if (cut < 28 + 24) { /* not even one interface: refused */
            assert_null(c);
            continue;
        }
        assert_non_null(c);
        assert_int_equal(rg_pcap_link(c)->dlt, 1); /* the first interface's */
        rg_frame f;
        int rc, i = 0;
        while ((rc = rg_pcap_next(c, &f)) == 1) {
            assert_true(i < 5);
            rg_linkinfo li;
            rg_link_info(f.dlt, &li);
            if (want[i].dlt == 12)
                assert_int_equal(li.entry, RG_ENTRY_IP);
            else
                assert_int_equal(f.dlt, want[i].dlt);
            assert_true(f.ts_ns == want[i].ts);
            assert_int_equal(f.caplen, want[i].caplen);
            assert_int_equal(f.len, i == 4 ? 20 : want[i].caplen + 7);
            rg_netpos np;
            assert_int_equal(locate_exact(&li, f.data, f.caplen, &np), RG_OK);
            assert_int_equal(np.proto, want[i].proto);
            assert_int_equal(np.off, want[i].off);
            i++;
        }
        if (cut == g.n) {
            assert_int_equal(rc, 0);
            assert_int_equal(i, 5);
        } else {
            assert_true(rc == 0 || rc == RG_EIO); /* cut between blocks: a clean end */
            if (rc == RG_EIO) assert_non_null(strstr(rg_pcap_error(c), "pcapng"));
        }
        rg_pcap_close(c);
    }
    /* a block whose two lengths differ, and a packet of an undefined interface */
    ngbuf h = {0};
    ng_shb(&h, 0);
    ng_idb(&h, 1, -1, 0);
    ng_epb(&h, 3, 0, eth4, 34);
    write_buf(path, h.b, h.n);
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    assert_non_null(c);
    rg_frame f;
    assert_int_equal(rg_pcap_next(c, &f), RG_EIO);
    assert_non_null(strstr(rg_pcap_error(c), "interface"));
    rg_pcap_close(c);
    h.b[h.n - 1] ^= 1;
    write_buf(path, h.b, h.n);
    c = rg_pcap_open(path, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(rg_pcap_next(c, &f), RG_EIO);
    assert_non_null(strstr(rg_pcap_error(c), "lengths differ"));
    rg_pcap_close(c);
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(rg_pcap_open("/nonexistent/file.pcap", err, sizeof err));
    assert_true(strlen(err) > 0);
    char path[256];
    snprintf(path, sizeof path, "%s/garbage.pcap", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs("this is not a capture file at all", f);
    fclose(f);
    err[0] = 0;
    assert_null(rg_pcap_open(path, err, sizeof err));
    assert_true(strlen(err) > 0);
    rg_capture cap;
    assert_int_not_equal(rg_capture_load(path, &cap, NULL, 0), RG_OK);
    assert_null(cap.frames);
    /* a capture cut in the middle of a record */
    snprintf(path, sizeof path, "%s/cut.pcap", tmpdir);
    uint8_t fr1[34];
    cat(fr1, (const uint8_t[14]){[12] = 8}, 14, IPV4, 20);
    wframe w[2] = {{1, fr1, 34, 34}, {2, fr1, 34, 34}};
    write_pcap(path, 1, 0, 0, w, 2);
    assert_int_equal(truncate(path, 24 + 16 + 34 + 16 + 10), 0);
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    assert_non_null(c);
    rg_frame fr;
    assert_int_equal(rg_pcap_next(c, &fr), 1);
    assert_int_equal(rg_pcap_next(c, &fr), RG_EIO);
    assert_true(strlen(rg_pcap_error(c)) > 0);
    rg_pcap_close(c);
}

/* ---- real captures ---- */
static const char *traces_dir(void)
{
    const char *d = getenv("RG_TRACES");
    if (!d || !*d) d = "../../shared/traces";
    DIR *x = opendir(d);
    if (!x) return NULL;
    closedir(x);
    return d;
}

/* Read path with rg_pcap and rg_capture_load; compare with the independent
 * parse of the record headers. */
static void check_real(const char *path, int verbose)
{
    pcap_info in = indep_parse(path);
    if (!in.ok) return; /* not classic pcap: nothing independent to compare with */
    char err[512];
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    if (!c) fail_msg("%s", err);
    const rg_linkinfo lic = *rg_pcap_link(c), *li = &lic;
    rg_linkinfo hdr_li;
    rg_link_info((int)in.linktype, &hdr_li);
    assert_int_equal(li->entry, hdr_li.entry); /* same mapping as the header's linktype */
    assert_int_equal(rg_pcap_snaplen(c), in.snaplen);
    uint64_t count = 0, bytes = 0, wire = 0, trunc = 0, first = 0, last = 0, ip = 0, cut = 0;
    rg_frame f;
    int rc;
    while ((rc = rg_pcap_next(c, &f)) == 1) {
        if (!count) first = f.ts_ns;
        last = f.ts_ns;
        count++;
        bytes += f.caplen;
        wire += f.len;
        if (f.caplen < f.len) trunc++;
        assert_true(f.caplen <= f.len);
        rg_netpos np;
        int lr = locate_exact(li, f.data, f.caplen, &np);
        if (lr == RG_OK) {
            assert_true(np.off <= f.caplen || np.proto == RG_ENTRY_UNKNOWN);
            if (np.proto == RG_ENTRY_IPV4 || np.proto == RG_ENTRY_IPV6) ip++;
            if (li->entry == RG_ENTRY_ETHER && f.caplen >= 14) {
                uint16_t et = (uint16_t)(f.data[12] << 8 | f.data[13]);
                if (et == 0x0800) {
                    assert_int_equal(np.proto, RG_ENTRY_IPV4);
                    assert_int_equal(np.off, 14);
                }
            }
        } else {
            assert_int_equal(lr, RG_ETRUNC);
            cut++;
        }
    }
    assert_int_equal(rc, 0);
    rg_pcap_close(c);
    if (count != in.count || bytes != in.caplen_sum || wire != in.wirelen_sum ||
        trunc != in.truncated || first != in.first_ns || last != in.last_ns)
        fail_msg("%s: rg_pcap %llu frames %llu bytes, record headers %llu frames %llu bytes", path,
                 (unsigned long long)count, (unsigned long long)bytes, (unsigned long long)in.count,
                 (unsigned long long)in.caplen_sum);
    rg_capture cap;
    assert_int_equal(rg_capture_load(path, &cap, err, sizeof err), RG_OK);
    assert_int_equal(cap.count, in.count);
    assert_int_equal(cap.bytes, in.caplen_sum);
    if (cap.count) {
        assert_true(cap.frames[0].ts_ns == in.first_ns);
        assert_true(cap.frames[cap.count - 1].ts_ns == in.last_ns);
    }
    rg_capture_free(&cap);
    if (verbose)
        print_message("  %s: %llu frames (%llu truncated), %llu captured / %llu wire bytes, "
                      "link %s, %llu IPv4/IPv6, %llu link-cut\n",
                      strrchr(path, '/') ? strrchr(path, '/') + 1 : path, (unsigned long long)count,
                      (unsigned long long)trunc, (unsigned long long)bytes,
                      (unsigned long long)wire, li->name, (unsigned long long)ip,
                      (unsigned long long)cut);
}

static void test_real_tcp_retransmissions(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping real captures\n");
        skip();
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/tcp-retransmissions.pcap", d);
    pcap_info in = indep_parse(path);
    if (!in.ok) fail_msg("%s: not a readable classic pcap", path);
    assert_true(in.count > 0);
    check_real(path, 1);
}

static void test_real_all(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        skip();
        return;
    }
    DIR *dir = opendir(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || (strcmp(e->d_name + n - 5, ".pcap") && strcmp(e->d_name + n - 7, ".pcapng")))
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", d, e->d_name);
        check_real(path, 1);
        files++;
    }
    closedir(dir);
    print_message("  %d captures read and cross-checked\n", files);
    assert_true(files > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link_info),
        cmocka_unit_test(test_locate),
        cmocka_unit_test(test_synthetic_captures),
        cmocka_unit_test(test_synthetic_link_headers),
        cmocka_unit_test(test_pcapng),
        cmocka_unit_test(test_pcapng_interfaces),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_real_tcp_retransmissions),
        cmocka_unit_test(test_real_all),
    };
    return cmocka_run_group_tests_name("rg_pcap", tests, setup_dir, teardown_dir);
}
