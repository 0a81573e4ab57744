/* test_ring.c - the SPSC frame ring: every frame of a real capture through a
 * small ring (wrapping and full many times) from a producer thread to a
 * consumer thread, in order and byte for byte; edge cases single-threaded. */
#include "rg_test.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>

#include "rg/rg_ring.h"

static const char *traces_dir(void)
{
    const char *d = getenv("RG_TRACES");
    if (!d || !*d) d = "../../shared/traces";
    DIR *x = opendir(d);
    if (!x) return NULL;
    closedir(x);
    return d;
}

typedef struct {
    rg_ring *ring;
    const rg_capture *cap;
    unsigned rounds;
    uint64_t full; /* pushes refused: the ring was full */
} producer_arg;

static void *producer(void *p)
{
    producer_arg *a = p;
    for (unsigned k = 0; k < a->rounds; k++)
        for (size_t i = 0; i < a->cap->count; i++) {
            int rc;
            while ((rc = rg_ring_push(a->ring, &a->cap->frames[i])) == 0) {
                a->full++;
                sched_yield();
            }
            if (rc != 1) abort();
        }
    return NULL;
}

static void test_real_capture_through_threads(void **state)
{
    (void)state;
    const char *d = traces_dir();
    if (!d) {
        print_message("  RG_TRACES not found: skipping real captures\n");
        skip();
        return;
    }
    const char *names[] = {"mixed-android-mobile.pcap", "ipv6-http-gquic.pcap", "vxlan-http.pcap"};
    for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/%s", d, names[c]);
        rg_capture cap;
        if (rg_capture_load(path, &cap, err, sizeof err) != RG_OK) fail_msg("%s: %s", path, err);
        rg_ring ring;
        assert_int_equal(rg_ring_init(&ring, 1), RG_OK); /* the smallest: 64 KiB */
        /* enough rounds to wrap the ring at least five times */
        unsigned rounds = (unsigned)(5 * ring.size / (cap.bytes + 1)) + 20;
        producer_arg a = {&ring, &cap, rounds, 0};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, producer, &a), 0);
        uint64_t got = 0, want = (uint64_t)cap.count * a.rounds, bytes = 0;
        unsigned batch = 0;
        while (got < want) {
            rg_frame f;
            if (!rg_ring_peek(&ring, &f)) {
                rg_ring_release(&ring);
                batch = 0;
                sched_yield();
                continue;
            }
            const rg_frame *e = &cap.frames[got % cap.count];
            assert_int_equal(f.caplen, e->caplen);
            assert_int_equal(f.len, e->len);
            assert_true(f.ts_ns == e->ts_ns);
            assert_int_equal(f.dlt, e->dlt);
            assert_memory_equal(f.data, e->data, f.caplen);
            assert_true(((uintptr_t)f.data & 7) == 0);
            bytes += f.caplen;
            got++;
            if (++batch == 7) { /* release in batches, as a worker does per burst */
                rg_ring_release(&ring);
                batch = 0;
            }
        }
        rg_ring_release(&ring);
        rg_frame f;
        assert_int_equal(rg_ring_peek(&ring, &f), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        print_message("  %s: %llu frames, %llu bytes through a %llu-byte ring (%llu waits)\n",
                      names[c], (unsigned long long)got, (unsigned long long)bytes,
                      (unsigned long long)ring.size, (unsigned long long)a.full);
        assert_true(bytes > 4 * ring.size); /* it wrapped */
        rg_ring_free(&ring);
        rg_capture_free(&cap);
    }
}

static void test_edges(void **state)
{
    (void)state;
    rg_ring ring;
    assert_int_equal(rg_ring_init(&ring, 1), RG_OK);
    static uint8_t big[40000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7);
    rg_frame f = {.data = big, .caplen = 40000, .len = 40000, .ts_ns = 1, .dlt = 1};
    assert_int_equal(rg_ring_push(&ring, &f), RG_EINVAL); /* more than half the ring */
    f.caplen = 30000;
    assert_int_equal(rg_ring_push(&ring, &f), 1);
    assert_int_equal(rg_ring_push(&ring, &f), 1);
    assert_int_equal(rg_ring_push(&ring, &f), 0); /* full until the consumer releases */
    rg_frame g;
    assert_int_equal(rg_ring_peek(&ring, &g), 1);
    assert_int_equal(rg_ring_push(&ring, &f), 0); /* peeked is not released */
    rg_ring_release(&ring);
    assert_int_equal(rg_ring_push(&ring, &f), 1); /* wraps: ends at the buffer's end */
    assert_int_equal(rg_ring_peek(&ring, &g), 1);
    assert_memory_equal(g.data, big, 30000);
    assert_int_equal(rg_ring_peek(&ring, &g), 1);
    assert_memory_equal(g.data, big, 30000);
    assert_int_equal(rg_ring_peek(&ring, &g), 0);
    rg_ring_release(&ring);
    f.caplen = 0; /* empty frames are frames */
    assert_int_equal(rg_ring_push(&ring, &f), 1);
    assert_int_equal(rg_ring_peek(&ring, &g), 1);
    assert_int_equal(g.caplen, 0);
    rg_ring_free(&ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_capture_through_threads),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
