/* unsub_nf.c - the dynamic-subscription benchmark NF (BENCHMARKS.md, bench/nf_unsub.py): reads
 * every delivered byte of every flow direction (a checksum, standing in for an NF that
 * classifies a flow from its first bytes) and, with unsub_after=N (N > 0), unsubscribes from
 * the flow's data events and asks for no more of its bytes once a direction delivered N bytes
 * (rg_nf_api.h: subscribe, no_more_bytes).  The stack then stops reassembling that direction.
 *
 *     cc -shared -fPIC -std=c11 -O2 -Iruntime-c/include bench/nf/unsub_nf.c -o unsub_nf.so
 *     BINARY CAPTURE --bench --nf ./unsub_nf.so            (reads everything)
 *     printf 'chain:\n  - nf: ./unsub_nf.so\n    params: {unsub_after: 1024}\n' > c.yaml
 *     BINARY CAPTURE --bench --chain c.yaml                (stops after 1 KB per direction) */
#include <stdio.h>
#include <stdlib.h>

#include "rg/rg_nf_api.h"

typedef struct nf {
    const rg_stack_desc *stack;
    uint64_t unsub_after;
    uint64_t sum; /* of every byte read: keeps the reading from being optimised away */
    uint64_t bytes;
} nf;

typedef struct flow {
    uint64_t bytes[2];
} flow;

static int on_data(void *self, const rg_nf_ev *ev, void *st)
{
    nf *n = self;
    flow *f = st;
    const rg_val *d = rg_nf_call_arg(n->stack, ev->call, "data");
    if (!d || d->kind != RG_VAL_BYTES) return RG_PASS;
    for (size_t i = 0; i < d->bytes.len; i++)
        n->sum += d->bytes.ptr[i];
    n->bytes += d->bytes.len;
    if (f && n->unsub_after) {
        f->bytes[ev->dir & 1] += d->bytes.len;
        if (f->bytes[ev->dir & 1] >= n->unsub_after) {
            ev->host->subscribe(ev, ev->sub, 0);
            ev->host->no_more_bytes(ev, ev->dir);
        }
    }
    return RG_PASS;
}

static const rg_nf_sub subs[] = {{"*", "*", on_data, 0}};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    (void)host;
    (void)err;
    (void)errlen;
    nf *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->stack = stack;
    n->unsub_after = strtoull(rg_nf_cfg_get(cfg, ncfg, "unsub_after", "0"), NULL, 10);
    return n;
}

static int fini(void *self, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    nf *n = self;
    if (getenv("UNSUB_NF_REPORT"))
        fprintf(stderr, "unsub_nf: %llu bytes read, sum %llu\n", (unsigned long long)n->bytes,
                (unsigned long long)n->sum);
    free(n);
    return RG_OK;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION, sizeof(rg_nf_abi), "unsub", "dynamic-subscription benchmark",
                subs,
                1,
                sizeof(flow),
                init,
                fini,
                NULL};
