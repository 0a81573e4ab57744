/* fuzz_reject.c - libFuzzer harness for the replies of a reject (rg_reject.c).  The input:
 * a link type (u16, little endian), a flags byte (RG_REJECT_F_*), then the frame.  Every
 * reply must be whole: its length within RG_REJECT_FRAME_MAX, its bytes readable; and the
 * frame is never read past its end (ASan: the frame is copied into a buffer of its size). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_reject.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    int dlt = data[0] | data[1] << 8;
    unsigned flags = data[2] & 3u;
    size_t n = size - 3;
    uint8_t *f = malloc(n ? n : 1);
    if (!f) abort();
    memcpy(f, data + 3, n);
    static rg_reject_out o;
    unsigned got = rg_reject_build(dlt, f, (uint32_t)n, flags, &o);
    if (got > 2 || got != o.n) abort();
    for (unsigned i = 0; i < got; i++) {
        if (o.len[i] > RG_REJECT_FRAME_MAX || o.len[i] < 20) abort();
        for (uint32_t k = 0; k < o.len[i]; k++)
            sink += o.frame[i][k];
    }
    free(f);
    return 0;
}
