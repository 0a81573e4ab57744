/* fuzz_name.c - libFuzzer harness for the domain name reader (rg_name_read, rg_pkt.c), which
 * the spec function name_len() and the apps NF's DNS lines use.  The input: the name's offset
 * (u16, little endian), then the message.  Checked against a second reader written here
 * from RFC 1035 4.1.4 another way (it decompresses into wire form first): both accept the same
 * names with the same length at the offset; the text fits RG_NAME_TEXT_MAX, has no NUL, and
 * has one label per dot that is not escaped; a smaller text buffer fails or gives the same
 * text; the message is never read past its end (ASan: it is copied into a buffer of its
 * size), and every input ends (the pointer bound). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_pkt.h"

/* The reference: (wire length at off, decompressed length) or 0 */
static size_t ref_read(const uint8_t *m, size_t len, size_t off, size_t *labels)
{
    uint8_t flat[RG_NAME_MAX + 64];
    size_t n = 0, wire = 0, at = off;
    unsigned jumps = 0;
    *labels = 0;
    while (at < len) {
        unsigned b = m[at];
        switch (b >> 6) {
        case 3:
            if (at + 2 > len || jumps++ == RG_NAME_JUMPS) return 0;
            if (!wire) wire = at + 2 - off;
            at = ((b & 0x3fu) << 8) | m[at + 1];
            continue;
        case 1:
        case 2:
            return 0;
        default:
            break;
        }
        if (at + 1 + b > len || n + 1 + b > RG_NAME_MAX - 1 + (b == 0)) return 0;
        memcpy(flat + n, m + at, 1 + b);
        n += 1 + b;
        if (b == 0) return wire ? wire : at + 1 - off;
        ++*labels;
        at += 1 + b;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t off = (size_t)(data[0] | data[1] << 8);
    size_t n = size - 2;
    uint8_t *m = malloc(n ? n : 1);
    if (!m) abort();
    memcpy(m, data + 2, n);
    char text[RG_NAME_TEXT_MAX];
    size_t tlen = 123, labels;
    size_t w = rg_name_read(m, n, off, text, sizeof text, &tlen);
    size_t r = ref_read(m, n, off, &labels);
    if (w != r) abort();
    if (rg_name_len((rg_bytes){m, n}, off) != w) abort();
    if (rg_name_read(m, n, off, NULL, 0, NULL) != w) abort();
    if (!w) {
        if (tlen != 0) abort();
    } else {
        if (w > n - off || tlen >= sizeof text || strlen(text) != tlen) abort();
        size_t dots = 0;
        for (size_t i = 0; i < tlen; i++) {
            if (text[i] == '\\')
                i++; /* an escaped byte: "\." or "\\" or the first of \DDD's digits */
            else if (text[i] == '.')
                dots++;
        }
        if (labels ? dots != labels - 1 : tlen != 0) abort();
        char small[16];
        size_t slen;
        size_t w2 = rg_name_read(m, n, off, small, sizeof small, &slen);
        if (w2 && (w2 != w || slen != tlen || memcmp(small, text, tlen + 1))) abort();
    }
    free(m);
    return 0;
}
