/* flowbytes_nf.c - a sample out-of-tree NF (rg_nf_api.h): the packets and
 * bytes of every flow direction of every layer with instances, one JSON line
 * per flow when it closes, in OUT/flowbytes.jsonl (OUT: the "out" parameter,
 * by default the driver's --out directory, which the driver creates).
 *
 * It uses only built-in events, so one .so serves every stack:
 *
 *     cc -shared -fPIC -std=c11 -O2 -Iruntime-c/include examples/nf/flowbytes_nf.c \
 *        -o flowbytes_nf.so
 *     build/tcp_ip/tcp_ip CAPTURE --nf ./flowbytes_nf.so --out OUT
 *
 * Parameters: out (directory), file (name in it; default flowbytes.jsonl). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "rg/rg_nf_api.h"

typedef struct nf {
    const rg_stack_desc *stack;
    FILE *out;
} nf;

typedef struct flow {
    uint64_t packets[2], bytes[2];
} flow;

static int on_packet(void *self, const rg_nf_ev *ev, void *st)
{
    (void)self;
    flow *f = st;
    f->packets[ev->dir & 1]++;
    f->bytes[ev->dir & 1] += ev->len;
    return RG_PASS;
}

static int on_close(void *self, const rg_nf_ev *ev, void *st)
{
    nf *n = self;
    const flow *f = st;
    fprintf(n->out,
            "{\"uid\":%" PRIu64 ",\"layer\":\"%s\",\"packets\":[%" PRIu64 ",%" PRIu64
            "],\"bytes\":[%" PRIu64 ",%" PRIu64 "]}\n",
            ev->flow->uid, n->stack->layers[ev->layer].name, f->packets[0], f->packets[1],
            f->bytes[0], f->bytes[1]);
    return RG_PASS;
}

static const rg_nf_sub subs[] = {
    {"*", RG_NF_PACKET, on_packet, 0},
    {"*", RG_NF_CLOSE, on_close, 0},
};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    (void)host;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", rg_nf_cfg_get(cfg, ncfg, "out", "."),
             rg_nf_cfg_get(cfg, ncfg, "file", "flowbytes.jsonl"));
    nf *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->stack = stack;
    n->out = fopen(path, "w");
    if (!n->out) {
        snprintf(err, errlen, "cannot create %s", path);
        free(n);
        return NULL;
    }
    return n;
}

static int fini(void *self, char *err, size_t errlen)
{
    nf *n = self;
    int bad = ferror(n->out) | fclose(n->out);
    free(n);
    if (bad) snprintf(err, errlen, "cannot write flowbytes.jsonl");
    return bad ? RG_EIO : RG_OK;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION,
                sizeof(rg_nf_abi),
                "flowbytes",
                "packets and bytes per flow direction: OUT/flowbytes.jsonl",
                subs,
                sizeof subs / sizeof subs[0],
                sizeof(flow),
                init,
                fini,
                NULL};
