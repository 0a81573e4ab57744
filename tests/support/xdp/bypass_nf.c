/* bypass_nf: an NF for the --xdp tests (tests/runtime/test_xdp_run.py) that
 * gives a flow RG_BYPASS_FLOW once the packets of its instance (both
 * directions) have carried more than `after` bytes of the layer's input
 * (default 2000), on the layer `layer` (default tcp). Its later packets are
 * then handled by the XDP program, not by user space. */
#include <stdlib.h>
#include <string.h>

#include "rg/rg_nf_api.h"

typedef struct nf {
  const rg_stack_desc *stack;
  unsigned layer;
  uint64_t after;
} nf;

typedef struct flow {
  uint64_t bytes;
} flow;

static int on_packet(void *self, const rg_nf_ev *ev, void *st) {
  nf *n = self;
  flow *f = st;
  if (ev->layer != n->layer)
    return RG_PASS;
  f->bytes += ev->len;
  return f->bytes > n->after ? RG_BYPASS_FLOW : RG_PASS;
}

static const rg_nf_sub subs[] = {{"*", RG_NF_PACKET, on_packet, 0}};

static void *init(const rg_stack_desc *stack, const rg_nf_kv *cfg,
                  unsigned ncfg, const rg_nf_host *host, char *err,
                  size_t errlen) {
  (void)host;
  nf *n = calloc(1, sizeof *n);
  if (!n)
    return NULL;
  n->stack = stack;
  n->after = strtoull(rg_nf_cfg_get(cfg, ncfg, "after", "2000"), NULL, 10);
  const char *layer = rg_nf_cfg_get(cfg, ncfg, "layer", "tcp");
  for (n->layer = 0; n->layer < stack->nlayers; n->layer++)
    if (!strcmp(stack->layers[n->layer].name, layer))
      return n;
  snprintf(err, errlen, "no layer %s", layer);
  free(n);
  return NULL;
}

static int fini(void *self, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  free(self);
  return RG_OK;
}

RG_NF_EXPORT = {RG_NF_ABI_VERSION,
                sizeof(rg_nf_abi),
                "bypass",
                "bypass each flow after `after` bytes (tests)",
                subs,
                sizeof subs / sizeof subs[0],
                sizeof(flow),
                init,
                fini,
                NULL};
