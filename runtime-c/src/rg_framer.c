/* rg_framer.c - message framing over a byte stream (rg/rg_framer.h). */
#include "rg/rg_framer.h"

#include <stdlib.h>
#include <string.h>

enum { MODE_CUT = 0, MODE_DISCARD = 1, MODE_DEAD = 2 };

void rg_framer_free(rg_framer *f)
{
    free(f->buf);
    memset(f, 0, sizeof *f);
}

static void give_up(rg_framer *f, rg_framer_res *r, uint8_t err)
{
    free(f->buf);
    memset(f, 0, sizeof *f);
    f->mode = MODE_DEAD;
    r->error = err;
    r->dead = 1;
}

static uint32_t prefix_len(const rg_framer_cfg *c)
{
    return c->kind == RG_FRAME_LENGTH ? (uint32_t)c->len_off + c->len_bytes : 0u;
}

/* The most the buffer ever holds: a unit, or a delimited unit and a delimiter's start. */
static uint32_t bound(const rg_framer_cfg *c)
{
    uint32_t pre = prefix_len(c);
    return (c->max > pre ? c->max : pre) + c->delim_len;
}

/* Room for want bytes in the buffer (want never exceeds bound(c): the callers check). */
static int grow(rg_framer *f, const rg_framer_cfg *c, uint32_t want)
{
    if (want <= f->cap) return 0;
    uint32_t cap = f->cap ? f->cap : 256u;
    while (cap < want)
        cap = cap > UINT32_MAX / 2 ? want : cap * 2u;
    if (cap > bound(c)) cap = bound(c) > want ? bound(c) : want; /* doubling stops at the bound */
    uint8_t *p = realloc(f->buf, cap);
    if (p == NULL) return -1;
    f->buf = p;
    f->cap = cap;
    return 0;
}

static int append(rg_framer *f, const rg_framer_cfg *c, const uint8_t *p, uint32_t n)
{
    if (n == 0) return 0;
    if (grow(f, c, f->have + n)) return -1;
    memcpy(f->buf + f->have, p, n);
    f->have += n;
    return 0;
}

/* ---- length prefix, fixed size ------------------------------------------------------------ */

/* The unit length the prefix at p gives (p holds prefix_len bytes), or 0 with *err set. */
static uint32_t unit_len(const rg_framer_cfg *c, const uint8_t *p, uint8_t *err)
{
    if (c->kind == RG_FRAME_FIXED) return c->size;
    uint64_t v = 0;
    for (unsigned i = 0; i < c->len_bytes; i++) {
        unsigned b = c->len_le ? (unsigned)(c->len_bytes - 1u - i) : i;
        v = v << 8 | p[c->len_off + b];
    }
    uint64_t n = (uint64_t)c->add + (uint64_t)c->mul * v;
    if (n < prefix_len(c) || n == 0) {
        *err = RG_FRAME_MALFORMED;
        return 0;
    }
    if (n > c->max) {
        *err = RG_FRAME_TOO_BIG;
        return 0;
    }
    return (uint32_t)n;
}

static rg_bytes step_len(rg_framer *f, const rg_framer_cfg *c, rg_bytes in, rg_framer_res *r)
{
    const uint32_t pre = prefix_len(c);
    const uint32_t len = in.len > UINT32_MAX ? UINT32_MAX : (uint32_t)in.len;
    uint8_t err = 0;
    if (f->have == 0) { /* at a unit's start: cut it from the input when it is all there */
        if (len >= pre && len > 0) {
            uint32_t n = unit_len(c, in.ptr, &err);
            if (n == 0) {
                give_up(f, r, err);
                r->used = len;
                return rg_bytes_empty();
            }
            if (len >= n) {
                r->used = n;
                r->unit = 1;
                return rg_bytes_make(in.ptr, n);
            }
            f->need = n;
        }
    }
    /* the unit straddles deliveries: collect its bytes */
    uint32_t off = 0;
    if (f->need == 0) {
        uint32_t take = pre - f->have < len ? pre - f->have : len;
        if (pre == 0) take = 0;
        if (append(f, c, in.ptr, take)) {
            give_up(f, r, RG_FRAME_NOMEM);
            r->used = len;
            return rg_bytes_empty();
        }
        off = take;
        if (f->have < pre) {
            r->used = len;
            return rg_bytes_empty();
        }
        f->need = unit_len(c, f->buf, &err);
        if (f->need == 0) {
            give_up(f, r, err);
            r->used = len;
            return rg_bytes_empty();
        }
    }
    uint32_t rest = len - off;
    uint32_t take = f->need - f->have < rest ? f->need - f->have : rest;
    if (append(f, c, in.ptr + off, take)) {
        give_up(f, r, RG_FRAME_NOMEM);
        r->used = len;
        return rg_bytes_empty();
    }
    r->used = off + take;
    if (f->have < f->need) return rg_bytes_empty();
    r->unit = 1;
    r->copied = 1;
    rg_bytes u = rg_bytes_make(f->buf, f->have);
    f->have = 0;
    f->need = 0;
    return u;
}

/* ---- delimiter ------------------------------------------------------------------------------ */

/* First offset in [p, p+n) where the delimiter starts wholly inside, or n. */
static uint32_t find_delim(const rg_framer_cfg *c, const uint8_t *p, uint32_t n)
{
    const uint32_t d = c->delim_len;
    if (n < d) return n;
    const uint8_t first = c->delim[0];
    for (uint32_t i = 0; i + d <= n;) {
        const uint8_t *q = memchr(p + i, first, n - d + 1 - i);
        if (q == NULL) return n;
        i = (uint32_t)(q - p);
        if (memcmp(q, c->delim, d) == 0) return i;
        i++;
    }
    return n;
}

/* A delimiter that starts in the last bytes held (f->buf's tail) and ends in `in`: how many of its
 * bytes are held (1..d-1), or 0.  The earliest such start wins. */
static uint32_t cross_delim(const rg_framer *f, const rg_framer_cfg *c, rg_bytes in)
{
    const uint32_t d = c->delim_len;
    for (uint32_t k = d - 1; k >= 1; k--) { /* k held bytes: the longest tail starts earliest */
        if (k > f->have || d - k > in.len) continue;
        if (memcmp(f->buf + f->have - k, c->delim, k) == 0 &&
            memcmp(in.ptr, c->delim + k, d - k) == 0)
            return k;
    }
    return 0;
}

/* Keep only the last d-1 bytes of buf + in (a delimiter may start there): discarding. */
static int keep_tail(rg_framer *f, const rg_framer_cfg *c, rg_bytes in)
{
    const uint32_t keep = c->delim_len - 1u;
    uint8_t tmp[2 * RG_FRAME_DELIM_MAX];
    uint32_t n = 0;
    uint32_t from_buf = f->have < keep ? f->have : keep;
    if (from_buf) memcpy(tmp, f->buf + f->have - from_buf, from_buf);
    n = from_buf;
    uint32_t from_in = in.len < keep ? (uint32_t)in.len : keep;
    if (from_in) memcpy(tmp + n, in.ptr + in.len - from_in, from_in);
    n += from_in;
    uint32_t t = n < keep ? n : keep;
    f->have = 0;
    return append(f, c, tmp + n - t, t);
}

static rg_bytes step_delim(rg_framer *f, const rg_framer_cfg *c, rg_bytes in, rg_framer_res *r)
{
    const uint32_t d = c->delim_len;
    const uint32_t len = in.len > UINT32_MAX ? UINT32_MAX : (uint32_t)in.len;
    in.len = len;
    uint32_t k = f->have ? cross_delim(f, c, in) : 0;
    uint32_t at = len, end = len; /* the delimiter's start and end in `in` */
    if (k) {
        end = d - k;
    } else {
        at = find_delim(c, in.ptr, len);
        if (at < len) end = at + d;
    }
    if (f->mode == MODE_DISCARD) {
        if (k == 0 && at == len) {
            if (keep_tail(f, c, in)) give_up(f, r, RG_FRAME_NOMEM);
            r->used = len;
            return rg_bytes_empty();
        }
        f->have = 0;
        f->mode = MODE_CUT;
        r->used = end;
        return rg_bytes_empty();
    }
    if (k == 0 && at == len) { /* no delimiter yet: hold the bytes, up to the bound */
        if ((uint64_t)f->have + len > (uint64_t)c->max + d - 1u) {
            r->error = RG_FRAME_TOO_BIG;
            f->mode = MODE_DISCARD;
            if (keep_tail(f, c, in)) give_up(f, r, RG_FRAME_NOMEM);
            r->used = len;
            return rg_bytes_empty();
        }
        if (append(f, c, in.ptr, len)) give_up(f, r, RG_FRAME_NOMEM);
        r->used = len;
        return rg_bytes_empty();
    }
    r->used = end;
    uint64_t ulen = k ? (uint64_t)f->have - k : (uint64_t)f->have + at;
    if (ulen > c->max) { /* too long: dropped, the next unit starts after its delimiter */
        r->error = RG_FRAME_TOO_BIG;
        f->have = 0;
        return rg_bytes_empty();
    }
    r->unit = 1;
    if (f->have == 0) return rg_bytes_make(in.ptr, at); /* wholly in this delivery: a view */
    if (!k && append(f, c, in.ptr, at)) {
        give_up(f, r, RG_FRAME_NOMEM);
        r->unit = 0;
        return rg_bytes_empty();
    }
    r->copied = 1;
    rg_bytes u = rg_bytes_make(f->buf, (size_t)ulen);
    f->have = 0;
    return u;
}

/* After a hole: what was held is garbage, and so is what follows the hole up to a delimiter.
 * Where the hole lies in the delivery is not known, so resume after its last delimiter. */
static void resync_delim(rg_framer *f, const rg_framer_cfg *c, rg_bytes in, rg_framer_res *r)
{
    const uint32_t d = c->delim_len;
    const uint32_t len = in.len > UINT32_MAX ? UINT32_MAX : (uint32_t)in.len;
    uint32_t last = len;
    for (uint32_t i = 0, at; i < len; i = at + d) {
        at = i + find_delim(c, in.ptr + i, len - i);
        if (at >= len) break;
        last = at;
    }
    r->error = RG_FRAME_LOST;
    f->have = 0;
    if (last < len) {
        f->mode = MODE_CUT;
        r->used = last + d;
        return;
    }
    f->mode = MODE_DISCARD;
    in.len = len;
    if (keep_tail(f, c, in)) give_up(f, r, RG_FRAME_NOMEM);
    r->used = len;
}

rg_bytes rg_framer_step(rg_framer *f, const rg_framer_cfg *c, rg_bytes in, int gap,
                        rg_framer_res *r)
{
    memset(r, 0, sizeof *r);
    if (f->mode == MODE_DEAD) {
        r->used = in.len > UINT32_MAX ? UINT32_MAX : (uint32_t)in.len;
        r->dead = 1;
        return rg_bytes_empty();
    }
    if (c->kind == RG_FRAME_DELIM) {
        if (gap) {
            resync_delim(f, c, in, r);
            return rg_bytes_empty();
        }
        return step_delim(f, c, in, r);
    }
    if (gap) { /* a length prefix after a hole cannot be found again */
        give_up(f, r, RG_FRAME_LOST);
        r->used = in.len > UINT32_MAX ? UINT32_MAX : (uint32_t)in.len;
        return rg_bytes_empty();
    }
    return step_len(f, c, in, r);
}
