/* test_nf.c - the stock NFs (handlers/nf) fed synthetic handler calls and
 * instance lives of a hand-written three-layer stack, and SHA-256. */
#include "rg_test.h"
#include "rg_test_fs.h"

#include "rg_nf.h"
#include "rg_nf_int.h"
#include "rg_counter.h"
#include "rg_sha256.h"

/* ---- SHA-256 ---- */

static void hex_of(const void *p, size_t n, char out[65])
{
    rg_sha256_hex_of(p, n, out);
}

static void test_sha256_fips(void **state)
{
    (void)state;
    char h[65];
    hex_of("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    hex_of("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m448, strlen(m448), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                       "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(m896, strlen(m896), h);
    assert_string_equal(h, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* one million 'a', in uneven pieces (buffer boundaries everywhere) */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    rg_sha256 s;
    uint8_t d[32];
    rg_sha256_init(&s);
    for (size_t off = 0, step = 1; off < sizeof a; off += step, step = step % 131 + 7)
        rg_sha256_update(&s, a + off, off + step <= sizeof a ? step : sizeof a - off);
    rg_sha256_final(&s, d);
    rg_sha256_hex(d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    hex_of(a, sizeof a, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Every length 0..199 around the padding boundaries (55, 56, 64, 119, ...):
 * the digest of the concatenated digests of bytes 0,1,2,.. of each length,
 * computed with Python's hashlib. */
static void test_sha256_lengths(void **state)
{
    (void)state;
    uint8_t msg[200], all[200 * 32];
    for (unsigned i = 0; i < 200; i++)
        msg[i] = (uint8_t)i;
    for (unsigned n = 0; n < 200; n++) {
        rg_sha256 s;
        rg_sha256_init(&s);
        for (unsigned i = 0; i < n; i++) /* byte by byte */
            rg_sha256_update(&s, msg + i, 1);
        rg_sha256_final(&s, all + 32 * n);
        uint8_t one[32];
        rg_sha256_init(&s);
        rg_sha256_update(&s, msg, n);
        rg_sha256_final(&s, one);
        assert_memory_equal(one, all + 32 * n, 32);
    }
    char h[65];
    hex_of(all, sizeof all, h);
    assert_string_equal(h, "ba7b0fcea7d10c06b855b43d2b4dce1e3e842fff6be0acefb0faf4f2dd05bb47");
}

/* ---- a hand-written stack description ---- */

/* tcp4: bidirectional, PSM; forward key [saddr 4][sport 2][daddr 4][dport 2][vid 2 common] */
static const rg_keypart TCP4_PARTS[] = {
    {"ip.header.saddr", RG_VAL_BYTES, 0, 0, 4},
    {"header.sport", RG_VAL_NUM, 0, 4, 2},
    {"vlan.header.vid", RG_VAL_NUM, 1, 12, 2},
};
/* tcp6: bidirectional, no PSM; [saddr 16][sport 2][daddr 16][dport 2] */
static const rg_keypart TCP6_PARTS[] = {
    {"ipv6.header.saddr", RG_VAL_BYTES, 0, 0, 16},
    {"header.sport", RG_VAL_NUM, 0, 16, 2},
};
/* frag: unidirectional, as ip.yaml's selector; [saddr 4][daddr 4][id 2][proto 1]
 * (the IPv4 id is 16 bits: a number of a port's width that is no port) */
static const rg_keypart FRAG_PARTS[] = {
    {"header.saddr", RG_VAL_BYTES, 0, 0, 4},
    {"header.daddr", RG_VAL_BYTES, 0, 4, 4},
    {"header.id", RG_VAL_NUM, 0, 8, 2},
    {"header.protocol", RG_VAL_NUM, 0, 10, 1},
};
static const char *const TCP_STATES[] = {"CLOSED", "SYN", "ESTABLISHED", "DONE"};

static const rg_layer_desc LAYERS[] = {
    {"tcp4", "tcp", "tcp.yaml", 1, 1, 1, 1, 14, 3, TCP4_PARTS, 4, TCP_STATES, 0, 0, 0, NULL},
    {"tcp6", "tcp", "tcp.yaml", 1, 1, 0, 1, 36, 2, TCP6_PARTS, 0, NULL, 0, 0, 0, NULL},
    {"frag", "ip", "ip.yaml", 1, 0, 0, 1, 11, 4, FRAG_PARTS, 0, NULL, 0, 0, 0, NULL},
};

static const char *const DATA_ARGS[] = {"seq", "data"};
static const uint8_t DATA_KINDS[] = {RG_VAL_NUM, RG_VAL_BYTES};
static const char *const DATA6_ARGS[] = {"hdr", "data"}; /* "data" is the second bytes arg */
static const uint8_t DATA6_KINDS[] = {RG_VAL_BYTES, RG_VAL_BYTES};
static const char *const FRAG_ARGS[] = {"data"};
static const uint8_t FRAG_KINDS[] = {RG_VAL_BYTES};
static const char *const NOTE_ARGS[] = {"code"};
static const uint8_t NOTE_KINDS[] = {RG_VAL_NUM};

enum { H_DATA, H_DATA6, H_FRAG, H_NOTE };
static const rg_handler_desc HANDLERS[] = {
    {"on_data", 0, 2, DATA_ARGS, DATA_KINDS, ""},
    {"on_data6", 1, 2, DATA6_ARGS, DATA6_KINDS, ""},
    {"on_frag", 2, 1, FRAG_ARGS, FRAG_KINDS, ""},
    {"on_note", 0, 1, NOTE_ARGS, NOTE_KINDS, ""},
};

static const rg_stack_desc STACK = {
    .name = "test",
    .nlayers = 3,
    .layers = LAYERS,
    .nhandlers = 4,
    .handlers = HANDLERS,
    .entry = {0, -1, -1, -1, -1, -1},
};

/* Keys of three flows: 10.0.0.1:40000 -> 192.168.1.2:80 (vid 7),
 * [2001:db8::1]:5555 -> [fe80::1:2]:443, and fragments 1.2.3.4 -> 5.6.7.8. */
static const uint8_t K4A[14] = {10, 0, 0, 1, 0x9c, 0x40, 192, 168, 1, 2, 0, 80, 0, 7};
static const uint8_t K4P[14] = {192, 168, 1, 2, 0, 80, 10, 0, 0, 1, 0x9c, 0x40, 0, 7};
#define ADDR6_A 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1
#define ADDR6_P 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2
static const uint8_t K6A[36] = {ADDR6_A, 0x15, 0xb3, ADDR6_P, 0x01, 0xbb};
static const uint8_t K6P[36] = {ADDR6_P, 0x01, 0xbb, ADDR6_A, 0x15, 0xb3};
static const uint8_t KF[11] = {1, 2, 3, 4, 5, 6, 7, 8, 0x12, 0x34, 17};

static rg_flow_info flow(uint64_t uid, uint16_t layer)
{
    rg_flow_info f;
    memset(&f, 0, sizeof f);
    f.uid = uid;
    f.layer = layer;
    f.key_a = layer == 0 ? K4A : layer == 1 ? K6A : KF;
    f.key_p = layer == 0 ? K4P : layer == 1 ? K6P : KF;
    return f;
}

static rg_val num(uint64_t v)
{
    rg_val x = {RG_VAL_NUM, v, {rg_empty_byte, 0}};
    return x;
}

static rg_val bytes(const void *p, size_t n)
{
    rg_val x = {RG_VAL_BYTES, 0, rg_bytes_make(p, n)};
    return x;
}

/* One handler call to obs. */
static void call(const rg_obs *o, uint16_t h, const rg_flow_info *f, uint8_t dir, uint64_t pkt,
                 const rg_val *args)
{
    rg_call c = {h, HANDLERS[h].layer, dir, f, pkt * 1000, pkt, args, 0, NULL};
    o->on_call(o->self, &c);
}

/* ---- helpers ---- */

static void test_endpoints(void **state)
{
    (void)state;
    rg_nf_endpoints ep;
    rg_flow_info f = flow(1, 0);
    rg_nf_endpoints_of(&LAYERS[0], &f, &ep);
    assert_string_equal(ep.src, "10.0.0.1");
    assert_string_equal(ep.dst, "192.168.1.2");
    assert_true(ep.has_sport && ep.has_dport); /* the common vid is not a port */
    assert_int_equal(ep.sport, 40000);
    assert_int_equal(ep.dport, 80);
    f = flow(2, 1);
    rg_nf_endpoints_of(&LAYERS[1], &f, &ep);
    assert_string_equal(ep.src, "2001:db8::1"); /* RFC 5952 */
    assert_string_equal(ep.dst, "fe80::1:2");
    assert_int_equal(ep.sport, 5555);
    assert_int_equal(ep.dport, 443);
    f = flow(3, 2);
    rg_nf_endpoints_of(&LAYERS[2], &f, &ep); /* unidirectional: the second address */
    assert_string_equal(ep.src, "1.2.3.4");
    assert_string_equal(ep.dst, "5.6.7.8");
    assert_false(ep.has_sport || ep.has_dport); /* the 2-byte id is no port */
    /* a key without addresses or ports */
    static const rg_keypart only_num[] = {{"x", RG_VAL_NUM, 0, 0, 4}};
    rg_layer_desc l = LAYERS[2];
    l.nparts = 1;
    l.parts = only_num;
    rg_nf_endpoints_of(&l, &f, &ep);
    assert_string_equal(ep.src, "");
    assert_string_equal(ep.dst, "");
    assert_false(ep.has_sport);
}

static char *json_of(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    rg_json_string(f, s);
    fclose(f);
    return buf;
}

static void test_json_string(void **state)
{
    (void)state;
    char *j = json_of("a\"b\\c\n\t\r\x01\x1f/\xc3\xa9");
    assert_string_equal(j, "\"a\\\"b\\\\c\\n\\t\\r\\u0001\\u001f/\xc3\xa9\"");
    free(j);
    j = json_of(NULL);
    assert_string_equal(j, "null");
    free(j);
}

/* The uid map against a reference array under random puts, deletes and replacements; from
 * rg_nf_map_init (odd state) or zeroed (even: the NF chain's, no table before the first put). */
static void test_uid_map(void **state)
{
    enum { N = 5000 };
    static void *ref[N + 1];
    memset(ref, 0, sizeof ref);
    rg_nf_map m = {0};
    if ((uintptr_t)*state & 1) assert_int_equal(rg_nf_map_init(&m), RG_OK);
    assert_null(rg_nf_map_get(&m, 1));
    assert_null(rg_nf_map_slot(&m, 1));
    assert_null(rg_nf_map_del(&m, 1));
    rg_rng r = {42 + (uintptr_t)*state};
    size_t live = 0;
    for (int i = 0; i < 200000; i++) {
        uint64_t uid = 1 + rng_below(&r, N);
        if (ref[uid]) {
            assert_ptr_equal(rg_nf_map_del(&m, uid), ref[uid]);
            ref[uid] = NULL;
            live--;
        } else {
            ref[uid] = (void *)(uintptr_t)(uid * 16);
            assert_int_equal(rg_nf_map_put(&m, uid, ref[uid]), RG_OK);
            live++;
        }
        assert_int_equal(m.n, live);
        uint64_t probe = 1 + rng_below(&r, N);
        assert_ptr_equal(rg_nf_map_get(&m, probe), ref[probe]);
        if (ref[probe] && i % 7 == 0) { /* replaced in place, as the chain grows its records */
            ref[probe] = (void *)((uintptr_t)ref[probe] + 8);
            *rg_nf_map_slot(&m, probe) = ref[probe];
        }
    }
    for (uint64_t uid = 1; uid <= N; uid++)
        assert_ptr_equal(rg_nf_map_get(&m, uid), ref[uid]);
    assert_null(rg_nf_map_del(&m, N + 1));
    rg_nf_map_free(&m);
}

/* ---- NFs ---- */

static void test_create_errors(void **state)
{
    (void)state;
    char err[256], dir[64];
    assert_null(rg_nf_create("nope", &STACK, "/tmp", err, sizeof err));
    assert_non_null(strstr(err, "nope"));
    assert_null(rg_nf_create("streams", &STACK, NULL, err, sizeof err));
    assert_null(rg_nf_create("events", &STACK, "", err, sizeof err));
    /* the output directory is a file */
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    char file[128];
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_null(rg_nf_create("flowstats", &STACK, file, err, sizeof err));
    assert_non_null(strstr(err, file));
    /* parents are created */
    char deep[128];
    snprintf(deep, sizeof deep, "%s/a/b/c", dir);
    rg_obs *o = rg_nf_create("events", &STACK, deep, err, sizeof err);
    assert_non_null(o);
    assert_int_equal(rg_nf_finish(o), RG_OK);
    assert_true(fs_exists(dir, "a/b/c/events.jsonl"));
    assert_int_equal(rg_nf_finish(NULL), RG_OK);
    fs_rm_tree(dir);
}

/* The driver's counters (main/rg_counter.c), with this suite's stack and calls. */
static void test_count(void **state)
{
    (void)state;
    rg_counter k;
    assert_int_equal(rg_counter_init(&k, &STACK), RG_OK);
    rg_obs obs = rg_counter_obs(&k, 1), *o = &obs;
    rg_flow_info f1 = flow(1, 0), f2 = flow(2, 1);
    o->on_open(o->self, &f1, 1);
    o->on_open(o->self, &f2, 1);
    rg_val a[2] = {num(1), bytes("hello", 5)};
    call(o, H_DATA, &f1, 0, 1, a);
    rg_val b[2] = {bytes("XXXX", 4), bytes("abc", 3)}; /* only "data" counts */
    call(o, H_DATA6, &f2, 0, 2, b);
    rg_val c[1] = {num(3)};
    call(o, H_NOTE, NULL, 0, 3, c);
    o->on_gap(o->self, &f1, 1, 77, 10, 0, 3);
    o->on_gap(o->self, &f1, 1, 97, 4, 10, 3);
    o->on_close(o->self, &f1, RG_CLOSE_ACCEPT, 1, 4);
    const rg_counts *n = &k.n;
    assert_int_equal(n->gaps, 2);
    assert_int_equal(n->gap_bytes, 14);
    assert_int_equal(n->calls, 3);
    assert_int_equal(n->opened, 2);
    assert_int_equal(n->closed, 1);
    assert_int_equal(n->payload_bytes, 8);
    assert_int_equal(n->layer[0].opened, 1);
    assert_int_equal(n->layer[0].closed[RG_CLOSE_ACCEPT], 1);
    assert_int_equal(n->layer[1].opened, 1);
    assert_null(rg_counter_obs(&k, 0).on_call); /* --nf none */
    rg_counter_free(&k);
}

#define SHA_HELLO_WORLD "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
#define SHA_HTTP_200    "280aecdb4af64913558bc5ef92ad523d52fca07f98a48a4ef7e799c8c38dd6c3"
#define SHA_ABC         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA_HELLO       "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define SHA_RANGE100    "bce0aff19cf5aa6a7469a30d61d04e4376e4bbf6381052ee9e7f33925c954d52"

static void test_streams(void **state)
{
    (void)state;
    char dir[64], err[256];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    rg_obs *o = rg_nf_create("streams", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_flow_info f1 = flow(1, 0), f2 = flow(2, 1), f3 = flow(3, 2);
    o->on_open(o->self, &f1, 1000);
    o->on_open(o->self, &f2, 1000);
    o->on_open(o->self, &f3, 1000);
    rg_val a[2] = {num(1), bytes("hello ", 6)};
    call(o, H_DATA, &f1, 0, 1, a);
    rg_val b[2] = {num(2), bytes("HTTP/1.1 200 OK\r\n", 17)};
    call(o, H_DATA, &f1, 1, 2, b);
    rg_val note[1] = {num(9)};
    call(o, H_NOTE, &f1, 0, 3, note); /* no data: nothing delivered */
    rg_val e[2] = {num(3), bytes("", 0)};
    call(o, H_DATA, &f1, 0, 3, e);
    /* gap recovery: 7 bytes lost before "world", 2 + 3 (two assembles) after it */
    o->on_gap(o->self, &f1, 0, 1006, 7, 0, 3500);
    o->on_gap(o->self, &f1, 0, 1018, 2, 5, 3500);
    o->on_gap(o->self, &f1, 0, 1020, 3, 5, 3500);
    rg_val c[2] = {num(4), bytes("world", 5)};
    call(o, H_DATA, &f1, 0, 4, c);
    rg_val d6[2] = {bytes("XXXX", 4), bytes("abc", 3)}; /* "data" is the second argument */
    call(o, H_DATA6, &f2, 0, 5, d6);
    rg_val nf[1] = {bytes("zz", 2)};
    call(o, H_FRAG, NULL, 0, 6, nf); /* no instance */
    call(o, H_NOTE, NULL, 1, 7, note);
    o->on_close(o->self, &f3, RG_CLOSE_EVICTED, 0, 8000);
    o->on_close(o->self, &f1, RG_CLOSE_ACCEPT, 1, 9000);
    o->on_close(o->self, &f2, RG_CLOSE_FLUSHED, 0, 9000);
    assert_int_equal(rg_nf_finish(o), RG_OK);

    char *flows = fs_read(dir, "flows.jsonl", NULL);
    assert_non_null(flows);
    const char *want =
        "{\"layer\":\"frag\",\"proto\":\"ip\",\"src\":\"1.2.3.4\",\"dst\":\"5.6.7.8\",\"community_"
        "id\":null,\"dir\":"
        "\"c2s\","
        "\"bytes\":0,\"sha256\":\"" SHA_EMPTY "\",\"file\":null,\"complete\":null,\"uid\":3,"
        "\"close\":\"evicted\",\"gaps\":[],\"reason\":\"evicted\",\"late_packets\":0}\n"
        "{\"layer\":\"frag\",\"proto\":\"ip\",\"src\":\"5.6.7.8\",\"dst\":\"1.2.3.4\",\"community_"
        "id\":null,\"dir\":"
        "\"s2c\","
        "\"bytes\":0,\"sha256\":\"" SHA_EMPTY "\",\"file\":null,\"complete\":null,\"uid\":3,"
        "\"close\":\"evicted\",\"gaps\":[],\"reason\":\"evicted\",\"late_packets\":0}\n"
        "{\"layer\":\"tcp4\",\"proto\":\"tcp\",\"src\":\"10.0.0.1\",\"dst\":\"192.168.1.2\","
        "\"sport\":40000,\"dport\":80,\"community_id\":\"1:UCffkKgSwco2fG5CBE3QIF9AmFs=\",\"dir\":"
        "\"c2s\",\"bytes\":11,\"sha256\":\"" SHA_HELLO_WORLD "\",\"file\":\"streams/"
        "1-c2s.bin\",\"complete\":true,\"uid\":1,\"close\":\"accept\",\"gaps\":[[6,7],[18,5]],"
        "\"reason\":\"accept\",\"late_packets\":0}\n"
        "{\"layer\":\"tcp4\",\"proto\":\"tcp\",\"src\":\"192.168.1.2\",\"dst\":\"10.0.0.1\","
        "\"sport\":80,\"dport\":40000,\"community_id\":\"1:UCffkKgSwco2fG5CBE3QIF9AmFs=\",\"dir\":"
        "\"s2c\",\"bytes\":17,\"sha256\":\"" SHA_HTTP_200 "\",\"file\":\"streams/"
        "1-s2c.bin\",\"complete\":true,\"uid\":1,\"close\":\"accept\",\"gaps\":[],\"reason\":"
        "\"accept\",\"late_packets\":0}\n"
        "{\"layer\":\"tcp6\",\"proto\":\"tcp\",\"src\":\"2001:db8::1\",\"dst\":\"fe80::1:2\","
        "\"sport\":5555,\"dport\":443,\"community_id\":\"1:rdBKrO7lyFvKUkpL4ZuwoYW1vWY=\",\"dir\":"
        "\"c2s\",\"bytes\":3,\"sha256\":\"" SHA_ABC "\",\"file\":\"streams/"
        "2-c2s.bin\",\"complete\":null,\"uid\":2,\"close\":\"flushed\",\"gaps\":[],\"reason\":"
        "\"flushed\",\"late_packets\":0}\n"
        "{\"layer\":\"tcp6\",\"proto\":\"tcp\",\"src\":\"fe80::1:2\",\"dst\":\"2001:db8::1\","
        "\"sport\":443,\"dport\":5555,\"community_id\":\"1:rdBKrO7lyFvKUkpL4ZuwoYW1vWY=\",\"dir\":"
        "\"s2c\",\"bytes\":0,\"sha256\":\"" SHA_EMPTY
        "\",\"file\":null,\"complete\":null,\"uid\":2,\"close\":\"flushed\",\"gaps\":[],\"reason\":"
        "\"flushed\",\"late_packets\":0}\n";
    assert_string_equal(flows, want);
    free(flows);

    size_t n;
    char *s = fs_read(dir, "streams/1-c2s.bin", &n);
    assert_non_null(s);
    assert_int_equal(n, 11);
    assert_memory_equal(s, "hello world", 11);
    free(s);
    s = fs_read(dir, "streams/1-s2c.bin", &n);
    assert_int_equal(n, 17);
    assert_memory_equal(s, "HTTP/1.1 200 OK\r\n", 17);
    free(s);
    s = fs_read(dir, "streams/2-c2s.bin", &n);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "abc", 3);
    free(s);
    assert_false(fs_exists(dir, "streams/2-s2c.bin")); /* 0 bytes: no file */
    assert_false(fs_exists(dir, "streams/3-c2s.bin"));
    s = fs_read(dir, "streams/noflow.bin", &n);
    assert_int_equal(n, 2);
    assert_memory_equal(s, "zz", 2);
    free(s);
    s = fs_read(dir, "streams.json", NULL);
    assert_string_equal(s, "{\"flows\":3,\"directions\":6,\"bytes\":31,\"noflow_calls\":2,"
                           "\"noflow_bytes\":2,\"noflow_file\":\"streams/noflow.bin\","
                           "\"gaps\":2,\"gap_bytes\":12}\n");
    free(s);
    fs_rm_tree(dir);
}

/* A data handler with a numeric "sid" argument splits its layer's flows: one record per
 * direction and stream id (c2s first, by sid), the two plain lines (sid null) when nothing
 * was delivered; the sid of another layer's handler changes nothing there. */
static const rg_layer_desc SID_LAYERS[] = {
    {"user", "sctp_user", "sctp_user.yaml", 1, 1, 0, 1, 14, 3, TCP4_PARTS, 0, NULL, 0, 0, 0, NULL},
};
static const char *const CHUNK_ARGS[] = {"data", "sid", "ssn"};
static const uint8_t CHUNK_KINDS[] = {RG_VAL_BYTES, RG_VAL_NUM, RG_VAL_NUM};
static const char *const MSG_ARGS[] = {"msg", "sid"}; /* no "data": not a stream */
static const uint8_t MSG_KINDS[] = {RG_VAL_BYTES, RG_VAL_NUM};
static const rg_handler_desc SID_HANDLERS[] = {
    {"on_chunk", 0, 3, CHUNK_ARGS, CHUNK_KINDS, ""},
    {"on_msg", 0, 2, MSG_ARGS, MSG_KINDS, ""},
};
static const rg_stack_desc SID_STACK = {
    .name = "sid",
    .nlayers = 1,
    .layers = SID_LAYERS,
    .nhandlers = 2,
    .handlers = SID_HANDLERS,
    .entry = {0, -1, -1, -1, -1, -1},
};

#define SHA_B    "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
#define SHA_AADD "c814a68d2e619986584b667a7269dbf1124b915f44f50a57dcd6f813759e85b3"
#define SHA_CC   "355b1bbfc96725cdce8f4a2708fda310a80e6d13315aec4e5eed2a75fe8032ce"

static void test_streams_sid(void **state)
{
    (void)state;
    char dir[64], err[256];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    rg_obs *o = rg_nf_create("streams", &SID_STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_flow_info f1 = flow(1, 0), f2 = flow(2, 0);
    o->on_open(o->self, &f1, 1000);
    o->on_open(o->self, &f2, 1000);
    const struct {
        uint8_t dir;
        uint64_t sid;
        const char *data;
    } calls[] = {{0, 1, "aa"}, {0, 0, "b"}, {1, 1, "cc"}, {0, 1, "dd"}};
    for (unsigned i = 0; i < 4; i++) {
        rg_val a[3] = {bytes(calls[i].data, strlen(calls[i].data)), num(calls[i].sid), num(i)};
        rg_call c = {0, 0, calls[i].dir, &f1, i * 1000, i + 1, a, 0, NULL};
        o->on_call(o->self, &c);
    }
    rg_val m[2] = {bytes("whole", 5), num(0)};
    rg_call mc = {1, 0, 0, &f1, 9000, 9, m, 0, NULL};
    o->on_call(o->self, &mc); /* a message: not stream bytes */
    o->on_close(o->self, &f1, RG_CLOSE_FLUSHED, 0, 9000);
    o->on_close(o->self, &f2, RG_CLOSE_FLUSHED, 0, 9000);
    assert_int_equal(rg_nf_finish(o), RG_OK);

    char *flows = fs_read(dir, "flows.jsonl", NULL);
    assert_non_null(flows);
/* community_id: the values of the PyPI communityid package (seed 0) for these tuples; none for the
 * test layers whose protocol names are no IP protocol (frag without a protocol part, sctp_user) */
#define EP_C2S                                                                                     \
    "\"src\":\"10.0.0.1\",\"dst\":\"192.168.1.2\",\"sport\":40000,\"dport\":80,\"community_id\":"  \
    "null"
#define EP_S2C                                                                                     \
    "\"src\":\"192.168.1.2\",\"dst\":\"10.0.0.1\",\"sport\":80,\"dport\":40000,\"community_id\":"  \
    "null"
#define HEAD "{\"layer\":\"user\",\"proto\":\"sctp_user\","
    const char *want =
        HEAD EP_C2S ",\"dir\":\"c2s\",\"sid\":0,\"bytes\":1,\"sha256\":\"" SHA_B "\","
                    "\"file\":\"streams/"
                    "1-c2s-sid0.bin\",\"complete\":null,\"uid\":1,\"close\":\"flushed\",\"gaps\":[]"
                    ",\"reason\":\"flushed\",\"late_packets\":0}\n" HEAD EP_C2S
                    ",\"dir\":\"c2s\",\"sid\":1,\"bytes\":4,\"sha256\":\"" SHA_AADD "\","
                    "\"file\":\"streams/"
                    "1-c2s-sid1.bin\",\"complete\":null,\"uid\":1,\"close\":\"flushed\",\"gaps\":[]"
                    ",\"reason\":\"flushed\",\"late_packets\":0}\n" HEAD EP_S2C
                    ",\"dir\":\"s2c\",\"sid\":1,\"bytes\":2,\"sha256\":\"" SHA_CC "\","
                    "\"file\":\"streams/"
                    "1-s2c-sid1.bin\",\"complete\":null,\"uid\":1,\"close\":\"flushed\",\"gaps\":[]"
                    ",\"reason\":\"flushed\",\"late_packets\":0}\n" HEAD EP_C2S
                    ",\"dir\":\"c2s\",\"sid\":null,\"bytes\":0,\"sha256\":\"" SHA_EMPTY "\","
                    "\"file\":null,\"complete\":null,\"uid\":2,\"close\":\"flushed\",\"gaps\":[],"
                    "\"reason\":\"flushed\",\"late_packets\":0}\n" HEAD EP_S2C
                    ",\"dir\":\"s2c\",\"sid\":null,\"bytes\":0,\"sha256\":\"" SHA_EMPTY "\","
                    "\"file\":null,\"complete\":null,\"uid\":2,\"close\":\"flushed\",\"gaps\":[],"
                    "\"reason\":\"flushed\",\"late_packets\":0}\n";
    assert_string_equal(flows, want);
    free(flows);
    size_t n;
    char *s = fs_read(dir, "streams/1-c2s-sid1.bin", &n);
    assert_non_null(s);
    assert_int_equal(n, 4);
    assert_memory_equal(s, "aadd", 4);
    free(s);
    assert_false(fs_exists(dir, "streams/1-c2s.bin")); /* split: no per-direction file */
    s = fs_read(dir, "streams.json", NULL);
    assert_string_equal(s, "{\"flows\":2,\"directions\":5,\"bytes\":7,\"noflow_calls\":0,"
                           "\"noflow_bytes\":0,\"noflow_file\":null,\"gaps\":0,\"gap_bytes\":0}\n");
    free(s);
    fs_rm_tree(dir);
}

static size_t open_fds(void)
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* More live flows than open files allowed: files are closed and reopened
 * to append, nothing is lost, the number of open files stays capped. */
static void test_streams_many(void **state)
{
    (void)state;
    enum { FLOWS = 600, ROUNDS = 5 };
    char dir[64], err[256];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    size_t fds0 = open_fds();
    rg_obs *o = rg_nf_create("streams", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    static rg_flow_info f[FLOWS];
    for (unsigned i = 0; i < FLOWS; i++) {
        f[i] = flow(i + 1, 0);
        o->on_open(o->self, &f[i], 1);
    }
    uint64_t pkt = 0;
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < FLOWS; i++) {
            char msg[32];
            int len = snprintf(msg, sizeof msg, "f%ur%u;", i + 1, r);
            rg_val a[2] = {num(r), bytes(msg, (size_t)len)};
            call(o, H_DATA, &f[i], (uint8_t)(i & 1), ++pkt, a);
        }
        if (fds0) assert_true(open_fds() <= fds0 + 256 + 2);
    }
    for (unsigned i = 0; i < FLOWS; i++)
        o->on_close(o->self, &f[i], RG_CLOSE_FLUSHED, 0, 2);
    assert_int_equal(rg_nf_finish(o), RG_OK);
    if (fds0) assert_int_equal(open_fds(), fds0);
    for (unsigned i = 0; i < FLOWS; i++) {
        char name[64], want[256];
        size_t w = 0;
        for (unsigned r = 0; r < ROUNDS; r++)
            w += (size_t)snprintf(want + w, sizeof want - w, "f%ur%u;", i + 1, r);
        snprintf(name, sizeof name, "streams/%u-%s.bin", i + 1, i & 1 ? "s2c" : "c2s");
        size_t n;
        char *s = fs_read(dir, name, &n);
        assert_non_null(s);
        assert_int_equal(n, w);
        assert_memory_equal(s, want, w);
        free(s);
    }
    char *flows = fs_read(dir, "flows.jsonl", NULL);
    assert_int_equal(fs_lines(flows), 2 * FLOWS);
    free(flows);
    fs_rm_tree(dir);
}

static void test_events(void **state)
{
    (void)state;
    char dir[64], err[256];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    rg_obs *o = rg_nf_create("events", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_flow_info f1 = flow(1, 0);
    rg_val a[2] = {num(7), bytes("hello", 5)};
    call(o, H_DATA, &f1, 0, 1, a);
    uint8_t big[100];
    for (unsigned i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)i;
    rg_val b[1] = {bytes(big, sizeof big)};
    call(o, H_FRAG, NULL, 1, 2, b);
    rg_val c[1] = {num(UINT64_MAX)};
    call(o, H_NOTE, &f1, 1, 3, c);
    o->on_gap(o->self, &f1, 1, 4000000000u, 1448, 17, 3500); /* gap recovery */
    assert_int_equal(rg_nf_finish(o), RG_OK);
    char hex64[129];
    for (unsigned i = 0; i < 64; i++)
        snprintf(hex64 + 2 * i, 3, "%02x", i);
    char want[2048];
    snprintf(want, sizeof want,
             "{\"pkt\":1,\"ts\":1000,\"handler\":\"on_data\",\"layer\":\"tcp4\",\"flow\":1,"
             "\"dir\":\"c2s\",\"args\":{\"seq\":7,\"data\":{\"len\":5,\"hex\":\"68656c6c6f\","
             "\"sha256\":\"" SHA_HELLO "\"}}}\n"
             "{\"pkt\":2,\"ts\":2000,\"handler\":\"on_frag\",\"layer\":\"frag\",\"flow\":null,"
             "\"dir\":\"s2c\",\"args\":{\"data\":{\"len\":100,\"hex\":\"%s\","
             "\"sha256\":\"" SHA_RANGE100 "\"}}}\n"
             "{\"pkt\":3,\"ts\":3000,\"handler\":\"on_note\",\"layer\":\"tcp4\",\"flow\":1,"
             "\"dir\":\"s2c\",\"args\":{\"code\":18446744073709551615}}\n"
             "{\"ts\":3500,\"event\":\"gap\",\"layer\":\"tcp4\",\"flow\":1,\"dir\":\"s2c\","
             "\"seq\":4000000000,\"len\":1448,\"at\":17}\n",
             hex64);
    char *ev = fs_read(dir, "events.jsonl", NULL);
    assert_non_null(ev);
    assert_string_equal(ev, want);
    free(ev);
    fs_rm_tree(dir);
}

static void test_flowstats(void **state)
{
    (void)state;
    char dir[64], err[256];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    rg_obs *o = rg_nf_create("flowstats", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_flow_info f1 = flow(1, 0), f2 = flow(2, 1), f3 = flow(3, 2);
    o->on_open(o->self, &f1, 100);
    o->on_packet(o->self, &f1, 0, 60, 100);
    o->on_open(o->self, &f2, 150);
    o->on_packet(o->self, &f1, 1, 40, 200);
    o->on_open(o->self, &f3, 250);
    o->on_packet(o->self, &f1, 0, 52, 300);
    f1.state = 2;
    o->on_close(o->self, &f1, RG_CLOSE_ACCEPT, 1, 300);
    o->on_close(o->self, &f3, RG_CLOSE_EXPIRED, 0, 9000);
    /* f2 never closes: reported at finish */
    assert_int_equal(rg_nf_finish(o), RG_OK);
    char *fs = fs_read(dir, "flowstats.jsonl", NULL);
    assert_non_null(fs);
    assert_string_equal(
        fs, "{\"layer\":\"tcp4\",\"proto\":\"tcp\",\"uid\":1,\"src\":\"10.0.0.1\","
            "\"dst\":\"192.168.1.2\",\"sport\":40000,\"dport\":80,\"community_id\":\"1:"
            "UCffkKgSwco2fG5CBE3QIF9AmFs=\",\"packets\":[2,1],"
            "\"bytes\":[112,40],\"first_ts\":100,\"last_ts\":300,\"state\":\"ESTABLISHED\","
            "\"close\":\"accept\",\"complete\":true,\"reason\":\"accept\",\"late_packets\":0}\n"
            "{\"layer\":\"frag\",\"proto\":\"ip\",\"uid\":3,\"src\":\"1.2.3.4\",\"dst\":\"5.6.7."
            "8\",\"community_id\":null,"
            "\"packets\":[0,0],\"bytes\":[0,0],\"first_ts\":250,\"last_ts\":250,\"state\":null,"
            "\"close\":\"expired\",\"complete\":false,\"reason\":\"timeout\",\"late_packets\":0}\n"
            "{\"layer\":\"tcp6\",\"proto\":\"tcp\",\"uid\":2,\"src\":\"2001:db8::1\","
            "\"dst\":\"fe80::1:2\",\"sport\":5555,\"dport\":443,\"community_id\":\"1:"
            "rdBKrO7lyFvKUkpL4ZuwoYW1vWY=\",\"packets\":[0,0],"
            "\"bytes\":[0,0],\"first_ts\":150,\"last_ts\":150,\"state\":null,"
            "\"close\":\"open\",\"complete\":false}\n");
    free(fs);
    fs_rm_tree(dir);
}

/* An instance the creating packet also destroys (a whole IPv4 datagram) is
 * not written, unless every instance is asked for; one that saw a second
 * packet, or ended otherwise, is. */
static void test_flowstats_within_packet(void **state)
{
    (void)state;
    for (int all = 0; all <= 1; all++) {
        char dir[64], err[256];
        assert_non_null(fs_tmpdir(dir, "rg_nf_"));
        rg_obs *o = rg_nf_create("flowstats", &STACK, dir, err, sizeof err);
        assert_non_null(o);
        rg_nf_flowstats_all(o, all);
        rg_flow_info d1 = flow(1, 2), d2 = flow(2, 2), d3 = flow(3, 2);
        o->on_open(o->self, &d1, 10); /* datagram: one packet, destroyed by it */
        o->on_packet(o->self, &d1, 0, 20, 10);
        o->on_close(o->self, &d1, RG_CLOSE_ACCEPT, 1, 10);
        o->on_open(o->self, &d2, 20); /* two fragments */
        o->on_packet(o->self, &d2, 0, 20, 20);
        o->on_packet(o->self, &d2, 0, 20, 30);
        o->on_close(o->self, &d2, RG_CLOSE_ACCEPT, 1, 30);
        o->on_open(o->self, &d3, 40); /* a lone fragment that expires */
        o->on_packet(o->self, &d3, 0, 20, 40);
        o->on_close(o->self, &d3, RG_CLOSE_EXPIRED, 0, 9000);
        assert_int_equal(rg_nf_finish(o), RG_OK);
        char *fs = fs_read(dir, "flowstats.jsonl", NULL);
        assert_non_null(fs);
        int lines = 0;
        for (const char *p = fs; *p; p++)
            lines += *p == '\n';
        assert_int_equal(lines, all ? 3 : 2);
        assert_int_equal(strstr(fs, "\"uid\":1,") != NULL, all);
        assert_non_null(strstr(fs, "\"uid\":2,"));
        assert_non_null(strstr(fs, "\"uid\":3,"));
        assert_null(strstr(fs, "sport")); /* ip's key has no sides: no ports */
        free(fs);
        fs_rm_tree(dir);
    }
    /* not a flowstats NF: nothing happens */
    char err[256], dir[64];
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    rg_obs *c = rg_nf_create("events", &STACK, dir, err, sizeof err);
    assert_non_null(c);
    rg_nf_flowstats_all(c, 1);
    rg_nf_flowstats_all(NULL, 1);
    assert_int_equal(rg_nf_finish(c), RG_OK);
    fs_rm_tree(dir);
}

/* A write error (full disk) is reported by rg_nf_finish: outputs are
 * symbolic links to /dev/full. */
static void test_write_error(void **state)
{
    (void)state;
    char dir[64], err[256], link[128];
    if (access("/dev/full", W_OK)) {
        skip();
        return;
    }
    assert_non_null(fs_tmpdir(dir, "rg_nf_"));
    snprintf(link, sizeof link, "%s/events.jsonl", dir);
    assert_int_equal(symlink("/dev/full", link), 0);
    rg_obs *o = rg_nf_create("events", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_val a[1] = {num(1)};
    call(o, H_NOTE, NULL, 0, 1, a);
    assert_int_equal(rg_nf_finish(o), RG_EIO);

    snprintf(link, sizeof link, "%s/streams", dir);
    assert_int_equal(mkdir(link, 0777), 0);
    snprintf(link, sizeof link, "%s/streams/1-c2s.bin", dir);
    assert_int_equal(symlink("/dev/full", link), 0);
    o = rg_nf_create("streams", &STACK, dir, err, sizeof err);
    assert_non_null(o);
    rg_flow_info f1 = flow(1, 0);
    o->on_open(o->self, &f1, 1);
    rg_val b[2] = {num(1), bytes("lost", 4)};
    call(o, H_DATA, &f1, 0, 1, b);
    o->on_close(o->self, &f1, RG_CLOSE_FLUSHED, 0, 2);
    assert_int_equal(rg_nf_finish(o), RG_EIO);
    fs_rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_fips),
        cmocka_unit_test(test_sha256_lengths),
        cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_json_string),
        cmocka_unit_test_prestate(test_uid_map, (void *)1),
        cmocka_unit_test_prestate(test_uid_map, (void *)2),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_count),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_streams_sid),
        cmocka_unit_test(test_streams_many),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_flowstats),
        cmocka_unit_test(test_flowstats_within_packet),
        cmocka_unit_test(test_write_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
