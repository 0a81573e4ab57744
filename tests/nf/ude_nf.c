/* ude_nf.c - a test NF subscribing to a user-defined event by its name: it receives the calls
 * of every handler hooked on it (rg_handler_desc.events), whatever they are called, and writes
 * one line per call to OUT/ude.txt: "PKT HANDLER". */
#include <stdio.h>
#include <stdlib.h>

#include "rg/rg_nf_api.h"

typedef struct ude_nf {
    const rg_stack_desc *stack;
    FILE *out;
} ude_nf;

static int on_event(void *self, const rg_nf_ev *ev, void *st)
{
    (void)st;
    ude_nf *nf = self;
    fprintf(nf->out, "%llu %s\n", (unsigned long long)ev->pkt_no,
            nf->stack->handlers[ev->call->handler].name);
    return RG_PASS;
}

static const rg_nf_sub subs[] = {
    {"tcp", UDE_EVENT, on_event, 0},
    {"tcp", UDE_EVENT "6", on_event, 0},
};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg, unsigned ncfg,
                  const rg_nf_host *host, char *err, size_t errlen)
{
    (void)host;
    char path[4096];
    snprintf(path, sizeof path, "%s/ude.txt", rg_nf_cfg_get(cfg, ncfg, "out", "rg-out"));
    ude_nf *nf = calloc(1, sizeof *nf);
    if (!nf || !(nf->out = fopen(path, "w"))) {
        snprintf(err, errlen, "cannot create %s", path);
        free(nf);
        return NULL;
    }
    nf->stack = stack;
    return nf;
}

static int fini(void *self, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    ude_nf *nf = self;
    fclose(nf->out);
    free(nf);
    return 0;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION, sizeof(rg_nf_abi), "ude", "calls made for a UDE",
                subs, 2, 0, init, fini, NULL};
