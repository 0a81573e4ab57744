/* test_driver.c - the capture driver (rg_main) with a hand-written stack
 * whose process() records what it is given, on real captures of every
 * supported link kind: entry layer, data offset, packet count, expiry on
 * packet time, the NF plumbing and summaries, bench mode, errors, usage. */
#include "rg_test.h"
#include "rg_test_fs.h"

#include <fcntl.h>
#include <pthread.h>
#include <pcap/pcap.h>

#include "rg/rg_api.h"
#include "rg_driver.h"
#include "rg_out.h"

/* ---- the recording stack ---- */

enum { L_ETH, L_NULL, L_IP4, L_IP6, L_SLL, NLAYERS };

/* What the stack saw (a test may keep globals; the driver has none). */
static struct {
    uint64_t hits[NLAYERS]; /* packets per entry layer */
    uint64_t bytes;         /* bytes given to process */
    uint64_t bad_start;     /* input not starting where the layer's header should */
    uint64_t errors;        /* errors the stack counted */
    uint64_t expires, last_expire, short_gaps;
    uint64_t ctx_new, ctx_free;
    rg_ctx_cfg cfg;
    uint32_t layer_cap[NLAYERS]; /* copied: cfg.layer_cap points into the driver's frame */
} rec;

typedef struct tctx {
    rg_ctx_cfg cfg;
    rg_stats *stats;
    rg_flow_info flow; /* one instance, opened by the first packet */
    int open;
    uint64_t pkt_no, last_ts;
} tctx;

static const rg_keypart PARTS[] = {
    {"ip.header.saddr", RG_VAL_BYTES, 0, 0, 4},
    {"header.sport", RG_VAL_NUM, 0, 4, 2},
};
static const uint8_t KEY_A[12] = {10, 0, 0, 1, 0, 1, 10, 0, 0, 2, 0, 2};
static const uint8_t KEY_P[12] = {10, 0, 0, 2, 0, 2, 10, 0, 0, 1, 0, 1};
static const char *const NAMES[NLAYERS] = {"eth", "null", "ip4", "ip6", "sll"};

#define LAYER(n)                                                                                   \
    {                                                                                              \
        n, n, n ".yaml", 1, 1, 0, 0, 12, 2, PARTS, 0, NULL, 0, 0, 0, NULL                          \
    }
static const rg_layer_desc LAYERS[NLAYERS] = {
    LAYER("eth"), LAYER("null"), LAYER("ip4"), LAYER("ip6"), LAYER("sll"),
};
static const char *const ARG_NAMES[] = {"len", "data"};
static const uint8_t ARG_KINDS[] = {RG_VAL_NUM, RG_VAL_BYTES};
static const rg_handler_desc HANDLERS[] = {{"pkt", 0, 2, ARG_NAMES, ARG_KINDS, ""}};

static void *t_new(const rg_ctx_cfg *cfg)
{
    tctx *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cfg = *cfg;
    t->stats = rg_stats_new(NLAYERS, NAMES);
    rec.ctx_new++;
    rec.cfg = *cfg;
    for (unsigned i = 0; i < NLAYERS; i++)
        rec.layer_cap[i] = cfg->layer_cap ? cfg->layer_cap[i] : 0;
    return t;
}

static void t_free(void *ctx)
{
    tctx *t = ctx;
    rg_stats_free(t->stats);
    free(t);
    rec.ctx_free++;
}

static int t_process(void *ctx, unsigned layer, const uint8_t *data, uint32_t caplen, uint64_t ts)
{
    tctx *t = ctx;
    const rg_obs *o = t->cfg.obs;
    assert_true(layer < NLAYERS);
    rec.hits[layer]++;
    rec.bytes += caplen;
    t->pkt_no++;
    t->last_ts = ts;
    rg_stats_packet(t->stats, caplen);
    rg_stats_layer_packet(&t->stats->layer[layer], caplen);
    /* the input starts with the layer's own header */
    if (layer == L_IP4 && (!caplen || data[0] >> 4 != 4)) rec.bad_start++;
    if (layer == L_IP6 && (!caplen || data[0] >> 4 != 6)) rec.bad_start++;
    if (layer == L_ETH && (caplen < 14 || (data[12] != 0x08 && data[12] != 0x86)))
        rec.bad_start++; /* EtherType IPv4, ARP or IPv6 */
    if (layer == L_NULL && (caplen < 5 || (data[4] >> 4 != 4 && data[4] >> 4 != 6)))
        rec.bad_start++; /* IP after the 4-byte family */
    if (layer == L_SLL && (caplen < 16 || (data[14] != 0x08 && data[14] != 0x86)))
        rec.bad_start++;   /* SLL protocol IPv4, ARP or IPv6 */
    if (caplen % 7 == 0) { /* some errors to add up */
        rg_stats_error(&t->stats->layer[layer], RG_REASON_MALFORMED);
        rec.errors++;
    }
    if (!t->open && o) {
        t->flow.uid = 1;
        t->flow.layer = (uint16_t)layer;
        t->flow.key_a = KEY_A;
        t->flow.key_p = KEY_P;
        t->open = 1;
        if (o->on_open) o->on_open(o->self, &t->flow, ts);
    }
    if (o && o->on_packet) o->on_packet(o->self, &t->flow, 0, caplen, ts);
    if (o && o->on_call) {
        rg_val args[2] = {{RG_VAL_NUM, caplen, rg_bytes_empty()},
                          {RG_VAL_BYTES, 0, rg_bytes_make(data, caplen)}};
        rg_call c = {0, 0, 0, &t->flow, ts, t->pkt_no, args, 0, NULL};
        o->on_call(o->self, &c);
    }
    return RG_PKT_OK;
}

static size_t t_expire(void *ctx, uint64_t now)
{
    (void)ctx;
    if (rec.expires && now - rec.last_expire < UINT64_C(1000000000)) rec.short_gaps++;
    rec.expires++;
    rec.last_expire = now;
    return 0;
}

static void t_flush(void *ctx)
{
    tctx *t = ctx;
    const rg_obs *o = t->cfg.obs;
    if (t->open && o && o->on_close)
        o->on_close(o->self, &t->flow, RG_CLOSE_FLUSHED, 0, t->last_ts);
    t->open = 0;
}

static const rg_stats *t_stats(const void *ctx)
{
    return ((const tctx *)ctx)->stats;
}

static const rg_stack_desc STACK = {
    .name = "drvtest",
    .spec_hash = "0",
    .nlayers = NLAYERS,
    .layers = LAYERS,
    .nhandlers = 1,
    .handlers = HANDLERS,
    .entry = {[RG_LINK_ETHERNET] = L_ETH,
              [RG_LINK_NULL] = L_NULL,
              [RG_LINK_RAW_IPV4] = L_IP4,
              [RG_LINK_RAW_IPV6] = L_IP6,
              [RG_LINK_SLL] = L_SLL,
              [RG_LINK_SLL2] = -1},
    .ctx_new = t_new,
    .ctx_free = t_free,
    .process = t_process,
    .expire = t_expire,
    .flush = t_flush,
    .stats = t_stats,
};

/* ---- running rg_main ---- */

static char out[1 << 16], err[1 << 16];

static void slurp(FILE *f, char *buf, size_t n)
{
    rewind(f);
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = 0;
    fclose(f);
}

/* rg_main with stdout and stderr captured into out / err; rec reset. */
static int run_argv(const rg_stack_desc *s, int argc, char **argv)
{
    memset(&rec, 0, sizeof rec);
    fflush(stdout);
    fflush(stderr);
    FILE *o = tmpfile(), *e = tmpfile();
    assert_true(o && e);
    int so = dup(1), se = dup(2);
    dup2(fileno(o), 1);
    dup2(fileno(e), 2);
    int rc = rg_main(argc, argv, s);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    slurp(o, out, sizeof out);
    slurp(e, err, sizeof err);
    assert_int_equal(rec.ctx_new, rec.ctx_free); /* every context freed */
    return rc;
}

#define RUN(stack, ...)                                                                            \
    run_argv(stack, (int)(sizeof((char *[]){"drv", __VA_ARGS__}) / sizeof(char *)),                \
             (char *[]){"drv", __VA_ARGS__, NULL})

static const char *traces_dir(void)
{
    const char *d = getenv("RG_TRACES");
    if (!d || !*d) d = "../../shared/traces";
    DIR *x = opendir(d);
    if (!x) return NULL;
    closedir(x);
    return d;
}

/* Path of a real capture (in one of 4 rotating buffers); skips the test
 * when the traces are absent. */
static char *trace(const char *name)
{
    static char buf[4][512];
    static int slot;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping\n");
        skip();
    }
    slot = (slot + 1) & 3;
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", d, name);
    return buf[slot];
}

/* The value of a text summary line "key   value". */
static uint64_t field(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s ", key);
    const char *p = strstr(text, pat);
    if (!p && !strncmp(text, pat + 1, strlen(pat + 1))) p = text - 1;
    if (!p) fail_msg("no '%s' in summary:\n%s", key, text);
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return strtoull(p, NULL, 10);
}

/* The number after "key": in a JSON line. */
static double jfield(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) fail_msg("no %s in %s", pat, json);
    return strtod(p + strlen(pat), NULL);
}

static uint64_t total_hits(void)
{
    uint64_t n = 0;
    for (int i = 0; i < NLAYERS; i++)
        n += rec.hits[i];
    return n;
}

/* Only layer `layer` got packets, n of them, each starting at its header. */
static void check_entry(int layer, uint64_t n)
{
    if (rec.hits[layer] != n || total_hits() != n)
        fail_msg("layer %d: %llu of %llu packets (stderr: %s)", layer,
                 (unsigned long long)rec.hits[layer], (unsigned long long)total_hits(), err);
    assert_int_equal(rec.bad_start, 0);
}

/* ---- tests ---- */

static void test_ethernet(void **state)
{
    (void)state;
    char *cap = trace("http-post-upload.pcap"); /* 34 frames over 30 s */
    assert_int_equal(RUN(&STACK, cap, "--cap", "ip4=5", "--cap", "sll=6"), 0);
    assert_int_equal(rec.layer_cap[L_IP4], 5);
    assert_int_equal(rec.layer_cap[L_SLL], 6);
    assert_int_equal(rec.layer_cap[L_ETH], 0);
    assert_int_equal(RUN(&STACK, cap, "--cap", "1000", "--seed", "99"), 0);
    check_entry(L_ETH, 34);
    assert_int_equal(rec.cfg.inst_cap, 1000);
    assert_int_equal(rec.layer_cap[L_IP4], 0);
    assert_int_equal(rec.cfg.seed, 99);
    assert_int_equal(rec.cfg.no_timeouts, 0);
    assert_int_equal(field(out, "packets"), 34);
    assert_int_equal(field(out, "bytes"), rec.bytes);
    assert_int_equal(field(out, "flows_opened"), 1);
    assert_int_equal(field(out, "flows_closed"), 1); /* by the final flush */
    assert_int_equal(field(out, "live_at_end"), 1);
    assert_int_equal(field(out, "calls"), 34);
    assert_int_equal(field(out, "payload_bytes"), rec.bytes);
    assert_int_equal(field(out, "errors"), rec.errors);
    assert_int_equal(field(out, "skipped"), 0);
    /* expiry on packet time, >= 1 s apart: the frames come at 0-0.29 s, 4.27-4.43 s,
     * 24.29 s and 30.0 s, so at the first frame of each of the last three bursts */
    assert_int_equal(rec.expires, 3);
    assert_int_equal(rec.short_gaps, 0);
    assert_string_equal(err, "");
}

static void test_null(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, trace("null-smtp-rset.pcap")), 0);
    check_entry(L_NULL, 42);
    assert_int_equal(field(out, "packets"), 42);
}

static void test_raw_ip(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, trace("raw-ipv4-ipv6-http.pcap")), 0);
    /* per frame by IP version, data at the IP header */
    assert_true(rec.hits[L_IP4] > 0 && rec.hits[L_IP6] > 0);
    assert_int_equal(rec.hits[L_IP4] + rec.hits[L_IP6], total_hits());
    assert_int_equal(total_hits() + field(out, "skipped"), 100);
    assert_int_equal(field(out, "packets"), 100);
    assert_int_equal(rec.bad_start, 0);
    /* no IPv6 entry: the IPv6 frames are skipped and counted as errors */
    rg_stack_desc v4only = STACK;
    v4only.entry[RG_LINK_RAW_IPV6] = -1;
    uint64_t v4 = rec.hits[L_IP4], v6 = rec.hits[L_IP6];
    assert_int_equal(RUN(&v4only, trace("raw-ipv4-ipv6-http.pcap")), 0);
    assert_int_equal(rec.hits[L_IP4], v4);
    assert_int_equal(rec.hits[L_IP6], 0);
    assert_int_equal(field(out, "skipped"), v6);
    assert_int_equal(field(out, "errors"), rec.errors + v6);
}

static void test_sll(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, trace("sll-dns2tcp-tls.pcap")), 0);
    check_entry(L_SLL, 50);
}

/* No entry for the capture's link type: the run goes on, every frame is
 * skipped and counted (skipped_linktype), one warning names the link type and
 * the stack's entries. */
static void test_missing_entry(void **state)
{
    (void)state;
    rg_stack_desc s = STACK;
    s.entry[RG_LINK_NULL] = -1;
    assert_int_equal(RUN(&s, trace("null-smtp-rset.pcap")), 0);
    assert_non_null(strstr(err, "warning"));
    assert_non_null(strstr(err, "link type NULL"));
    assert_non_null(strstr(err, "drvtest"));
    assert_null(strstr(strstr(err, "warning") + 1, "warning")); /* once */
    assert_int_equal(total_hits(), 0);
    assert_int_equal(field(out, "skipped_linktype"), 42);
    assert_int_equal(field(out, "skipped"), 42);
    s = STACK;
    s.entry[RG_LINK_RAW_IPV4] = s.entry[RG_LINK_RAW_IPV6] = -1;
    assert_int_equal(RUN(&s, trace("raw-ipv4-ipv6-http.pcap")), 0);
    assert_non_null(strstr(err, "RAW"));
    assert_int_equal(field(out, "skipped_linktype"), 100);
    s = STACK;
    s.entry[RG_LINK_ETHERNET] = -1;
    assert_int_equal(RUN(&s, trace("http-post-upload.pcap"), "--bench", "--passes", "2"), 0);
    assert_non_null(strstr(err, "EN10MB"));
    assert_null(strstr(strstr(err, "warning") + 1, "warning")); /* the first pass only */
}

static void test_bench(void **state)
{
    (void)state;
    char *cap = trace("http-post-upload.pcap");
    assert_int_equal(RUN(&STACK, cap, "--bench", "--passes", "2"), 0);
    assert_int_equal(fs_lines(out), 1);
    assert_true(out[0] == '{' && out[strlen(out) - 2] == '}');
    assert_int_equal(rec.ctx_new, 2); /* a fresh context per pass */
    assert_int_equal(total_hits(), 68);
    assert_int_equal(jfield(out, "pkts"), 34);
    assert_int_equal(jfield(out, "passes"), 2);
    assert_true(jfield(out, "cpu_ns_per_pkt") > 0);
    assert_true(jfield(out, "wall_ns_per_pkt") > 0);
    assert_int_equal(jfield(out, "payload_bytes"), rec.bytes / 2); /* one pass */
    assert_int_equal(jfield(out, "flows_opened"), 1);
    assert_int_equal(jfield(out, "flows_closed"), 1);
    assert_int_equal(jfield(out, "calls"), 34);
    /* none: instances are counted, calls are not observed */
    assert_int_equal(RUN(&STACK, cap, "--bench", "--nf", "none"), 0);
    assert_int_equal(rec.ctx_new, 3); /* the default passes */
    assert_int_equal(jfield(out, "calls"), 0);
    assert_int_equal(jfield(out, "payload_bytes"), 0);
    assert_int_equal(jfield(out, "flows_opened"), 1);
    assert_int_equal(RUN(&STACK, cap, "--bench", "--nf", "streams"), 2);
    assert_int_equal(rec.ctx_new, 0);
}

static void test_json_summary(void **state)
{
    (void)state;
    char *cap = trace("http-post-upload.pcap");
    assert_int_equal(RUN(&STACK, cap, "--summary", "json", "--nf", "none", "--stats"), 0);
    assert_int_equal(fs_lines(out), 1);
    assert_int_equal(strncmp(out, "{\"stack\":\"drvtest\",", 19), 0);
    assert_int_equal(jfield(out, "packets"), 34);
    assert_int_equal(jfield(out, "flows_opened"), 1);
    assert_int_equal(jfield(out, "flows_closed"), 1);
    assert_int_equal(jfield(out, "live_at_end"), 1);
    assert_int_equal(jfield(out, "calls"), 0); /* --nf none */
    assert_int_equal(jfield(out, "errors"), rec.errors);
    assert_non_null(strstr(out, "\"link\":\"ether\""));
    assert_non_null(strstr(err, "eth")); /* --stats table */
    assert_non_null(strstr(err, "packets 34"));
}

static void test_nfs(void **state)
{
    (void)state;
    char *cap = trace("http-post-upload.pcap");
    char dir[64], sub[128];
    assert_non_null(fs_tmpdir(dir, "rg_drv_"));
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* parents are created */
    assert_int_equal(RUN(&STACK, cap, "--nf", "streams", "--out", sub), 0);
    assert_int_equal(field(out, "calls"), 34); /* counted around the chosen NF */
    assert_int_equal(field(out, "flows_closed"), 1);
    char *flows = fs_read(sub, "flows.jsonl", NULL);
    assert_non_null(flows);
    assert_int_equal(fs_lines(flows), 2);
    assert_non_null(strstr(flows, "\"src\":\"10.0.0.1\",\"dst\":\"10.0.0.2\",\"sport\":1"));
    free(flows);
    size_t n;
    char *c2s = fs_read(sub, "streams/1-c2s.bin", &n);
    assert_non_null(c2s);
    assert_int_equal(n, rec.bytes);
    free(c2s);
    assert_int_equal(RUN(&STACK, cap, "--nf", "events", "--out", sub), 0);
    char *ev = fs_read(sub, "events.jsonl", NULL);
    assert_int_equal(fs_lines(ev), 34 + 1); /* the calls, and the flow's close line */
    assert_non_null(strstr(ev, "\"event\":\"close\""));
    free(ev);
    assert_int_equal(RUN(&STACK, cap, "--nf", "flowstats", "--out", sub), 0);
    char *fs = fs_read(sub, "flowstats.jsonl", NULL);
    assert_int_equal(fs_lines(fs), 1);
    assert_non_null(strstr(fs, "\"packets\":[34,0]"));
    free(fs);
    /* an output directory that cannot be created */
    snprintf(sub, sizeof sub, "%s/a/b/flows.jsonl/x", dir);
    assert_int_equal(RUN(&STACK, cap, "--nf", "streams", "--out", sub), 1);
    assert_non_null(strstr(err, "flows.jsonl"));
    assert_int_equal(rec.ctx_new, 0);
    fs_rm_tree(dir);
}

static void test_no_timeouts(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, trace("http-post-upload.pcap"), "--no-timeouts"), 0);
    assert_int_equal(rec.expires, 0);
    assert_int_equal(rec.cfg.no_timeouts, 1);
    assert_int_equal(rec.cfg.inst_cap, 0); /* default */
}

static void test_stdin(void **state)
{
    (void)state;
    int fd = open(trace("null-smtp-rset.pcap"), O_RDONLY);
    assert_true(fd >= 0);
    int saved = dup(0);
    dup2(fd, 0);
    close(fd);
    int rc = RUN(&STACK, "-");
    dup2(saved, 0);
    close(saved);
    clearerr(stdin);
    assert_int_equal(rc, 0);
    check_entry(L_NULL, 42);
}

static void test_capture_errors(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, "/nonexistent/x.pcap"), 1);
    assert_non_null(strstr(err, "/nonexistent/x.pcap"));
    assert_int_equal(RUN(&STACK, "/nonexistent/x.pcap", "--bench"), 1);
    assert_non_null(strstr(err, "/nonexistent/x.pcap"));
    /* a capture cut inside a record: what was read is processed, exit 1 */
    char dir[64], path[128];
    assert_non_null(fs_tmpdir(dir, "rg_drv_"));
    snprintf(path, sizeof path, "%s/cut.pcap", dir);
    size_t n;
    char *all = fs_read(traces_dir() ? traces_dir() : "/nonexistent", "null-smtp-rset.pcap", &n);
    if (!all) {
        fs_rm_tree(dir);
        skip();
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(all, 1, n - 10, f);
    fclose(f);
    free(all);
    assert_int_equal(RUN(&STACK, path), 1);
    assert_non_null(strstr(err, path));
    assert_int_equal(field(out, "packets"), 41);
    assert_int_equal(field(out, "flows_closed"), 1);
    fs_rm_tree(dir);
}

static void test_usage(void **state)
{
    (void)state;
    assert_int_equal(RUN(&STACK, "x.pcap", "--bogus"), 2);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(RUN(&STACK, "--help"), 0);
    assert_non_null(strstr(out, "usage: drv CAPTURE"));
    assert_non_null(strstr(out, "drvtest"));
    assert_int_equal(RUN(&STACK, "--nf", "count"), 2); /* no capture */
    assert_int_equal(RUN(&STACK, "a.pcap", "b.pcap"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--nf", "bogus"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "0"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "-5"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "4294967296"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "nosuch=3"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "ip4=0"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--cap", "ip=3"), 2); /* a prefix is not a name */
    assert_int_equal(RUN(&STACK, "a.pcap", "--seed", "x"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--summary", "xml"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--passes", "2"), 2); /* needs --bench */
    assert_int_equal(RUN(&STACK, "a.pcap", "--bench", "--passes", "0"), 2);
    assert_int_equal(RUN(&STACK, "a.pcap", "--nf"), 2);
    assert_int_equal(rec.ctx_new, 0);
}

/* ---- rg_feed_burst against rg_feed ---- */

/* What the feeder did, in order: process (layer, offset, length, time, uid_mark at the call),
 * expire (time), batch_end. */
typedef struct feed_ev {
    char kind;
    unsigned layer;
    uint64_t off, len, ts, mark;
} feed_ev;
enum { FEED_FRAMES = 3000, FEED_LOG = 3 * FEED_FRAMES };
static struct {
    feed_ev ev[FEED_LOG];
    unsigned n;
    const uint8_t *base; /* the frames' buffer: offsets are from it */
    rg_counts *nc;
} flog;

static void flog_add(feed_ev e)
{
    assert_true(flog.n < FEED_LOG);
    flog.ev[flog.n++] = e;
}

static int f_process(void *ctx, unsigned layer, const uint8_t *data, uint32_t caplen, uint64_t ts)
{
    (void)ctx;
    flog_add((feed_ev){'p', layer, (uint64_t)(data - flog.base), caplen, ts, flog.nc->uid_mark});
    if (caplen % 3 == 0) flog.nc->uid_max++; /* an instance opened: the next mark moves */
    return RG_PKT_OK;
}

static size_t f_expire(void *ctx, uint64_t now)
{
    (void)ctx;
    flog_add((feed_ev){'e', 0, 0, 0, now, 0});
    return 0;
}

static void f_batch(void *self)
{
    (void)self;
    flog_add((feed_ev){'b', 0, 0, 0, 0, 0});
}

static const rg_stack_desc FEED_STACK = {
    .name = "feedtest",
    .spec_hash = "0",
    .nlayers = NLAYERS,
    .layers = LAYERS,
    .entry = {[RG_LINK_ETHERNET] = L_ETH,
              [RG_LINK_NULL] = -1,
              [RG_LINK_RAW_IPV4] = L_IP4,
              [RG_LINK_RAW_IPV6] = L_IP6,
              [RG_LINK_SLL] = -1,
              [RG_LINK_SLL2] = -1},
    .process = f_process,
    .expire = f_expire,
};

typedef struct feed_out {
    feed_ev ev[FEED_LOG];
    unsigned n;
    uint64_t pkts, bytes, skipped, skipped_linktype, last_expire, uid_mark;
    int expire_on;
} feed_out;

/* Feed f[0..n) with rg_feed one by one (burst 0) or with rg_feed_burst in bursts. */
static void feed_all(const rg_frame *f, unsigned n, int first_dlt, int no_timeouts, int batch,
                     unsigned burst, feed_out *o)
{
    rg_entry_links lm;
    rg_linkinfo li;
    assert_int_equal(rg_link_info(first_dlt, &li), RG_OK);
    assert_int_equal(rg_entry_links_init(&lm, &FEED_STACK, &li), RG_OK);
    rg_counts nc = {0};
    flog.n = 0;
    flog.nc = &nc;
    feeder fd;
    rg_feeder_init(&fd, &FEED_STACK, &lm, NULL, no_timeouts, &nc);
    if (batch) fd.batch_end = f_batch;
    if (!burst) {
        for (unsigned i = 0; i < n; i++)
            (void)rg_feed(&fd, &f[i]);
    } else {
        for (unsigned i = 0; i < n; i += burst)
            rg_feed_burst(&fd, &f[i], n - i < burst ? n - i : burst);
    }
    memcpy(o->ev, flog.ev, flog.n * sizeof *o->ev);
    o->n = flog.n;
    o->pkts = fd.pkts;
    o->bytes = fd.bytes;
    o->skipped = fd.skipped;
    o->skipped_linktype = fd.skipped_linktype;
    o->last_expire = fd.last_expire;
    o->expire_on = fd.expire_on;
    o->uid_mark = nc.uid_mark;
}

/* rg_feed_burst does what rg_feed does frame by frame: the same process, expire and batch_end
 * calls in the same order with the same arguments, the same counts, on frames whose times
 * step around the one-second expiry rule (forward, backward, exactly at it, wrapping), of
 * the first link type, of another the stack takes (raw IP: the entry chosen by IP version)
 * and of one it has no entry for, in bursts of 1, 7 and 32, with and without --no-timeouts
 * and an NF chain's batch_end. */
static void test_feed_burst_same_as_feed(void **state)
{
    (void)state;
    static uint8_t buf[FEED_FRAMES][64];
    static rg_frame fr[FEED_FRAMES];
    static feed_out a, b;
    const uint64_t S = NS_PER_S;
    const uint64_t steps[] = {0,  1,      S - 1,  S,         S + 1,     -(S - 1),
                              -S, -S - 1, 10 * S, -(10 * S), 123456789, 2};
    flog.base = &buf[0][0];
    for (int first = 0; first < 2; first++) {
        const int dlt0 = first ? DLT_RAW : DLT_EN10MB;
        uint64_t ts = first ? S / 2 : 5 * S, x = 12345;
        for (unsigned i = 0; i < FEED_FRAMES; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            const unsigned r = (unsigned)(x >> 33);
            ts += steps[r % (sizeof steps / sizeof *steps)];
            const unsigned k = (r >> 8) % 20; /* 0-15 first link, 16-18 raw IP, 19 no entry */
            fr[i].data = buf[i];
            fr[i].caplen = fr[i].len = 20 + (r >> 16) % 40;
            fr[i].ts_ns = ts;
            fr[i].dlt = k < 16 ? dlt0 : k < 19 ? (first ? DLT_EN10MB : DLT_RAW) : 105;
            memset(buf[i], 0, sizeof buf[i]);
            if (fr[i].dlt == DLT_EN10MB) {
                buf[i][12] = 0x08; /* EtherType IPv4 */
                buf[i][14] = 0x45;
            } else if (fr[i].dlt == DLT_RAW) { /* IPv4, IPv6 or neither (skipped) */
                buf[i][0] = (uint8_t[]){0x45, 0x60, 0x00}[(r >> 24) % 3];
            }
        }
        for (int nt = 0; nt < 2; nt++) {
            for (int batch = 0; batch < 2; batch++) {
                feed_all(fr, FEED_FRAMES, dlt0, nt, batch, 0, &a);
                assert_true(a.pkts == FEED_FRAMES && a.skipped > 0 && a.n > FEED_FRAMES / 2);
                if (!nt) assert_true(a.expire_on); /* expiries happened */
                for (unsigned burst = 1; burst <= 32; burst += burst == 1 ? 6 : 25) {
                    feed_all(fr, FEED_FRAMES, dlt0, nt, batch, burst, &b);
                    assert_int_equal(a.n, b.n);
                    for (unsigned i = 0; i < a.n; i++) {
                        const feed_ev *p = &a.ev[i], *q = &b.ev[i];
                        if (p->kind != q->kind || p->layer != q->layer || p->off != q->off ||
                            p->len != q->len || p->ts != q->ts || p->mark != q->mark)
                            fail_msg("link %d nt %d batch %d burst %u: event %u differs", dlt0, nt,
                                     batch, burst, i);
                    }
                    assert_int_equal(a.pkts, b.pkts);
                    assert_int_equal(a.bytes, b.bytes);
                    assert_int_equal(a.skipped, b.skipped);
                    assert_int_equal(a.skipped_linktype, b.skipped_linktype);
                    assert_int_equal(a.last_expire, b.last_expire);
                    assert_int_equal(a.expire_on, b.expire_on);
                    assert_int_equal(a.uid_mark, b.uid_mark);
                }
            }
        }
    }
}

/* ---- rg_out: the NFs' line outputs ---- */

typedef struct out_writer {
    char path[256];
    unsigned worker, n;
} out_writer;

/* A writer thread: n records of varying length (up to 3 KiB, past stdio's and a pipe's
 * atomic sizes) through its own handle on the shared path. */
static void *out_write_many(void *arg)
{
    out_writer *w = arg;
    char err[256], rec[4096];
    rg_out *o = rg_out_open(w->path, w->worker, RG_OUT_TAG, err, sizeof err);
    if (!o) return NULL;
    for (unsigned i = 0; i < w->n; i++) {
        unsigned pad = (i * 7919u) % 3000;
        int len = snprintf(rec, sizeof rec, "{\"uid\":%u,\"pad\":\"%*s\"}\n", i * 2 + w->worker + 1,
                           (int)pad, "");
        if (rg_out_write(o, rec, (size_t)len)) break;
    }
    rg_out_close(o, err, sizeof err);
    return NULL;
}

static void test_out_shared_whole_lines(void **state)
{
    (void)state;
    char dir[64], wdir[128], path[160];
    assert_non_null(fs_tmpdir(dir, "rgout"));
    snprintf(wdir, sizeof wdir, "%s/.rg-worker-1", dir); /* rg_nfchain.h RG_WORKER_DIR */
    assert_int_equal(mkdir(wdir, 0700), 0);
    out_writer w[2] = {{.worker = 0, .n = 2000}, {.worker = 1, .n = 2000}};
    snprintf(w[0].path, sizeof w[0].path, "%s/x.jsonl", dir);
    snprintf(w[1].path, sizeof w[1].path, "%s/x.jsonl", wdir); /* a worker's part: the same file */
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, out_write_many, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    snprintf(path, sizeof path, "%s/x.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char line[8192];
    unsigned seen[2] = {0, 0};
    while (fgets(line, sizeof line, f)) {
        unsigned uid, worker;
        size_t n = strlen(line);
        assert_true(n > 0 && line[n - 1] == '\n'); /* whole lines, never two in one */
        char *wk = strstr(line, ",\"worker\":");
        assert_non_null(wk); /* a flow record: tagged with its worker, as the last member */
        assert_int_equal(sscanf(line, "{\"uid\":%u,", &uid), 1);
        assert_int_equal(sscanf(wk, ",\"worker\":%u}", &worker), 1);
        assert_string_equal(strchr(wk + 1, '}'), "}\n");
        assert_int_equal((uid - 1) % 2, worker);
        assert_int_equal(uid, seen[worker] * 2 + worker + 1); /* each writer's own order */
        seen[worker]++;
    }
    fclose(f);
    assert_int_equal(seen[0], 2000);
    assert_int_equal(seen[1], 2000);
    fs_rm_tree(dir);
}

static void test_out_rotate(void **state)
{
    (void)state;
    char err[256], dir[64], path[128];
    assert_int_equal(rg_out_rotate_option("10m", err, sizeof err), RG_EINVAL);
    assert_non_null(strstr(err, "min for minutes"));
    assert_int_equal(rg_out_rotate_option("0", err, sizeof err), RG_EINVAL);
    assert_int_equal(rg_out_rotate_option("1x", err, sizeof err), RG_EINVAL);
    assert_int_equal(rg_out_rotate_option("1h", err, sizeof err), RG_OK);
    assert_int_equal(rg_out_rotate_option("1K", err, sizeof err), RG_OK);
    assert_non_null(fs_tmpdir(dir, "rgrot"));
    snprintf(path, sizeof path, "%s/r.jsonl", dir);
    rg_out *o = rg_out_open(path, 0, 0, err, sizeof err);
    assert_non_null(o);
    const char rec[] = "{\"n\":\"0123456789012345678901234567890123456789\"}\n"; /* 49 bytes */
    const unsigned r = sizeof rec - 1;
    for (int i = 0; i < 100; i++)
        assert_int_equal(rg_out_write(o, rec, sizeof rec - 1), RG_OK);
    assert_int_equal(rg_out_close(o, err, sizeof err), RG_OK);
    /* 4900 bytes in files of at most 1 KiB (20 records): 5 files, every record once */
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned files = 0, total = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "r.jsonl", 7)) continue;
        char p[400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        assert_int_equal(stat(p, &st), 0);
        total += (unsigned)st.st_size;
        files++;
        if (st.st_size > 1024 || st.st_size % r) break; /* checked below, the directory closed */
    }
    closedir(d);
    assert_null(e); /* every file within 1 KiB, whole records */
    assert_int_equal(files, 5);
    assert_int_equal(total, 100 * r);
    /* no rotation for the tests after this one */
    assert_int_equal(rg_out_rotate_option("1000G", err, sizeof err), RG_OK);
    assert_int_equal(rg_out_rotate_option("1000d", err, sizeof err), RG_OK);
    fs_rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ethernet),
        cmocka_unit_test(test_null),
        cmocka_unit_test(test_raw_ip),
        cmocka_unit_test(test_sll),
        cmocka_unit_test(test_missing_entry),
        cmocka_unit_test(test_bench),
        cmocka_unit_test(test_json_summary),
        cmocka_unit_test(test_nfs),
        cmocka_unit_test(test_no_timeouts),
        cmocka_unit_test(test_stdin),
        cmocka_unit_test(test_capture_errors),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_feed_burst_same_as_feed),
        cmocka_unit_test(test_out_shared_whole_lines),
        cmocka_unit_test(test_out_rotate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
