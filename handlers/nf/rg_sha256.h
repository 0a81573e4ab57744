/* rg_sha256.h - SHA-256 (FIPS 180-4), streaming, no dependencies.
 *
 * The NFs hash delivered byte streams so a run can be compared with a
 * reference (tshark) without keeping the bytes. */
#ifndef RG_SHA256_H
#define RG_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rg_sha256 {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf; /* bytes pending in buf */
} rg_sha256;

void rg_sha256_init(rg_sha256 *s);
void rg_sha256_update(rg_sha256 *s, const void *data, size_t len);
/* Write the digest; s must be re-initialised before further use. */
void rg_sha256_final(rg_sha256 *s, uint8_t out[32]);
/* 64 lowercase hex digits and a NUL. */
void rg_sha256_hex(const uint8_t digest[32], char out[65]);
/* One-shot convenience: hex digest of len bytes at data. */
void rg_sha256_hex_of(const void *data, size_t len, char out[65]);

#ifdef __cplusplus
}
#endif
#endif /* RG_SHA256_H */
