/* rg_common.c - shared runtime definitions. */
#include "rg/rg_common.h"

#include <stdio.h>
#include <time.h>

const uint8_t rg_empty_byte[1] = {0};

const char *rg_strerror(int err)
{
    switch (err) {
    case RG_OK:
        return "ok";
    case RG_ETRUNC:
        return "truncated";
    case RG_EINVAL:
        return "invalid argument";
    case RG_ENOMEM:
        return "out of memory";
    case RG_EUNSUPPORTED:
        return "unsupported";
    case RG_EIO:
        return "i/o error";
    default:
        return "unknown error";
    }
}

uint64_t rg_random_seed(void)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1) v = 0;
        fclose(f);
    }
    if (!v) { /* no random source: mix the clock and an address */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&v;
        v ^= v >> 31;
        v *= UINT64_C(0x9E3779B97F4A7C15);
    }
    return v;
}
