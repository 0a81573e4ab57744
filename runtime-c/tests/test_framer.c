/* test_framer.c - the framer (rg_framer.c) on the cases the stack meets: TLS records (a length
 * prefix) split across deliveries and pipelined in one, a CRLF split between two deliveries, a
 * unit over the bound, a gap for each kind, and a framer freed with a unit pending. */
#include "rg_test.h"

#include "rg/rg_framer.h"

static const rg_framer_cfg TLS = {RG_FRAME_LENGTH, 3, 2, 0, 5, 1, 0, 32, 0, {0}};
static const rg_framer_cfg LINES = {RG_FRAME_DELIM, 0, 0, 0, 0, 0, 0, 8, 2, {'\r', '\n'}};

/* The units cut so far, each followed by '|' (they may hold NUL bytes). */
typedef struct {
    char b[512];
    size_t n;
} units;

#define assert_units(u, lit)                                                                       \
    do {                                                                                           \
        assert_int_equal((u).n, sizeof(lit) - 1);                                                  \
        assert_memory_equal((u).b, lit, sizeof(lit) - 1);                                          \
        (u).n = 0;                                                                                 \
    } while (0)

/* Feed one delivery, one step per unit as the self-loop does; returns the units cut. */
static unsigned feed(rg_framer *f, const rg_framer_cfg *c, const char *s, size_t n, int gap,
                     units *out, uint8_t *err)
{
    rg_bytes in = rg_bytes_make((const uint8_t *)s, n);
    unsigned k = 0;
    for (int first = 1; in.len > 0; first = 0) {
        rg_framer_res r;
        rg_bytes u = rg_framer_step(f, c, in, gap && first, &r);
        if (r.error) *err = r.error;
        if (r.unit) {
            k++;
            assert_true(out->n + u.len + 1 <= sizeof out->b);
            memcpy(out->b + out->n, u.ptr, u.len);
            out->n += u.len;
            out->b[out->n++] = '|';
        }
        assert_true(r.used > 0 && r.used <= in.len);
        in.ptr += r.used;
        in.len -= r.used;
    }
    return k;
}

static void test_records(void **state)
{
    (void)state;
    rg_framer f = {0};
    units out = {{0}, 0};
    uint8_t err = 0;
    /* "\x16\x03\x01\x00\x02hi" twice and a third record's first 3 bytes, then its rest */
    const char a[] = "\x16\x03\x01\x00\x02hi\x16\x03\x01\x00\x02ok\x17\x03";
    assert_int_equal(feed(&f, &TLS, a, sizeof a - 1, 0, &out, &err), 2);
    assert_units(out, "\x16\x03\x01\x00\x02hi|\x16\x03\x01\x00\x02ok|");
    assert_int_equal(f.have, 2);
    const char b[] = "\x03\x00\x03xyz";
    assert_int_equal(feed(&f, &TLS, b, sizeof b - 1, 0, &out, &err), 1);
    assert_units(out, "\x17\x03\x03\x00\x03xyz|");
    assert_int_equal(err, 0);
    /* a record longer than max (32): the direction is given up */
    const char c[] = "\x17\x03\x03\x01\x00";
    assert_int_equal(feed(&f, &TLS, c, sizeof c - 1, 0, &out, &err), 0);
    assert_int_equal(err, RG_FRAME_TOO_BIG);
    assert_int_equal(feed(&f, &TLS, a, sizeof a - 1, 0, &out, &err), 0); /* nothing after */
    rg_framer_free(&f);
    /* a gap: given up too */
    err = 0;
    assert_int_equal(feed(&f, &TLS, a, 3, 0, &out, &err), 0);
    assert_int_equal(feed(&f, &TLS, a, sizeof a - 1, 1, &out, &err), 0);
    assert_int_equal(err, RG_FRAME_LOST);
    rg_framer_free(&f);
}

static void test_lines(void **state)
{
    (void)state;
    rg_framer f = {0};
    units out = {{0}, 0};
    uint8_t err = 0;
    assert_int_equal(feed(&f, &LINES, "USER a\r\nPA", 10, 0, &out, &err), 1);
    assert_int_equal(feed(&f, &LINES, "SS b\r", 5, 0, &out, &err), 0); /* CR | LF */
    assert_int_equal(feed(&f, &LINES, "\n\r\nQUIT\r\n", 9, 0, &out, &err), 3);
    assert_units(out, "USER a|PASS b||QUIT|"); /* the empty line is a unit */
    /* over max (8): dropped, the next line kept */
    assert_int_equal(feed(&f, &LINES, "0123456789", 10, 0, &out, &err), 0);
    assert_int_equal(err, RG_FRAME_TOO_BIG);
    assert_int_equal(feed(&f, &LINES, "ab\r\nok\r\n", 8, 0, &out, &err), 1);
    assert_units(out, "ok|");
    /* a gap: the half line held and the bytes up to the delivery's last CRLF are dropped */
    err = 0;
    assert_int_equal(feed(&f, &LINES, "NO", 2, 0, &out, &err), 0);
    assert_int_equal(feed(&f, &LINES, "OP\r\nPWD\r\nCW", 11, 1, &out, &err), 0);
    assert_int_equal(err, RG_FRAME_LOST);
    assert_int_equal(feed(&f, &LINES, "D /\r\n", 5, 0, &out, &err), 1);
    assert_units(out, "CWD /|");
    assert_int_equal(feed(&f, &LINES, "CW", 2, 0, &out, &err), 0);
    rg_framer_free(&f); /* with a unit pending: ASan/LSan check the buffer is released */
    assert_null(f.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_lines),
    };
    return cmocka_run_group_tests_name("framer", tests, NULL, NULL);
}
