/* test_source.c - the packet-source seam (rg_source.h) driven through its
 * ops alone, as the driver does: the file source on real captures, compared
 * with what tshark reads from the same files (frame count, every frame's
 * captured and original length and timestamp, total bytes), the burst
 * contract (frames of a burst stay valid until the next call: the bytes of
 * bursts of 32 equal those of bursts of 1), the end, errors and the
 * registry. */
#include "rg_test.h"
#include "rg_test_fs.h"

#include <dirent.h>
#include <inttypes.h>

#include "rg/rg_source.h"

/* ---- the reference: tshark ---- */

typedef struct ref_frame {
    uint32_t caplen, len;
    uint64_t ts_ns;
} ref_frame;

typedef struct ref_capture {
    ref_frame *f;
    size_t n;
    uint64_t bytes;
} ref_capture;

static const char *traces_dir(void)
{
    const char *d = getenv("RG_TRACES");
    if (!d || !*d) d = "../../shared/traces";
    DIR *x = opendir(d);
    if (!x) return NULL;
    closedir(x);
    return d;
}

/* "SEC.FRAC" (tshark's frame.time_epoch) in nanoseconds. */
static uint64_t epoch_ns(const char *s)
{
    char *end;
    uint64_t ns = (uint64_t)strtoull(s, &end, 10) * UINT64_C(1000000000);
    if (*end != '.') return ns;
    uint64_t frac = 0;
    int digits = 0;
    for (const char *p = end + 1; *p >= '0' && *p <= '9'; p++)
        if (digits < 9) {
            frac = frac * 10 + (uint64_t)(*p - '0');
            digits++;
        }
    while (digits++ < 9)
        frac *= 10;
    return ns + frac;
}

/* What tshark reads from path (its own configuration kept out: an empty
 * config directory); 0 if tshark is not there. */
static int tshark_read(const char *path, ref_capture *r)
{
    char cfg[64], cmd[1024], line[256];
    memset(r, 0, sizeof *r);
    if (system("tshark -v > /dev/null 2>&1") != 0) return 0;
    assert_non_null(fs_tmpdir(cfg, "rg_src_"));
    snprintf(cmd, sizeof cmd,
             "WIRESHARK_CONFIG_DIR=%s tshark -n -r '%s' -T fields -e frame.cap_len -e frame.len "
             "-e frame.time_epoch 2>/dev/null",
             cfg, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 0;
    while (fgets(line, sizeof line, p)) {
        if (r->n == cap) {
            cap = cap ? cap * 2 : 256;
            r->f = realloc(r->f, cap * sizeof *r->f);
            assert_non_null(r->f);
        }
        char *a = line, *b = strchr(a, '\t'), *c = b ? strchr(b + 1, '\t') : NULL;
        assert_non_null(c);
        r->f[r->n].caplen = (uint32_t)strtoul(a, NULL, 10);
        r->f[r->n].len = (uint32_t)strtoul(b + 1, NULL, 10);
        r->f[r->n].ts_ns = epoch_ns(c + 1);
        r->bytes += r->f[r->n].caplen;
        r->n++;
    }
    assert_int_equal(pclose(p), 0);
    fs_rm_tree(cfg);
    return 1;
}

/* ---- reading through the ops ---- */

typedef struct got {
    size_t n;
    uint64_t bytes;
    uint64_t *hash; /* FNV-1a of each frame's bytes */
    ref_frame *f;
    int end; /* RG_SRC_END or RG_SRC_ERROR */
} got;

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* Every frame of path, in bursts of at most max; each burst's frames are
 * read only after the whole burst was returned. */
static got read_all(const char *path, unsigned max)
{
    const rg_source_ops *ops = rg_source_find("file");
    assert_ptr_equal(ops, &rg_source_file);
    char err[256];
    rg_source_cfg cfg = {.name = path};
    rg_source *s = ops->open(&cfg, err, sizeof err);
    if (!s) fail_msg("%s: %s", path, err);
    assert_ptr_equal(s->ops, ops);
    const rg_linkinfo *li = ops->link(s);
    assert_non_null(li);
    got g = {0};
    size_t cap = 0;
    rg_frame burst[RG_BURST_MAX]; /* a file source fills up to max, at most RG_BURST_MAX */
    int n;
    while ((n = ops->next_burst(s, burst, max)) >= 0) {
        assert_true((unsigned)n <= max);
        for (int i = 0; i < n; i++) {
            if (g.n == cap) {
                cap = cap ? cap * 2 : 256;
                g.hash = realloc(g.hash, cap * sizeof *g.hash);
                g.f = realloc(g.f, cap * sizeof *g.f);
                assert_true(g.hash && g.f);
            }
            g.hash[g.n] = fnv(burst[i].data, burst[i].caplen);
            g.f[g.n] = (ref_frame){burst[i].caplen, burst[i].len, burst[i].ts_ns};
            g.bytes += burst[i].caplen;
            g.n++;
        }
    }
    g.end = n;
    if (n == RG_SRC_END) assert_int_equal(ops->next_burst(s, burst, max), RG_SRC_END); /* stays */
    rg_source_stats st;
    ops->stats(s, &st);
    assert_int_equal(st.frames, g.n);
    assert_int_equal(st.bytes, g.bytes);
    assert_int_equal(st.dropped, 0);
    ops->close(s);
    return g;
}

static void got_free(got *g)
{
    free(g->hash);
    free(g->f);
}

/* path through the file source equals tshark's reading of it, in bursts of
 * 1, 7 and RG_BURST; 0 when tshark is not there. */
static int check_capture(const char *path)
{
    ref_capture ref;
    if (!tshark_read(path, &ref)) return 0;
    assert_true(ref.n > 0);
    got one = read_all(path, 1);
    assert_int_equal(one.end, RG_SRC_END);
    assert_int_equal(one.n, ref.n);
    assert_int_equal(one.bytes, ref.bytes);
    for (size_t i = 0; i < ref.n; i++) {
        assert_int_equal(one.f[i].caplen, ref.f[i].caplen);
        assert_int_equal(one.f[i].len, ref.f[i].len);
        assert_int_equal(one.f[i].ts_ns, ref.f[i].ts_ns);
    }
    static const unsigned sizes[] = {7, RG_BURST, RG_BURST + 10, RG_BURST_MAX + 10 /* clamped */};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        got g = read_all(path, sizes[k]);
        assert_int_equal(g.end, RG_SRC_END);
        assert_int_equal(g.n, one.n);
        assert_memory_equal(g.hash, one.hash, one.n * sizeof *one.hash);
        assert_memory_equal(g.f, one.f, one.n * sizeof *one.f);
        got_free(&g);
    }
    print_message("  %s: %zu frames, %" PRIu64 " bytes (tshark: %zu, %" PRIu64 ")\n", path, one.n,
                  one.bytes, ref.n, ref.bytes);
    got_free(&one);
    free(ref.f);
    return 1;
}

static const char *const CAPTURES[] = {
    "null-smtp-rset.pcap",      /* BSD loopback */
    "sll-dns2tcp-tls.pcap",     /* Linux cooked */
    "raw-ipv4-ipv6-http.pcap",  /* raw IP */
    "snaplen96-http.pcap",      /* caplen < len */
    "tcp-retransmissions.pcap", /* Ethernet */
};

static void test_file_source_vs_tshark(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping real captures\n");
        skip();
        return;
    }
    int checked = 0;
    for (size_t i = 0; i < sizeof CAPTURES / sizeof CAPTURES[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", d, CAPTURES[i]);
        checked += check_capture(path);
    }
    if (!checked) {
        print_message("  tshark not found: skipping\n");
        skip();
    }
}

/* The same capture as pcapng (editcap converts it): the same frames. */
static void test_file_source_pcapng(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d || system("editcap -v > /dev/null 2>&1") != 0) {
        skip();
        return;
    }
    char dir[64], cmd[1024], out[128];
    assert_non_null(fs_tmpdir(dir, "rg_src_"));
    snprintf(out, sizeof out, "%s/x.pcapng", dir);
    snprintf(cmd, sizeof cmd, "editcap -F pcapng '%s/sll-dns2tcp-tls.pcap' '%s' 2>/dev/null", d,
             out);
    assert_int_equal(system(cmd), 0);
    if (!check_capture(out)) {
        fs_rm_tree(dir);
        skip();
        return;
    }
    fs_rm_tree(dir);
}

/* A capture cut inside a record: the frames before it, then RG_SRC_ERROR
 * with a message; a file that is not there, or a filter, does not open. */
static void test_file_source_errors(void **state)
{
    (void)state;
    char err[256];
    rg_source_cfg cfg = {.name = "/nonexistent/x.pcap"};
    assert_null(rg_source_file.open(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/x.pcap"));
    cfg.filter = "tcp";
    assert_null(rg_source_file.open(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "filter"));

    const char *d = traces_dir();
    size_t n;
    char *all = d ? fs_read(d, "null-smtp-rset.pcap", &n) : NULL;
    if (!all) {
        skip();
        return;
    }
    char dir[64], path[128];
    assert_non_null(fs_tmpdir(dir, "rg_src_"));
    snprintf(path, sizeof path, "%s/cut.pcap", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(all, 1, n - 10, f);
    fclose(f);
    free(all);
    got g = read_all(path, RG_BURST);
    assert_int_equal(g.end, RG_SRC_ERROR);
    assert_int_equal(g.n, 41); /* the 42nd record is cut */
    got_free(&g);
    cfg = (rg_source_cfg){.name = path};
    rg_source *s = rg_source_file.open(&cfg, err, sizeof err);
    assert_non_null(s);
    rg_frame b[RG_BURST];
    while (s->ops->next_burst(s, b, RG_BURST) > 0)
        ;
    assert_true(strlen(s->ops->error(s)) > 0);
    s->ops->close(s);
    fs_rm_tree(dir);
}

/* The registry: every source has a name, help and every op; names are unique. */
static void test_registry(void **state)
{
    (void)state;
    size_t n = 0;
    for (const rg_source_ops *const *s = rg_sources; *s; s++, n++) {
        assert_non_null((*s)->name);
        assert_non_null((*s)->help);
        assert_true((*s)->open && (*s)->next_burst && (*s)->link && (*s)->stats && (*s)->error &&
                    (*s)->close);
        assert_ptr_equal(rg_source_find((*s)->name), *s);
    }
    assert_true(n >= 1);
    assert_null(rg_source_find("nosuch"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_source_vs_tshark),
        cmocka_unit_test(test_file_source_pcapng),
        cmocka_unit_test(test_file_source_errors),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
