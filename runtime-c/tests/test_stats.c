/* test_stats.c - runtime counters. */
#include "rg_test.h"

#include "rg/rg_flow.h"
#include "rg/rg_seq.h"
#include "rg/rg_stats.h"

static char *capture(void (*fn)(const rg_stats *, FILE *), const rg_stats *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    fn(s, f);
    fclose(f);
    return buf;
}

static void test_counters(void **state)
{
    (void)state;
    const char *names[3] = {"eth", "ip", "tcp"};
    rg_stats *s = rg_stats_new(3, names);
    assert_non_null(s);
    rg_stats_packet(s, 1500);
    rg_stats_packet(s, 60);
    assert_int_equal(s->packets, 2);
    assert_int_equal(s->bytes, 1560);
    rg_stats_layer_packet(&s->layer[1], 1486);
    rg_stats_error(&s->layer[2], RG_REASON_TRUNCATED);
    rg_stats_error(&s->layer[2], RG_REASON_TRUNCATED);
    rg_stats_error(&s->layer[2], 999); /* out of range: counted as other */
    assert_int_equal(s->layer[2].error[RG_REASON_TRUNCATED], 2);
    assert_int_equal(s->layer[2].error[RG_REASON_OTHER], 1);
    assert_int_equal(s->layer[2].errors, 3);
    assert_int_equal(rg_stats_total_errors(s), 3);
    rg_stats_set_reason_name(s, RG_REASON_USER, "bad_option");
    rg_stats_error(&s->layer[1], RG_REASON_USER);
    assert_string_equal(rg_stats_reason_name(s, RG_REASON_USER), "bad_option");
    assert_string_equal(rg_stats_reason_name(s, RG_REASON_USER + 1), "user");
    assert_string_equal(rg_stats_reason_name(s, RG_REASON_MAX), "invalid");
    assert_string_equal(rg_stats_reason_name(s, RG_REASON_CHECKSUM), "checksum");
    rg_stats_reset(s);
    assert_int_equal(s->packets, 0);
    assert_int_equal(rg_stats_total_errors(s), 0);
    assert_string_equal(s->layer[2].name, "tcp");
    rg_stats_free(s);
    rg_stats_free(NULL);
}

/* The flow table updates a layer's instance counters; sequences add up. */
static void test_flow_and_seq_feed_stats(void **state)
{
    (void)state;
    rg_stats *s = rg_stats_new(2, NULL);
    rg_flow_cfg cfg = {.key_len = 4, .payload_size = 8, .cap = 2, .stats = &s->layer[1].inst};
    rg_flow *t = rg_flow_new(&cfg);
    uint32_t k1 = 1, k2 = 2, k3 = 3;
    void *a = rg_flow_create(t, &k1, NULL);
    rg_flow_create(t, &k2, NULL);
    rg_flow_create(t, &k3, NULL); /* evicts k1 */
    (void)a;
    rg_flow_set_time(t, 100);
    rg_flow_expire(t, 100, 50); /* both remaining were created at t=0 */
    rg_inst_stats tot;
    rg_stats_sum_inst(s, &tot);
    assert_int_equal(tot.created, 3);
    assert_int_equal(tot.destroyed, 3);
    assert_int_equal(tot.evicted, 1);
    assert_int_equal(tot.expired, 2);
    assert_int_equal(tot.live, 0);
    assert_int_equal(tot.peak_live, 2);
    rg_flow_free(t);

    rg_seq q;
    rg_seq_init(&q);
    rg_seq_cfg sc = {.buffer_data = 1, .zero_based = 1};
    uint8_t d[10] = {0};
    rg_seq_res r = {0};
    rg_seq_insert(&q, &sc, 5, d, 10, 10, NULL, 0, &r);
    rg_seq_insert(&q, &sc, 5, d, 10, 10, NULL, 0, &r);
    rg_seq_stats_add(&s->layer[1].seq, &r);
    memset(&r, 0, sizeof r);
    rg_seq_insert(&q, &sc, 0, d, 5, 5, NULL, 0, &r);
    (void)rg_seq_assemble(&q, &sc, &r);
    rg_seq_stats_add(&s->layer[1].seq, &r);
    rg_seq_free(&q);
    assert_int_equal(s->layer[1].seq.rexmit, 1);
    assert_int_equal(s->layer[1].seq.bytes_new, 15);
    assert_int_equal(s->layer[1].seq.bytes_dup, 10);
    assert_int_equal(s->layer[1].seq.bytes_delivered, 15);

    char *txt = capture(rg_stats_print, s);
    assert_non_null(strstr(txt, "layer1"));
    assert_non_null(strstr(txt, "inst.evicted"));
    free(txt);
    char *js = capture(rg_stats_json, s);
    assert_non_null(strstr(js, "\"evicted\":1"));
    assert_non_null(strstr(js, "\"layers\":["));
    int depth = 0;
    for (const char *p = js; *p; p++) {
        depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
        assert_true(depth >= 0);
    }
    assert_int_equal(depth, 0);
    free(js);
    rg_stats_free(s);
}

static void test_json_escaping(void **state)
{
    (void)state;
    const char *names[1] = {"we\"ird\\name\n"};
    rg_stats *s = rg_stats_new(1, names);
    char *js = capture(rg_stats_json, s);
    assert_non_null(strstr(js, "we\\\"ird\\\\name\\n")); /* rg_json_string */
    free(js);
    rg_stats_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_flow_and_seq_feed_stats),
        cmocka_unit_test(test_json_escaping),
    };
    return cmocka_run_group_tests_name("rg_stats", tests, NULL, NULL);
}
