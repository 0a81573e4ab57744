/* rg_pkt.c - out-of-line parts of the header access helpers. */
#include "rg/rg_pkt.h"

uint32_t rg_csum_add(uint32_t sum, const uint8_t *p, size_t len)
{
    uint64_t acc = sum;
    if (!p) return sum;
    while (len >= 8) {
        acc += rg_load_be32(p);
        acc += rg_load_be32(p + 4);
        p += 8;
        len -= 8;
    }
    while (len >= 2) {
        acc += rg_load_be16(p);
        p += 2;
        len -= 2;
    }
    if (len) acc += (uint32_t)p[0] << 8;
    while (acc >> 32)
        acc = (acc & 0xffffffffu) + (acc >> 32);
    /* fold to at most 17 bits so the caller may keep adding */
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    return (uint32_t)acc;
}
