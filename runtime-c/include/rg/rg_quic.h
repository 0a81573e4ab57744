/* rg_quic.h - QUIC Initial packet protection (RFC 9001 section 5, QUIC v2: RFC 9369).
 *
 * Initial packets are protected with keys anyone can derive from the client's
 * first Destination Connection ID and a published per-version salt: HKDF-SHA256
 * (extract, then HKDF-Expand-Label "client in"/"server in", then "quic key",
 * "quic iv", "quic hp"; v2 uses "quicv2 key/iv/hp"), AES-128-GCM for the
 * payload and AES-128-ECB for header protection.  This module removes both for
 * a passive observer, with OpenSSL's libcrypto (link `pkg-config --libs
 * libcrypto`; only binaries that call it need it).
 *
 * Nothing here allocates per packet: rg_quic_crypto (two cipher contexts) is
 * made once per worker, keys are cached per connection in a
 * rg_quic_initial_state that lives in the instance, and the plaintext goes to
 * a caller's buffer. */
#ifndef RG_QUIC_H
#define RG_QUIC_H

#include "rg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RG_QUIC_V1      UINT32_C(0x00000001)
#define RG_QUIC_V2      UINT32_C(0x6b3343cf)
#define RG_QUIC_MAX_CID 20
#define RG_QUIC_TAG_LEN 16

/* Results of rg_quic_initial_open (0 = success). */
enum rg_quic_status {
    RG_QUIC_OK = 0,
    RG_QUIC_TRUNCATED,   /* too short for a sample, packet number or tag; or out_cap too small */
    RG_QUIC_VERSION,     /* not QUIC v1 or v2 (no known salt) */
    RG_QUIC_NOT_INITIAL, /* not a long header Initial packet of its version */
    RG_QUIC_AUTH,        /* AEAD authentication failed: wrong keys or damaged packet */
    RG_QUIC_CRYPTO,      /* the crypto library failed */
};

/* Keys of one direction. */
typedef struct rg_quic_keys {
    uint8_t key[16];
    uint8_t iv[12];
    uint8_t hp[16];
} rg_quic_keys;

/* Per connection: the keys of both directions for one (version, client DCID),
 * derived on first use and again when either changes (a Retry gives a new
 * DCID; compatible version negotiation a new version), and the largest packet
 * number seen per direction (packet number decoding, RFC 9000 A.3).  All zero
 * is a valid empty state. */
typedef struct rg_quic_initial_state {
    uint32_t version; /* 0: no keys yet */
    uint8_t cid_len;
    uint8_t cid[RG_QUIC_MAX_CID];
    uint8_t have_pn[2];
    uint64_t largest_pn[2];
    rg_quic_keys keys[2]; /* [0] client ("client in"), [1] server ("server in") */
} rg_quic_initial_state;

/* Per-worker cipher contexts (opaque). */
typedef struct rg_quic_crypto rg_quic_crypto;

rg_quic_crypto *rg_quic_crypto_new(void);
void rg_quic_crypto_free(rg_quic_crypto *cc);

/* Is version one whose Initial keys we can derive (v1, v2)? */
int rg_quic_version_known(uint32_t version);

/* The Initial secret of one side (32 bytes) and its keys.  RG_OK, or
 * RG_EUNSUPPORTED for an unknown version / a CID longer than 20 bytes. */
int rg_quic_initial_secret(uint32_t version, const uint8_t *cid, size_t cid_len, int server,
                           uint8_t secret[32]);
int rg_quic_initial_keys(uint32_t version, const uint8_t *cid, size_t cid_len, int server,
                         rg_quic_keys *out);

/* Remove header and packet protection of one Initial packet.
 *   pkt, pkt_len  the packet from its first byte to the end of what its Length
 *                 field covers (not the coalesced packets after it)
 *   pn_off        offset of the packet number (after the Length field)
 *   cid           the client's Destination Connection ID the keys derive from
 *   version       the packet's version; server: 1 for packets sent by the server
 *   out           the plaintext frames (pkt_len - pn_off - pn_len - 16 bytes)
 *   pn            the decoded packet number (may be NULL)
 * The packet is not modified.  Returns an rg_quic_status. */
int rg_quic_initial_open(rg_quic_crypto *cc, rg_quic_initial_state *st, const uint8_t *pkt,
                         size_t pkt_len, size_t pn_off, const uint8_t *cid, size_t cid_len,
                         uint32_t version, int server, uint8_t *out, size_t out_cap,
                         size_t *out_len, uint64_t *pn);

/* Short name of a status ("ok", "truncated", "version", "not_initial", "auth", "crypto"). */
const char *rg_quic_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* RG_QUIC_H */
