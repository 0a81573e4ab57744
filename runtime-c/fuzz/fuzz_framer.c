/* fuzz_framer.c - libFuzzer harness for the framer (src/rg_framer.c): the first bytes choose a
 * framing (length prefix of 1..4 bytes at an offset, either byte order; a delimiter of 1..4
 * bytes; a fixed size) and its unit bound, the next ones where the stream is cut into
 * deliveries; the rest is the stream.  The units cut from the deliveries, one rg_framer_step()
 * per unit as the stack's self-loop calls it, must equal those a plain reference cuts from the
 * whole stream at once (segmentation never changes the output), every view must lie inside the
 * delivery or the framer's buffer, and the buffer never exceeds the bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "rg/rg_framer.h"

#define FAIL() (fprintf(stderr, "fuzz_framer: check at line %d failed\n", __LINE__), abort())

#define MAXU 4096

typedef struct {
    uint32_t off, len;
} unit;

/* The reference: the whole stream in one piece.  Units go to out (offsets in s); returns the
 * count, and *dead whether the framing gave up. */
static size_t reference(const rg_framer_cfg *c, const uint8_t *s, size_t n, unit *out, int *dead)
{
    size_t k = 0, i = 0;
    *dead = 0;
    if (c->kind == RG_FRAME_DELIM) {
        while (i < n) {
            size_t j = i;
            while (j + c->delim_len <= n && memcmp(s + j, c->delim, c->delim_len) != 0)
                j++;
            if (j + c->delim_len > n) break; /* no delimiter: the rest stays held */
            if (j - i <= c->max) out[k++] = (unit){(uint32_t)i, (uint32_t)(j - i)};
            i = j + c->delim_len;
        }
        return k;
    }
    uint32_t pre = c->kind == RG_FRAME_LENGTH ? (uint32_t)c->len_off + c->len_bytes : 0;
    while (i < n) {
        uint64_t len = c->size;
        if (c->kind == RG_FRAME_LENGTH) {
            if (n - i < pre) break;
            uint64_t v = 0;
            for (unsigned b = 0; b < c->len_bytes; b++)
                v = v << 8 | s[i + c->len_off + (c->len_le ? c->len_bytes - 1u - b : b)];
            len = c->add + (uint64_t)c->mul * v;
            if (len < pre || len == 0 || len > c->max) {
                *dead = 1;
                break;
            }
        }
        if (n - i < len) break;
        out[k++] = (unit){(uint32_t)i, (uint32_t)len};
        i += len;
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8) return 0;
    rg_framer_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = (uint8_t)(1 + data[0] % 3);
    c.max = 1u + (uint32_t)(data[1] | data[2] << 8) % 600u;
    if (c.kind == RG_FRAME_LENGTH) {
        c.len_bytes = (uint8_t)(1 + data[3] % 4);
        c.len_off = (uint8_t)(data[3] >> 2 & 3);
        c.len_le = (uint8_t)(data[3] >> 4 & 1);
        c.add = (uint32_t)(data[4] % 8);
        c.mul = 1u + (data[3] >> 5 & 1);
    } else if (c.kind == RG_FRAME_DELIM) {
        c.delim_len = (uint8_t)(1 + data[3] % 4);
        for (unsigned i = 0; i < c.delim_len; i++)
            c.delim[i] = (uint8_t)(data[4] >> (2 * i) & 3 ? 'a' : 'b');
    } else {
        c.size = 1u + data[4] % 64u;
        if (c.size > c.max) c.max = c.size + data[3] % 4u; /* TOO_BIG: from sema, never a size */
    }
    uint8_t cuts = data[5], seed = data[6];
    const uint8_t *s = data + 8;
    size_t n = size - 8;
    if (n > 8192) n = 8192;

    static unit want[MAXU];
    int dead = 0;
    size_t nw = reference(&c, s, n, want, &dead);

    /* the deliveries: cut points from a small LCG seeded by the input */
    rg_framer f;
    memset(&f, 0, sizeof f);
    size_t got = 0, pos = 0;
    uint32_t x = seed * 2654435761u + cuts;
    while (pos < n) {
        x = x * 1103515245u + 12345u;
        size_t seg = 1 + (x >> 8) % (cuts ? cuts : 1);
        if (seg > n - pos) seg = n - pos;
        rg_bytes in = rg_bytes_make(s + pos, seg);
        for (unsigned pass = 0; in.len > 0; pass++) {
            rg_framer_res r;
            rg_bytes u = rg_framer_step(&f, &c, in, 0, &r);
            if (r.used > in.len) FAIL();
            if (r.unit) {
                int in_view = u.ptr >= in.ptr && u.ptr + u.len <= in.ptr + in.len;
                int in_buf = f.buf != NULL && u.ptr >= f.buf && u.ptr + u.len <= f.buf + f.cap;
                if (!(in_view || in_buf || u.len == 0)) FAIL();
                if (got >= nw || u.len != want[got].len || memcmp(u.ptr, s + want[got].off, u.len))
                    FAIL();
                got++;
            } else if (r.used == 0) {
                FAIL(); /* no progress without a unit */
            }
            if (f.cap > 256u && f.cap > c.max + 4u + RG_FRAME_DELIM_MAX) FAIL(); /* the bound */
            in.ptr += r.used;
            in.len -= r.used;
        }
        pos += seg;
    }
    if (got != nw) FAIL();
    if (dead != (f.mode == 2)) FAIL();
    /* a gap: length framing gives up, delimiter framing resumes after the last delimiter */
    rg_framer_res r;
    rg_framer_step(&f, &c, rg_bytes_make(s, n), 1, &r);
    if (c.kind != RG_FRAME_DELIM && !r.dead) FAIL();
    rg_framer_free(&f);
    return 0;
}
