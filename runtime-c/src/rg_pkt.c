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

/* Follows the labels and pointers of the name at off; see rg_pkt.h. */
size_t rg_name_read(const uint8_t *msg, size_t len, size_t off, char *text, size_t cap,
                    size_t *text_len)
{
    size_t wire = 0;  /* bytes the name occupies at off: set at its first pointer or end */
    size_t total = 0; /* decompressed length so far (length bytes and labels) */
    size_t out = 0;   /* text bytes written (without the NUL) */
    unsigned jumps = 0;
    size_t at = off;
    if (text_len) *text_len = 0;
    if (text && cap) text[0] = 0;
    if (!msg) return 0;
    for (;;) {
        if (at >= len) return 0;
        uint8_t b = msg[at];
        if (b == 0) {
            if (!wire) wire = at + 1 - off;
            if (total + 1 > RG_NAME_MAX) return 0;
            break;
        }
        if ((b & 0xc0) == 0xc0) {
            if (at + 1 >= len || ++jumps > RG_NAME_JUMPS) return 0;
            if (!wire) wire = at + 2 - off;
            at = (size_t)(b & 0x3f) << 8 | msg[at + 1];
            continue;
        }
        if (b & 0xc0) return 0; /* 01 (extended label types) and 10: reserved */
        if (at + 1 + b > len) return 0;
        total += 1u + b;
        if (total + 1 > RG_NAME_MAX) return 0;
        for (size_t i = 0; text && i <= b; i++) {
            char esc[5];
            int n;
            uint8_t c = i ? msg[at + i] : '.';
            if (!i) {
                if (!out) continue; /* no dot before the first label */
                esc[0] = '.', n = 1;
            } else if (c == '.' || c == '\\') {
                esc[0] = '\\', esc[1] = (char)c, n = 2;
            } else if (c < 0x21 || c > 0x7e) {
                esc[0] = '\\', esc[1] = (char)('0' + c / 100), esc[2] = (char)('0' + c / 10 % 10);
                esc[3] = (char)('0' + c % 10), n = 4;
            } else {
                esc[0] = (char)c, n = 1;
            }
            if (out + (size_t)n + 1 > cap) return 0;
            for (int k = 0; k < n; k++)
                text[out++] = esc[k];
        }
        at += 1u + b;
    }
    if (text && cap) text[out] = 0;
    if (text_len) *text_len = out;
    return wire;
}
