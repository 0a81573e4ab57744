/* detect_nf.c - a sample detector NF (rg_nf_api.h minor 3, events between NFs): it looks for
 * a byte pattern in every flow direction's delivered bytes (the "data" argument of handler
 * calls: TCP's in-order bytes, UDP's payloads), across segment boundaries, and raises the
 * chain's event `flagged` once per flow, on the packet whose bytes complete the first match:
 *
 *     flagged{reason: bytes (the pattern), dir: num (0 c2s, 1 s2c), offset: num (where the
 *             match ends in that direction's bytes)}
 *
 * It decides nothing itself: an NF after it in the chain that subscribes to `flagged` does
 * (examples/nf/block_nf.c drops the flow).  The chain file declares the event:
 *
 *     events:
 *       flagged: {reason: bytes, dir: num, offset: num}
 *     chain:
 *       - nf: ./detect_nf.so
 *         raises: [flagged]
 *         params: {pattern: "evil.example"}
 *       - nf: ./block_nf.so
 *         subscribes: [flagged]
 *
 * Parameters: pattern (the bytes to find, 1 to 255 of them; required). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_nf_api.h"

enum { MAXPAT = 255 };

typedef struct nf {
    const rg_stack_desc *stack;
    const rg_nf_host *host;
    unsigned char pat[MAXPAT];
    size_t plen;
    signed char *data_arg; /* per handler: its "data" bytes argument, -1 none */
} nf;

typedef struct flow {
    int flagged;
    unsigned char tail[2][MAXPAT]; /* the last plen - 1 bytes of each direction */
    size_t ntail[2];
    uint64_t seen[2]; /* bytes of each direction so far */
} flow;

/* Where the first match in tail + bytes ends, counted from the start of bytes (0: none). */
static size_t find(const nf *n, const flow *f, int d, const unsigned char *b, size_t len)
{
    unsigned char win[2 * MAXPAT];
    size_t nt = f->ntail[d];
    /* a match that straddles the tail and the new bytes */
    size_t head = len < n->plen - 1 ? len : n->plen - 1;
    memcpy(win, f->tail[d], nt);
    memcpy(win + nt, b, head);
    for (size_t i = 0; i + n->plen <= nt + head; i++)
        if (!memcmp(win + i, n->pat, n->plen)) return i + n->plen - nt;
    for (size_t i = 0; i + n->plen <= len; i++)
        if (!memcmp(b + i, n->pat, n->plen)) return i + n->plen;
    return 0;
}

static void keep_tail(const nf *n, flow *f, int d, const unsigned char *b, size_t len)
{
    size_t keep = n->plen - 1, nt = f->ntail[d];
    if (len >= keep) {
        memcpy(f->tail[d], b + len - keep, keep);
        f->ntail[d] = keep;
        return;
    }
    size_t old = nt + len > keep ? keep - len : nt; /* of the old tail, what stays */
    memmove(f->tail[d], f->tail[d] + nt - old, old);
    memcpy(f->tail[d] + old, b, len);
    f->ntail[d] = old + len;
}

static int on_call(void *self, const rg_nf_ev *ev, void *st)
{
    nf *n = self;
    flow *f = st;
    int a = n->data_arg[ev->call->handler];
    if (!f || f->flagged || a < 0) return RG_PASS;
    const rg_bytes *b = &ev->call->args[a].bytes;
    int d = ev->dir & 1;
    size_t at = b->len ? find(n, f, d, b->ptr, b->len) : 0;
    if (at) {
        f->flagged = 1;
        rg_val v[3] = {{.kind = RG_VAL_BYTES, .bytes = {n->pat, n->plen}},
                       {.kind = RG_VAL_NUM, .num = (uint64_t)d},
                       {.kind = RG_VAL_NUM, .num = f->seen[d] + at}};
        if (n->host->raise(ev, "flagged", v, 3))
            fprintf(stderr, "detect: cannot raise 'flagged' (is it declared with reason: "
                            "bytes, dir: num, offset: num, and under this NF's raises?)\n");
        return RG_PASS;
    }
    keep_tail(n, f, d, b->ptr, b->len);
    f->seen[d] += b->len;
    return RG_PASS;
}

static const rg_nf_sub subs[] = {{"*", "*", on_call, 0}};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    const char *pat = rg_nf_cfg_get(cfg, ncfg, "pattern", NULL);
    if (!pat || !*pat || strlen(pat) > MAXPAT) {
        snprintf(err, errlen, "detect: the parameter pattern (1 to %d bytes) is required", MAXPAT);
        return NULL;
    }
    if (!RG_NF_HAS_RAISE(host)) {
        snprintf(err, errlen, "detect: this driver has no events between NFs (ABI minor 3)");
        return NULL;
    }
    nf *n = calloc(1, sizeof *n);
    if (!n || !(n->data_arg = malloc(stack->nhandlers + 1u))) {
        free(n);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    n->stack = stack;
    n->host = host;
    n->plen = strlen(pat);
    memcpy(n->pat, pat, n->plen);
    for (unsigned h = 0; h < stack->nhandlers; h++) {
        int i = rg_nf_arg(stack, h, "data");
        n->data_arg[h] =
            (signed char)(i >= 0 && i < 127 && stack->handlers[h].arg_kinds[i] == RG_VAL_BYTES
                              ? i
                              : -1);
    }
    return n;
}

static int fini(void *self, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    nf *n = self;
    free(n->data_arg);
    free(n);
    return RG_OK;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION,
                sizeof(rg_nf_abi),
                "detect",
                "raises flagged{reason, dir, offset} on flows whose bytes hold a pattern",
                subs,
                sizeof subs / sizeof subs[0],
                sizeof(flow),
                init,
                fini,
                NULL};
