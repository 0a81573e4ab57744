/* rg_common.c - shared runtime definitions. */
#include "rg/rg_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int rg_mkdirs(const char *dir, char *err, size_t errlen)
{
    if (!dir || !*dir) {
        snprintf(err, errlen, "no output directory given");
        return RG_EINVAL;
    }
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return RG_ENOMEM;
    }
    memcpy(p, dir, n + 1);
    /* create each prefix ending before a '/', then the whole path */
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        struct stat st;
        if (mkdir(p, 0777) && (errno != EEXIST || stat(p, &st) || !S_ISDIR(st.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            snprintf(err, errlen, "cannot create directory %s: %s", p, strerror(errno));
            free(p);
            return RG_EIO;
        }
        p[i] = c;
    }
    free(p);
    return RG_OK;
}
