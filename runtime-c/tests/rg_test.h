/* rg_test.h - shared helpers for the runtime's cmocka suites. */
#ifndef RG_TEST_H
#define RG_TEST_H

/* cmocka needs these before its header */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deterministic PRNG (splitmix64) so every run exercises the same cases. */
typedef struct {
    uint64_t s;
} rg_rng;

static inline uint64_t rng_next(rg_rng *r)
{
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0). */
static inline uint32_t rng_below(rg_rng *r, uint32_t n)
{
    return (uint32_t)(rng_next(r) % n);
}

#endif
