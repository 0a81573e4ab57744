"""The fixed part of every XDP program: types, the helpers cexpr's C calls (rg_op_*, rg_slice*,
rg_index; runtime-c/include/rg/rg_pkt.h's semantics), and the maps user space reads and fills
(docs/xdp.md). A byte view (`rg_bytes`) is an offset into the frame and a length: its bytes
are read with bpf_xdp_load_bytes, which checks the bounds itself."""

PRELUDE = r"""
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

typedef __u8 uint8_t;
typedef __u16 uint16_t;
typedef __u32 uint32_t;
typedef __u64 uint64_t;
#define UINT64_MAX (~0ULL)
#define UINT64_C(x) x##ULL
#define RGX_INLINE static __always_inline

/* a byte view: ptr is an offset into the frame (not a pointer), len its bytes */
typedef struct { __u32 ptr; __u32 len; } rg_bytes;

RGX_INLINE rg_bytes rg_bytes_make(__u64 off, __u64 len)
{
    rg_bytes r = { (__u32)off, (__u32)len };
    return r;
}
RGX_INLINE rg_bytes rg_bytes_empty(void) { return rg_bytes_make(0, 0); }
RGX_INLINE rg_bytes rg_slice(rg_bytes s, __u64 a, __u64 b)
{
    __u64 len = s.len;
    if (a > len) a = len;
    if (b > len) b = len;
    if (b < a) b = a;
    return rg_bytes_make(s.ptr + a, b - a);
}
RGX_INLINE rg_bytes rg_slice_from(rg_bytes s, __u64 a) { return rg_slice(s, a, UINT64_MAX); }
RGX_INLINE rg_bytes rg_slice_to(rg_bytes s, __u64 b) { return rg_slice(s, 0, b); }
RGX_INLINE __u64 rgx_index(struct xdp_md *ctx, rg_bytes s, __u64 i)
{
    __u8 b = 0;
    if (i >= s.len) return 0;
    if (bpf_xdp_load_bytes(ctx, s.ptr + (__u32)i, &b, 1)) return 0;
    return b;
}
#define rg_index(s, i) rgx_index(ctx, (s), (i))
RGX_INLINE __u64 rg_op_div(__u64 a, __u64 b) { return b ? a / b : 0; }
RGX_INLINE __u64 rg_op_mod(__u64 a, __u64 b) { return b ? a % b : 0; }
RGX_INLINE __u64 rg_op_shl(__u64 a, __u64 b) { return b < 64 ? a << b : 0; }
RGX_INLINE __u64 rg_op_shr(__u64 a, __u64 b) { return b < 64 ? a >> b : 0; }
RGX_INLINE __u64 rg_op_min(__u64 a, __u64 b) { return a < b ? a : b; }
RGX_INLINE __u64 rg_op_max(__u64 a, __u64 b) { return a < b ? b : a; }
RGX_INLINE int rg_op_truth(__u64 a) { return a != 0; }
RGX_INLINE __u64 rg_op_eq(__u64 a, __u64 b) { return a == b; }
RGX_INLINE __u64 rg_op_ne(__u64 a, __u64 b) { return a != b; }
RGX_INLINE __u64 rg_op_lt(__u64 a, __u64 b) { return a < b; }
RGX_INLINE __u64 rg_op_le(__u64 a, __u64 b) { return a <= b; }
RGX_INLINE __u64 rg_op_gt(__u64 a, __u64 b) { return a > b; }
RGX_INLINE __u64 rg_op_ge(__u64 a, __u64 b) { return a >= b; }

/* n (1..8) bytes of the frame at off as a big-endian number (0 if out of the frame) */
RGX_INLINE __u64 rgx_be(struct xdp_md *ctx, __u32 off, __u32 n)
{
    __u8 b[8] = {0};
    __u64 v = 0;
    if (n == 0 || n > 8 || bpf_xdp_load_bytes(ctx, off, b, n)) return 0;
    for (int i = 0; i < 8; i++)
        if (i < (int)n) v = (v << 8) | b[i];
    return v;
}
RGX_INLINE void rgx_put_be(__u8 *p, __u64 v, int n)
{
    for (int i = 0; i < 8; i++)
        if (i < n) p[i] = (__u8)(v >> (8 * (n - 1 - i)));
}

/* the flow maps' key: the layer's index in the stack, the selector key's length and bytes
 * (the smaller of the forward and the reversed key, so both directions are one entry) */
#define RGX_KEY_MAX 40
struct rgx_key { __u32 layer; __u32 len; __u8 k[RGX_KEY_MAX]; };
struct rgx_count { __u64 packets; __u64 bytes; };
/* a flow map's value: its frames and their bytes, then per direction (1: the packet's own
 * key is the larger of the two) its frames and the bytes of the flow layer's input (what
 * user space's records count), for the records of the flows user space handed over */
struct rgx_fcount { __u64 packets; __u64 bytes; __u64 dir_packets[2]; __u64 dir_bytes[2]; };

enum { RGX_ST_PACKETS, RGX_ST_RULE_DROP, RGX_ST_RULE_PASS, RGX_ST_FLOW_DROP, RGX_ST_BYPASS,
       RGX_ST_DEFERRED, RGX_ST_NO_RULE, RGX_ST_N };

struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, RGX_ST_N);
         __type(key, __u32); __type(value, __u64); } rg_stats SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_LRU_HASH); __uint(max_entries, RGX_FLOWS);
         __type(key, struct rgx_key); __type(value, struct rgx_fcount); } rg_drop SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_LRU_HASH); __uint(max_entries, RGX_FLOWS);
         __type(key, struct rgx_key); __type(value, struct rgx_fcount); } rg_bypass SEC(".maps");
/* set by user space: [0] the verdict of a bypassed frame, 1 XDP_DROP (a capture that reads
 * what XDP passes, libpcap: the frame must not reach it), else XDP_PASS */
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u32); } rg_conf SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, RGX_RULES);
         __type(key, __u32); __type(value, struct rgx_count); } rg_rules SEC(".maps");
/* the AF_XDP sockets of the afxdp source (--io afxdp) by RX queue, which it fills: what goes
 * to user space (RGX_UP) is redirected to its queue's socket, or passed up the kernel's stack
 * (libpcap, AF_PACKET) when that queue has none */
struct { __uint(type, BPF_MAP_TYPE_XSKMAP); __uint(max_entries, 1024);
         __type(key, __u32); __type(value, __u32); } rg_xsks SEC(".maps");
#define RGX_UP bpf_redirect_map(&rg_xsks, ctx->rx_queue_index, XDP_PASS)

RGX_INLINE void rgx_stat(__u32 i)
{
    __u64 *v = bpf_map_lookup_elem(&rg_stats, &i);
    if (v) __sync_fetch_and_add(v, 1);
}
RGX_INLINE void rgx_add(struct rgx_count *c, __u64 bytes)
{
    __sync_fetch_and_add(&c->packets, 1);
    __sync_fetch_and_add(&c->bytes, bytes);
}
RGX_INLINE int rgx_bypass_verdict(void)
{
    __u32 zero = 0, *v = bpf_map_lookup_elem(&rg_conf, &zero);
    return v && *v == 1 ? XDP_DROP : XDP_PASS;
}
RGX_INLINE void rgx_count(void *map, __u32 i, __u64 bytes)
{
    struct rgx_count *c = bpf_map_lookup_elem(map, &i);
    if (c) rgx_add(c, bytes);
}
"""
