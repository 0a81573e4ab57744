/* rg_common.h - shared definitions of the rubikgen C runtime.
 *
 * Everything here is header-only: error codes, byte views, branch hints,
 * serial-number arithmetic and the sanitizer hooks used by the pools. */
#ifndef RG_COMMON_H
#define RG_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error codes (0 = success, negative = failure) ---- */
enum {
    RG_OK = 0,
    RG_ETRUNC = -1,       /* not enough bytes: a truncated packet or field */
    RG_EINVAL = -2,       /* invalid argument (e.g. a bit run wider than 64 bits) */
    RG_ENOMEM = -3,       /* allocation failed */
    RG_EUNSUPPORTED = -4, /* unsupported link type or format */
    RG_EIO = -5,          /* read error from a capture file */
};

/* Short, static description of an error code. */
const char *rg_strerror(int err);

/* A random 64-bit value for hash seeds (flow tables exposed to untrusted
 * traffic should not use a fixed seed).  Uses the kernel's random source
 * once; call it at set-up time, never per packet. */
uint64_t rg_random_seed(void);

/* ---- compiler helpers ---- */
#if defined(__GNUC__) || defined(__clang__)
#define RG_LIKELY(x)   __builtin_expect(!!(x), 1)
#define RG_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RG_INLINE      static inline __attribute__((always_inline))
#define RG_UNUSED      __attribute__((unused))
#else
#define RG_LIKELY(x)   (x)
#define RG_UNLIKELY(x) (x)
#define RG_INLINE      static inline
#define RG_UNUSED
#endif

/* ---- byte views ---- */
/* A (pointer, length) view.  The runtime never hands out a NULL pointer:
 * empty views point at rg_empty_byte. */
typedef struct rg_bytes {
    const uint8_t *ptr;
    size_t len;
} rg_bytes;

extern const uint8_t rg_empty_byte[1];

RG_INLINE rg_bytes rg_bytes_make(const uint8_t *p, size_t len)
{
    rg_bytes b;
    b.ptr = p ? p : rg_empty_byte;
    b.len = p ? len : 0;
    return b;
}

RG_INLINE rg_bytes rg_bytes_empty(void)
{
    rg_bytes b;
    b.ptr = rg_empty_byte;
    b.len = 0;
    return b;
}

/* ---- 32-bit serial-number arithmetic (RFC 1982 style) ---- */
/* Signed distance a - b; positive when a is after b. */
RG_INLINE int32_t rg_sdiff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}
RG_INLINE int rg_seq_lt(uint32_t a, uint32_t b)
{
    return rg_sdiff(a, b) < 0;
}
RG_INLINE int rg_seq_le(uint32_t a, uint32_t b)
{
    return rg_sdiff(a, b) <= 0;
}

/* ---- AddressSanitizer manual poisoning (no-op without ASan) ---- */
#if defined(__SANITIZE_ADDRESS__)
#define RG_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RG_HAVE_ASAN 1
#endif
#endif

#ifdef RG_HAVE_ASAN
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#define RG_POISON(p, n)   __asan_poison_memory_region((p), (n))
#define RG_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
void *__asan_region_is_poisoned(void *addr, size_t size);
/* a freed record of a flow table's pool (RG_POISON) */
#define RG_POISONED(p, n) (__asan_region_is_poisoned((void *)(p), (n)) != NULL)
#else
#define RG_POISON(p, n)   ((void)(p), (void)(n))
#define RG_UNPOISON(p, n) ((void)(p), (void)(n))
#define RG_POISONED(p, n) ((void)(p), (void)(n), 0)
#endif

/* mkdir -p (dir NULL or "": an error): RG_OK, or an error with a message in err.  One
 * implementation for the NFs' output directories and the driver's per-worker parts. */
int rg_mkdirs(const char *dir, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* RG_COMMON_H */
