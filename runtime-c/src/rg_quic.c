/* rg_quic.c - QUIC Initial packet protection removal (RFC 9001 5.2-5.4, RFC 9369 3.3). */
#include "rg/rg_quic.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

struct rg_quic_crypto {
    EVP_CIPHER_CTX *gcm; /* AES-128-GCM, re-keyed per packet (no allocation) */
    EVP_CIPHER_CTX *ecb; /* AES-128-ECB for the header protection mask */
};

/* RFC 9001 5.2 and RFC 9369 3.3.1 */
static const uint8_t SALT_V1[20] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17,
                                    0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};
static const uint8_t SALT_V2[20] = {0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93,
                                    0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e, 0xd9};

rg_quic_crypto *rg_quic_crypto_new(void)
{
    rg_quic_crypto *cc = (rg_quic_crypto *)calloc(1, sizeof *cc);
    if (cc == NULL) return NULL;
    cc->gcm = EVP_CIPHER_CTX_new();
    cc->ecb = EVP_CIPHER_CTX_new();
    if (cc->gcm == NULL || cc->ecb == NULL ||
        EVP_DecryptInit_ex(cc->gcm, EVP_aes_128_gcm(), NULL, NULL, NULL) != 1 ||
        EVP_EncryptInit_ex(cc->ecb, EVP_aes_128_ecb(), NULL, NULL, NULL) != 1) {
        rg_quic_crypto_free(cc);
        return NULL;
    }
    EVP_CIPHER_CTX_set_padding(cc->ecb, 0);
    return cc;
}

void rg_quic_crypto_free(rg_quic_crypto *cc)
{
    if (cc == NULL) return;
    EVP_CIPHER_CTX_free(cc->gcm);
    EVP_CIPHER_CTX_free(cc->ecb);
    free(cc);
}

int rg_quic_version_known(uint32_t version)
{
    return version == RG_QUIC_V1 || version == RG_QUIC_V2;
}

/* HKDF-Expand-Label (RFC 8446 7.1) with an empty context, for outputs of at
 * most one SHA-256 block: T(1) = HMAC(secret, HkdfLabel || 0x01). */
static int expand_label(const uint8_t secret[32], const char *label, uint8_t *out, size_t len)
{
    uint8_t info[2 + 1 + 6 + 32 + 1 + 1];
    size_t ll = strlen(label), n = 0;
    if (len > 32 || ll > 32) return RG_EINVAL;
    info[n++] = (uint8_t)(len >> 8);
    info[n++] = (uint8_t)len;
    info[n++] = (uint8_t)(6 + ll);
    memcpy(info + n, "tls13 ", 6);
    n += 6;
    memcpy(info + n, label, ll);
    n += ll;
    info[n++] = 0;    /* context: empty */
    info[n++] = 0x01; /* block counter */
    uint8_t t[32];
    unsigned tl = 0;
    if (HMAC(EVP_sha256(), secret, 32, info, n, t, &tl) == NULL || tl != 32) return RG_EINVAL;
    memcpy(out, t, len);
    return RG_OK;
}

int rg_quic_initial_secret(uint32_t version, const uint8_t *cid, size_t cid_len, int server,
                           uint8_t secret[32])
{
    if (!rg_quic_version_known(version) || cid_len > RG_QUIC_MAX_CID) return RG_EUNSUPPORTED;
    const uint8_t *salt = version == RG_QUIC_V2 ? SALT_V2 : SALT_V1;
    uint8_t prk[32];
    unsigned pl = 0;
    /* HKDF-Extract(salt, cid) = HMAC(salt, cid); an empty CID is legal */
    static const uint8_t none[1] = {0};
    if (HMAC(EVP_sha256(), salt, 20, cid_len ? cid : none, cid_len, prk, &pl) == NULL || pl != 32)
        return RG_EINVAL;
    return expand_label(prk, server ? "server in" : "client in", secret, 32);
}

int rg_quic_initial_keys(uint32_t version, const uint8_t *cid, size_t cid_len, int server,
                         rg_quic_keys *out)
{
    uint8_t secret[32];
    int rc = rg_quic_initial_secret(version, cid, cid_len, server, secret);
    if (rc != RG_OK) return rc;
    int v2 = version == RG_QUIC_V2;
    if (expand_label(secret, v2 ? "quicv2 key" : "quic key", out->key, 16) != RG_OK ||
        expand_label(secret, v2 ? "quicv2 iv" : "quic iv", out->iv, 12) != RG_OK ||
        expand_label(secret, v2 ? "quicv2 hp" : "quic hp", out->hp, 16) != RG_OK)
        return RG_EINVAL;
    return RG_OK;
}

/* RFC 9000 A.3: the full packet number closest to largest + 1. */
static uint64_t decode_pn(int have, uint64_t largest, uint64_t truncated, unsigned nbits)
{
    uint64_t expected = have ? largest + 1 : 0;
    uint64_t win = UINT64_C(1) << nbits, hwin = win / 2, mask = win - 1;
    uint64_t cand = (expected & ~mask) | truncated;
    if (expected >= hwin && cand <= expected - hwin && cand < (UINT64_C(1) << 62) - win)
        return cand + win;
    if (cand > expected + hwin && cand >= win) return cand - win;
    return cand;
}

static int ensure_keys(rg_quic_initial_state *st, const uint8_t *cid, size_t cid_len,
                       uint32_t version)
{
    if (st->version == version && st->cid_len == cid_len && memcmp(st->cid, cid, cid_len) == 0)
        return RG_OK;
    rg_quic_initial_state n;
    memset(&n, 0, sizeof n);
    if (rg_quic_initial_keys(version, cid, cid_len, 0, &n.keys[0]) != RG_OK ||
        rg_quic_initial_keys(version, cid, cid_len, 1, &n.keys[1]) != RG_OK)
        return RG_QUIC_CRYPTO;
    n.version = version;
    n.cid_len = (uint8_t)cid_len;
    memcpy(n.cid, cid, cid_len);
    if (st->version == version) { /* new CID (after a Retry): the packet numbers go on */
        memcpy(n.have_pn, st->have_pn, sizeof n.have_pn);
        memcpy(n.largest_pn, st->largest_pn, sizeof n.largest_pn);
    }
    *st = n;
    return RG_OK;
}

int rg_quic_initial_open(rg_quic_crypto *cc, rg_quic_initial_state *st, const uint8_t *pkt,
                         size_t pkt_len, size_t pn_off, const uint8_t *cid, size_t cid_len,
                         uint32_t version, int server, uint8_t *out, size_t out_cap,
                         size_t *out_len, uint64_t *pn)
{
    if (out_len) *out_len = 0;
    if (cc == NULL || st == NULL || pkt == NULL) return RG_QUIC_CRYPTO;
    if (pkt_len < 5 || pn_off < 7) return RG_QUIC_TRUNCATED;
    if (!rg_quic_version_known(version)) return RG_QUIC_VERSION;
    if (cid_len > RG_QUIC_MAX_CID) return RG_QUIC_VERSION; /* not a v1/v2 CID */
    uint8_t b0 = pkt[0];
    /* long header; Initial is type 0 in v1, 1 in v2 (RFC 9369 3.2) */
    unsigned want = version == RG_QUIC_V2 ? 1u : 0u;
    if (!(b0 & 0x80) || ((b0 >> 4) & 3u) != want) return RG_QUIC_NOT_INITIAL;
    /* the sample starts 4 bytes past the packet number offset (RFC 9001 5.4.2) */
    if (pn_off > pkt_len || pkt_len - pn_off < 4 + 16) return RG_QUIC_TRUNCATED;
    int rc = ensure_keys(st, cid, cid_len, version);
    if (rc != RG_OK) return rc;
    const rg_quic_keys *k = &st->keys[server ? 1 : 0];

    uint8_t mask[16];
    int ml = 0;
    if (EVP_EncryptInit_ex(cc->ecb, NULL, NULL, k->hp, NULL) != 1 ||
        EVP_EncryptUpdate(cc->ecb, mask, &ml, pkt + pn_off + 4, 16) != 1 || ml != 16)
        return RG_QUIC_CRYPTO;
    uint8_t first = (uint8_t)(b0 ^ (mask[0] & 0x0f));
    unsigned pn_len = (first & 3u) + 1;
    if (pkt_len - pn_off < pn_len + RG_QUIC_TAG_LEN) return RG_QUIC_TRUNCATED;
    uint8_t pnb[4];
    uint64_t tpn = 0;
    for (unsigned i = 0; i < pn_len; i++) {
        pnb[i] = (uint8_t)(pkt[pn_off + i] ^ mask[1 + i]);
        tpn = (tpn << 8) | pnb[i];
    }
    int d = server ? 1 : 0;
    uint64_t full = decode_pn(st->have_pn[d], st->largest_pn[d], tpn, 8 * pn_len);
    size_t ct_off = pn_off + pn_len;
    size_t ct_len = pkt_len - ct_off - RG_QUIC_TAG_LEN;
    if (ct_len > out_cap || ct_len > INT32_MAX) return RG_QUIC_TRUNCATED;

    uint8_t nonce[12];
    memcpy(nonce, k->iv, 12);
    for (unsigned i = 0; i < 8; i++)
        nonce[4 + i] ^= (uint8_t)(full >> (56 - 8 * i));
    int l = 0, ok = 1;
    /* AAD: the header with protection removed, fed in three pieces */
    ok &= EVP_DecryptInit_ex(cc->gcm, NULL, NULL, k->key, nonce) == 1;
    ok &= ok && EVP_DecryptUpdate(cc->gcm, NULL, &l, &first, 1) == 1;
    ok &= ok && EVP_DecryptUpdate(cc->gcm, NULL, &l, pkt + 1, (int)(pn_off - 1)) == 1;
    ok &= ok && EVP_DecryptUpdate(cc->gcm, NULL, &l, pnb, (int)pn_len) == 1;
    if (!ok) return RG_QUIC_CRYPTO;
    l = 0;
    if (ct_len && EVP_DecryptUpdate(cc->gcm, out, &l, pkt + ct_off, (int)ct_len) != 1)
        return RG_QUIC_CRYPTO;
    uint8_t tag[RG_QUIC_TAG_LEN];
    memcpy(tag, pkt + ct_off + ct_len, sizeof tag);
    if (EVP_CIPHER_CTX_ctrl(cc->gcm, EVP_CTRL_GCM_SET_TAG, RG_QUIC_TAG_LEN, tag) != 1)
        return RG_QUIC_CRYPTO;
    int fl = 0;
    if (EVP_DecryptFinal_ex(cc->gcm, out + l, &fl) != 1) {
        memset(out, 0, ct_len); /* nothing unauthenticated leaves */
        return RG_QUIC_AUTH;
    }
    if (!st->have_pn[d] || full > st->largest_pn[d]) st->largest_pn[d] = full;
    st->have_pn[d] = 1;
    if (out_len) *out_len = ct_len;
    if (pn) *pn = full;
    return RG_QUIC_OK;
}

const char *rg_quic_status_name(int status)
{
    switch (status) {
    case RG_QUIC_OK:
        return "ok";
    case RG_QUIC_TRUNCATED:
        return "truncated";
    case RG_QUIC_VERSION:
        return "version";
    case RG_QUIC_NOT_INITIAL:
        return "not_initial";
    case RG_QUIC_AUTH:
        return "auth";
    default:
        return "crypto";
    }
}
