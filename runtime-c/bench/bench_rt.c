/* bench_rt.c - micro-benchmarks of the runtime's per-packet operations.
 *
 * Not part of the test suite: `make -C runtime-c bench`.  Prints ns per
 * operation (thread CPU time, best of 5 runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rg/rg_flow.h"
#include "rg/rg_pkt.h"
#include "rg/rg_seq.h"
#include "rg/rg_timer.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile uint64_t sink;

typedef struct {
    uint8_t b[12];
} key12;

static key12 mkkey(uint32_t i, int rev)
{
    key12 k;
    uint32_t a = 0x0a000000u + i, b = 0xc0a80001u;
    uint16_t pa = (uint16_t)(1024 + i % 50000), pb = 80;
    if (rev) {
        memcpy(k.b, &b, 4);
        memcpy(k.b + 4, &a, 4);
        memcpy(k.b + 8, &pb, 2);
        memcpy(k.b + 10, &pa, 2);
    } else {
        memcpy(k.b, &a, 4);
        memcpy(k.b + 4, &b, 4);
        memcpy(k.b + 8, &pa, 2);
        memcpy(k.b + 10, &pb, 2);
    }
    return k;
}

#define BEST(label, ops, ...)                                                                      \
    do {                                                                                           \
        double best = 1e30;                                                                        \
        for (int run_ = 0; run_ < 5; run_++) {                                                     \
            double t0_ = now_ns();                                                                 \
            __VA_ARGS__;                                                                           \
            double dt_ = (now_ns() - t0_) / (double)(ops);                                         \
            if (dt_ < best) best = dt_;                                                            \
        }                                                                                          \
        printf("  %-52s %8.2f ns/op\n", label, best);                                              \
    } while (0)

static void bench_flow(uint32_t nflows)
{
    rg_flow_cfg cfg = {.key_len = 12, .payload_size = 192, .cap = nflows, .bidir = 1, .seed = 7};
    rg_flow *t = rg_flow_new(&cfg);
    key12 *keys = malloc(sizeof(key12) * nflows * 2);
    for (uint32_t i = 0; i < nflows; i++) {
        keys[2 * i] = mkkey(i, 0);
        keys[2 * i + 1] = mkkey(i, 1);
        rg_flow_create(t, keys[2 * i].b, keys[2 * i + 1].b);
    }
    const uint32_t N = 4000000;
    uint32_t *order = malloc(sizeof(uint32_t) * N);
    uint64_t x = 88172645463325252ull;
    for (uint32_t i = 0; i < N; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order[i] = (uint32_t)(x % (2ull * nflows));
    }
    char label[96];
    snprintf(label, sizeof label, "flow lookup hit, %u flows, random dir (inline n=12)", nflows);
    BEST(label, N, {
        uint64_t acc = 0;
        for (uint32_t i = 0; i < N; i++) {
            int dir = 0;
            const key12 *k = &keys[order[i]];
            void *p = rg_flow_lookup_hn(t, k->b, 12, rg_hash_bytes(k->b, 12, 7), &dir);
            acc += (uintptr_t)p + (unsigned)dir;
        }
        sink = acc;
    });
    snprintf(label, sizeof label, "flow find hit (no LRU touch), %u flows", nflows);
    BEST(label, N, {
        uint64_t acc = 0;
        for (uint32_t i = 0; i < N; i++) {
            int dir = 0;
            const key12 *k = &keys[order[i]];
            void *p = rg_flow_find_hn(t, k->b, 12, rg_hash_bytes(k->b, 12, 7), &dir);
            acc += (uintptr_t)p + (unsigned)dir;
        }
        sink = acc;
    });
    snprintf(label, sizeof label, "flow lookup miss, %u flows", nflows);
    BEST(label, N, {
        uint64_t acc = 0;
        for (uint32_t i = 0; i < N; i++) {
            key12 k = keys[order[i]];
            k.b[11] ^= 0x5a;
            k.b[3] ^= 0xa5;
            acc += (uintptr_t)rg_flow_find_hn(t, k.b, 12, rg_hash_bytes(k.b, 12, 7), NULL);
        }
        sink = acc;
    });
    snprintf(label, sizeof label, "flow delete + create, %u flows", nflows);
    BEST(label, N / 4, {
        for (uint32_t i = 0; i < N / 4; i++) {
            uint32_t f = order[i] >> 1;
            void *p = rg_flow_find(t, keys[2 * f].b, NULL);
            rg_flow_delete(t, p);
            rg_flow_create(t, keys[2 * f].b, keys[2 * f + 1].b);
        }
    });
    rg_flow_free(t);
    free(keys);
    free(order);
}

static void bench_seq(void)
{
    const uint32_t SEG = 1448, NSEG = 4096;
    uint8_t *data = malloc((size_t)SEG * NSEG);
    for (size_t i = 0; i < (size_t)SEG * NSEG; i++)
        data[i] = (uint8_t)i;
    rg_seq_cfg cfg = {.buffer_data = 1};
    rg_seq s;
    BEST("seq fast path (empty, aligned, 1448 B)", NSEG, {
        rg_seq_init(&s);
        uint64_t acc = 0;
        for (uint32_t i = 0; i < NSEG; i++) {
            rg_bytes out;
            out.len = 0;
            acc += (uint64_t)rg_seq_fast(&s, &cfg, 1000 + i * SEG, data + (size_t)i * SEG, SEG, SEG,
                                         NULL, &out, NULL);
            acc += out.len;
        }
        sink = acc;
        rg_seq_free(&s);
    });
    BEST("seq insert(BORROW) + assemble, in order", NSEG, {
        rg_seq_init(&s);
        uint64_t acc = 0;
        for (uint32_t i = 0; i < NSEG; i++) {
            rg_seq_insert(&s, &cfg, 1000 + i * SEG, data + (size_t)i * SEG, SEG, SEG, NULL,
                          RG_SEQ_BORROW, NULL);
            acc += rg_seq_assemble(&s, &cfg, NULL).len;
        }
        sink = acc;
        rg_seq_free(&s);
    });
    BEST("seq insert (copy) + assemble, in order", NSEG, {
        rg_seq_init(&s);
        uint64_t acc = 0;
        for (uint32_t i = 0; i < NSEG; i++) {
            rg_seq_insert(&s, &cfg, 1000 + i * SEG, data + (size_t)i * SEG, SEG, SEG, NULL, 0,
                          NULL);
            acc += rg_seq_assemble(&s, &cfg, NULL).len;
        }
        sink = acc;
        rg_seq_free(&s);
    });
    BEST("seq pairs swapped (OOO insert, fill, assemble), per seg", NSEG, {
        rg_seq_init(&s);
        uint64_t acc = 0;
        for (uint32_t i = 0; i + 1 < NSEG; i += 2) {
            rg_seq_insert(&s, &cfg, 1000 + (i + 1) * SEG, data + (size_t)(i + 1) * SEG, SEG, SEG,
                          NULL, 0, NULL);
            rg_seq_insert(&s, &cfg, 1000 + i * SEG, data + (size_t)i * SEG, SEG, SEG, NULL,
                          RG_SEQ_BORROW, NULL);
            acc += rg_seq_assemble(&s, &cfg, NULL).len;
        }
        sink = acc;
        rg_seq_free(&s);
    });
    free(data);
}

static void bench_timer(void)
{
    enum { N = 1024, OPS = 4000000 };
    rg_timer tm;
    uint64_t to[2] = {30000000000ull, 1000000000ull};
    rg_timer_init(&tm, to, 2);
    rg_tnode *nodes = calloc(N, sizeof *nodes);
    uint64_t x = 1;
    BEST("timer touch (1024 nodes, random) + due check", OPS, {
        for (uint32_t i = 0; i < OPS; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            rg_timer_set_time(&tm, i);
            rg_timer_touch(&tm, &nodes[x % N], 0);
            if (rg_timer_due(&tm, i)) rg_timer_expire(&tm, i, NULL, NULL, 0);
        }
    });
    free(nodes);
}

static void bench_pkt(void)
{
    uint8_t pkt[64] = {0x45, 0, 0, 60, 0x12, 0x34, 0x40, 0, 64, 6};
    enum { OPS = 20000000 };
    BEST("parse IPv4 fixed header (checked cursor)", OPS, {
        uint64_t acc = 0;
        for (uint32_t i = 0; i < OPS; i++) {
            pkt[3] = (uint8_t)i;
            rg_cursor c = rg_cur_make(pkt, 60);
            if (rg_cur_need(&c, 20)) continue;
            const uint8_t *h = rg_cur_pos(&c);
            acc += rg_bits_u(h, 0, 4) + rg_bits_u(h, 4, 4) + rg_load_be16(h + 2) +
                   rg_bits_u(h, 51, 13) + rg_load_be32(h + 12);
        }
        sink = acc;
    });
}

int main(void)
{
    printf("rubikgen runtime micro-benchmarks (thread CPU time, best of 5)\n");
    bench_flow(200);
    bench_flow(1000000);
    bench_seq();
    bench_timer();
    bench_pkt();
    return 0;
}
