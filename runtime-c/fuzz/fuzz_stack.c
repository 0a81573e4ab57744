/* fuzz_stack.c - libFuzzer harness for a generated stack's per-packet entry.
 *
 * Built per stack by ci/fuzz-smoke.sh with -DRG_FUZZ_DESC=<stack>_desc.  One input is a short
 * capture, so that state, reassembly and timers are exercised, not only one parse:
 *
 *   [u8 link kind]  then records  [u16 len, LE][u32 time delta in microseconds, LE][len bytes]
 *
 * The link kind (modulo RG_LINK_KINDS) picks the stack's entry layer for every packet, as the
 * driver does for a capture of that link type (ci/fuzz_seeds.py cuts seeds from real captures
 * in this framing).  A record cut short by the end of the input is given as far as it goes.
 * Every packet is followed by an expiry call (the clock moves by the deltas; deltas with the
 * top bit set go backwards, so the clock guard runs too), the input ends with a flush.  A small
 * instance cap makes evictions happen; an observer reads every byte the stack hands out (handler
 * arguments, keys), so that a slice past its buffer is an ASan report. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg.h"
#include "rg/rg_api.h"

extern const rg_stack_desc RG_FUZZ_DESC;

static volatile uint64_t sink;

static void touch(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    sink += s;
}

static void on_call(void *self, const rg_call *c)
{
    (void)self;
    const rg_handler_desc *h = &RG_FUZZ_DESC.handlers[c->handler];
    for (unsigned i = 0; i < h->nargs; i++)
        if (c->args[i].kind == RG_VAL_BYTES) touch(c->args[i].bytes.ptr, c->args[i].bytes.len);
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts)
{
    (void)self;
    (void)ts;
    const rg_layer_desc *l = &RG_FUZZ_DESC.layers[f->layer];
    touch(f->key_a, l->key_len);
    touch(f->key_p, l->key_len);
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts)
{
    (void)reason;
    (void)complete;
    on_open(self, f, ts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rg_stack_desc *s = &RG_FUZZ_DESC;
    if (size < 1) return 0;
    const int entry = s->entry[data[0] % RG_LINK_KINDS];
    if (entry < 0) return -1; /* the stack has no entry for this link kind: not interesting */
    static const rg_obs obs = {.on_call = on_call, .on_open = on_open, .on_close = on_close};
    rg_ctx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.inst_cap = 16;
    cfg.seed = 1;
    cfg.obs = &obs;
    cfg.max_clock_jump_ns = UINT64_C(60) * 1000000000u;
    cfg.prefetch_always = 1; /* burst stage 1 on every packet, whatever the tables' sizes */
    /* memcaps small enough to be hit, the policy from the kind byte's higher values (the
     * existing seeds keep theirs: evict-oldest) */
    cfg.memcap_reassembly = 8192;
    cfg.memcap_flows = 4096;
    cfg.memcap_policy =
        1 + (int)((RG_MEMCAP_EVICT_OLDEST + data[0] / RG_LINK_KINDS) % RG_MEMCAP_POLICIES);
    void *ctx = s->ctx_new(&cfg);
    if (!ctx) return 0;
    uint64_t ts = UINT64_C(1700000000) * 1000000000u;
    size_t i = 1;
    while (i + 6 <= size) {
        uint32_t len = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8;
        uint32_t d = (uint32_t)data[i + 2] | (uint32_t)data[i + 3] << 8 |
                     (uint32_t)data[i + 4] << 16 | (uint32_t)data[i + 5] << 24;
        i += 6;
        if (len > size - i) len = (uint32_t)(size - i);
        /* deltas in microseconds (up to ~35 min); the top bit: backwards */
        uint64_t dt = (uint64_t)(d & 0x7fffffffu) * 1000u;
        ts = d & 0x80000000u ? ts - dt : ts + dt;
        s->expire(ctx, ts);
        /* a copy of exactly len bytes: reading past the packet is an ASan report */
        uint8_t *pkt = (uint8_t *)malloc(len ? len : 1);
        if (!pkt) break;
        memcpy(pkt, data + i, len);
        if (s->prefetch) (void)s->prefetch(ctx, (unsigned)entry, pkt, len); /* burst stage 1 */
        (void)s->process(ctx, (unsigned)entry, pkt, len, ts);
        free(pkt);
        i += len;
    }
    s->flush(ctx);
    if (s->stats) touch((const uint8_t *)s->stats(ctx), sizeof(rg_stats));
    s->ctx_free(ctx);
    return 0;
}
