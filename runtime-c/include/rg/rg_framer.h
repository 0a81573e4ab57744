/* rg_framer.h - message framing over a byte stream (protocol `framing:`, docs/spec-language.md
 * 2.7a).
 *
 * A framer cuts one direction's in-order bytes (a reassembled TCP stream, one datagram) into
 * units: by a length prefix (the unit's length is add + mul * an unsigned field of 1..4 bytes at
 * a fixed offset in the unit), by a delimiter (1..8 bytes, not part of the unit), or by a fixed
 * size.  The caller feeds the bytes of one delivery; each rg_framer_step() call takes bytes from
 * the front of them until one unit is complete (or the bytes run out) and says how many it took,
 * so the caller calls it again on the rest (the stack's self-loop) and every unit of a delivery
 * is cut, one per call.  A unit that lies wholly inside the bytes is returned as a view into them
 * (no copy); only a unit that straddles two deliveries is copied, into a buffer of the framer that
 * grows up to the unit's size and never beyond cfg->max.  State is a few words per direction. */
#ifndef RG_FRAMER_H
#define RG_FRAMER_H

#include <stdint.h>

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RG_FRAME_LENGTH = 1, RG_FRAME_DELIM = 2, RG_FRAME_FIXED = 3 };

#define RG_FRAME_DELIM_MAX 8

/* Errors of a step (rg_framer_res.error, the spec's `frame_error`). */
enum {
    RG_FRAME_OK = 0,
    RG_FRAME_TOO_BIG = 1,   /* a unit is longer than max: length/fixed framing gives up on the
                             * direction; delimiter framing drops it and resumes after its
                             * delimiter */
    RG_FRAME_LOST = 2,      /* the bytes have a hole (a gap before this delivery): length/fixed
                             * framing gives up; delimiter framing drops what it held and
                             * resumes after the last delimiter of the delivery */
    RG_FRAME_MALFORMED = 3, /* a length prefix gives a unit shorter than the prefix: gives up */
    RG_FRAME_NOMEM = 4,     /* the buffer of a straddling unit could not grow: gives up */
};

typedef struct rg_framer_cfg {
    uint8_t kind;      /* RG_FRAME_LENGTH | RG_FRAME_DELIM | RG_FRAME_FIXED */
    uint8_t len_off;   /* LENGTH: offset of the length field in the unit */
    uint8_t len_bytes; /* LENGTH: its width in bytes, 1..4 */
    uint8_t len_le;    /* LENGTH: little-endian (else network order) */
    uint32_t add;      /* LENGTH: unit length = add + mul * field */
    uint32_t mul;
    uint32_t size; /* FIXED: the unit length */
    uint32_t max;  /* the largest unit, in bytes (delimiter excluded) */
    uint8_t delim_len;
    uint8_t delim[RG_FRAME_DELIM_MAX];
} rg_framer_cfg;

/* One direction's framer; all zero is a framer at the start of a unit. */
typedef struct rg_framer {
    uint8_t *buf;  /* bytes of the unit that started in an earlier delivery */
    uint32_t have; /* bytes in buf */
    uint32_t cap;  /* buf's allocation */
    uint32_t need; /* LENGTH/FIXED: the unit's length once known (0: not yet) */
    uint8_t mode;  /* 0 cutting; 1 discarding up to the next delimiter; 2 given up */
} rg_framer;

typedef struct rg_framer_res {
    uint32_t used;  /* bytes of the input this step took */
    uint8_t unit;   /* a unit was cut (the returned view, which may be empty) */
    uint8_t error;  /* RG_FRAME_*: what this step met (0: nothing) */
    uint8_t dead;   /* the framer has given up on the direction */
    uint8_t copied; /* the unit came from the straddle buffer */
} rg_framer_res;

/* Take bytes from the front of `in` until a unit is complete; return it (a view into `in` or
 * into the framer's buffer, valid until the next call on this framer) with r->unit set, or an
 * empty view.  `gap`: the bytes of `in` follow a hole of the stream (say it on the first call of
 * a delivery only).  r is overwritten. */
rg_bytes rg_framer_step(rg_framer *f, const rg_framer_cfg *c, rg_bytes in, int gap,
                        rg_framer_res *r);

/* Release the buffer (the instance ends); the framer is then all zero again. */
void rg_framer_free(rg_framer *f);

#ifdef __cplusplus
}
#endif

#endif
