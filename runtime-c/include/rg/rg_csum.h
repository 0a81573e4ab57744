/* rg_csum.h - checksums declared by the specs (protocol `checksums:`): verification on input
 * and the fix-up of generated field setters.
 *
 * A generated stack records, for every layer parsed in the current packet, where its header
 * is (rg_span), and describes its checksum fields in a table (rg_csum_desc).  From these the
 * runtime verifies a checksum (the Internet checksum of RFC 1071, with the TCP/UDP
 * pseudo-header, or SCTP's CRC-32C) and, when a setter rewrites bytes of the frame, updates
 * every checksum of the packet that covers them: incrementally (RFC 1624, eqn. 3) for the
 * Internet checksum, the pseudo-header included, recomputed for CRC-32C.  A checksum field
 * that changes is itself a write, so an outer checksum covering it (a tunnel's UDP) follows. */
#ifndef RG_CSUM_H
#define RG_CSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { RG_CSUM_INTERNET = 0, RG_CSUM_CRC32C = 1 };
enum { RG_CSUM_HEADER = 0, RG_CSUM_LAYER = 1 };

/* Where a layer is in the current packet: set when its header parsed. */
typedef struct rg_span {
    uint8_t *hdr;  /* the header's first byte (the frame, or a reassembly buffer) */
    uint32_t hlen; /* header bytes parsed */
    uint32_t len;  /* the layer's input from hdr on: header and payload */
    uint64_t pkt;  /* the packet number it belongs to (stale otherwise) */
    /* a layer lending a pseudo-header: what setters changed in its addresses before the
     * layers above were parsed (one's complement sum of new minus old), applied to their
     * checksums when they are (rg_csum_pending) */
    uint32_t ph_delta;
} rg_span;

/* One checksum field of one layer (generated from the spec). */
typedef struct rg_csum_desc {
    uint16_t layer;                   /* the layer whose header holds it */
    uint16_t off;                     /* its byte offset in that header */
    uint8_t algo;                     /* RG_CSUM_INTERNET | RG_CSUM_CRC32C */
    uint8_t covers;                   /* RG_CSUM_HEADER | RG_CSUM_LAYER */
    uint8_t zero_none;                /* 0 means "no checksum" (UDP) */
    uint8_t proto;                    /* pseudo-header protocol number */
    int16_t ph_layer;                 /* the layer lending the pseudo-header; -1: none */
    uint16_t ph_src, ph_dst, ph_alen; /* its address fields: offsets, size */
    int16_t ph_lenoff;                /* its length field (16 bits): offset; -1: none */
    uint16_t ph_lenfrom;              /* ... counting bytes from this header offset on */
    const char *where;                /* spec file:line of the declaration */
} rg_csum_desc;

/* The packet a fix-up works on. */
typedef struct rg_csum_pkt {
    const rg_csum_desc *desc;
    unsigned ndesc;
    rg_span *spans; /* by layer index */
    uint64_t pkt;   /* the current packet number */
    uint8_t *frame; /* the current frame (writable: the driver's seam) */
    uint32_t caplen;
} rg_csum_pkt;

/* CRC-32C (Castagnoli, reflected), continuing crc (start with 0). */
uint32_t rg_crc32c(const uint8_t *p, size_t n, uint32_t crc);

/* Verify checksum d of the packet: 1 good (or none: zero_none and 0), 0 bad, -1 not
 * verifiable (its layer or pseudo-header layer not parsed in this packet, or the bytes it
 * covers not all captured). */
int rg_csum_verify(const rg_csum_pkt *c, const rg_csum_desc *d);

/* Write n bytes of src at p, a place of the current frame, and fix up every checksum of the
 * packet covering them whose field is in the frame too.  Returns 0, or -1 (nothing written)
 * when [p, p + n) is not inside the frame. */
int rg_csum_write(const rg_csum_pkt *c, uint8_t *p, const uint8_t *src, uint32_t n);

/* Layer `layer` was just parsed: apply to its pseudo-header checksums what setters changed
 * earlier in this packet in the addresses they sum (a handler of the IP layer rewrote them
 * before TCP was parsed). */
void rg_csum_pending(const rg_csum_pkt *c, unsigned layer);

/* The span of layer i in this packet, inside the frame, with at least need header bytes;
 * NULL otherwise (not parsed, reassembled, or too short). */
uint8_t *rg_csum_header(const rg_csum_pkt *c, unsigned layer, uint32_t need);

/* Overwrite every TCP option of this kind in the header of layer `layer` (a TCP header in
 * the frame) with NOPs, fixing up the checksums: the removal that keeps the length.  Returns
 * the number of options removed.  EOL (0) and NOP (1) cannot be removed; a malformed option
 * list stops the walk. */
int rg_tcp_strip_option(const rg_csum_pkt *c, unsigned layer, uint8_t kind);

/* In a SYN or SYN-ACK (a TCP header of layer `layer` in the frame, SYN set), lower an MSS
 * option (kind 2, length 4) larger than mss to mss, fixing up the checksums (RFC 1624).
 * Returns 1 when it rewrote one, 0 otherwise (no SYN, no MSS option or not larger, a
 * malformed option list). */
int rg_tcp_clamp_mss(const rg_csum_pkt *c, unsigned layer, uint16_t mss);

#ifdef __cplusplus
}
#endif
#endif /* RG_CSUM_H */
