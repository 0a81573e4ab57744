/* rg_nf_registry.h - how network functions (NFs) make themselves known to
 * the capture driver.
 *
 * An NF is an observer (rg_obs, rg_api.h) created for one stack.  An NF
 * library provides the NULL-terminated table rg_nf_table of its
 * descriptors (handlers/nf's rg_nf.c does for the stock NFs); the driver
 * looks the name given to --nf up in it, lists the table in --help and adds
 * each NF's flag to its options.  The runtime names no NF: the arrow goes
 * from the NFs to the runtime. */
#ifndef RG_NF_REGISTRY_H
#define RG_NF_REGISTRY_H

#include <stddef.h>

#include "rg_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the driver gives an NF it creates. */
typedef struct rg_nf_cfg {
    const char *outdir; /* --out: where an NF that writes files puts them */
    int flag;           /* the NF's own flag (rg_nf_desc.flag) was given */
} rg_nf_cfg;

typedef struct rg_nf_desc {
    const char *name; /* what --nf names */
    const char *help; /* one line for --help */
    /* an optional boolean option of this NF (--FLAG, e.g. "flowstats-all"),
     * NULL if none, with its --help line; given with another NF, ignored */
    const char *flag;
    const char *flag_help;
    /* The NF for stack; NULL on error, with a message in err. */
    rg_obs *(*create)(const rg_stack_desc *stack, const rg_nf_cfg *cfg, char *err, size_t errlen);
    /* Write its outputs and free it (the stack context was flushed: every
     * instance has closed).  RG_OK, or RG_EIO when an output could not be
     * written (the reason printed on stderr). */
    int (*finish)(rg_obs *nf);
    /* The same NF as an NF of the ABI (rg_nf_api.h), which chains and
     * `--nf NAME` run; NULL: usable through create/finish only. */
    const struct rg_nf_abi *abi;
} rg_nf_desc;

/* The NFs linked into the binary, NULL-terminated (defined by the NF
 * library). */
extern const rg_nf_desc *const rg_nf_table[];

/* The NF called name in table, NULL if none. */
const rg_nf_desc *rg_nf_find(const rg_nf_desc *const *table, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* RG_NF_REGISTRY_H */
