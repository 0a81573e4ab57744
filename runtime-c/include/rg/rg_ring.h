/* rg_ring.h - a single-producer single-consumer ring of frames, for handing
 * frames from the thread that reads a source to one worker thread.
 *
 * Frames are copied in (file and live sources reuse their buffers), as
 * variable-size records in one byte buffer: a record header (the rg_frame
 * fields) then the bytes, 8-byte aligned.  The producer writes a record and
 * publishes it with a release store of `head`; the consumer reads with an
 * acquire load, uses the frame in place and releases it (`tail`) when done,
 * so a frame is valid from rg_ring_peek until rg_ring_release.  Nothing is
 * shared but the two indices, each on its own cache line. */
#ifndef RG_RING_H
#define RG_RING_H

#include <stdatomic.h>

#include "rg_common.h"
#include "rg_pcap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rg_ring {
    _Alignas(64) _Atomic uint64_t head; /* bytes written (producer) */
    _Alignas(64) _Atomic uint64_t tail; /* bytes released (consumer) */
    _Alignas(64) uint8_t *buf;
    uint64_t size;   /* a power of two */
    uint64_t peeked; /* consumer: bytes of the records peeked, not yet released */
} rg_ring;

/* size: bytes, rounded up to a power of two (at least 64 KiB). */
int rg_ring_init(rg_ring *r, size_t size);
void rg_ring_free(rg_ring *r);

/* Producer: copy a frame in; 1 on success, 0 if the ring is full right now
 * (retry), RG_EINVAL if the frame can never fit (larger than half the ring). */
int rg_ring_push(rg_ring *r, const rg_frame *f);

/* Consumer: the next frame (valid until rg_ring_release), 1; 0 if empty. */
int rg_ring_peek(rg_ring *r, rg_frame *f);
/* The same with a number the producer gives each record (--workers: the input's frame
 * number), read back by the consumer. */
int rg_ring_push_seq(rg_ring *r, const rg_frame *f, uint64_t seq);
int rg_ring_peek_seq(rg_ring *r, rg_frame *f, uint64_t *seq);
/* Consumer: give back every frame peeked so far. */
void rg_ring_release(rg_ring *r);

#ifdef __cplusplus
}
#endif
#endif /* RG_RING_H */
