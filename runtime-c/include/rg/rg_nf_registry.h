/* rg_nf_registry.h - how network functions (NFs) make themselves known to
 * the capture driver.
 *
 * A stock NF is an NF of the ABI (rg_nf_api.h) linked into the binary.  An NF
 * library provides the NULL-terminated table rg_nf_table of its
 * descriptors (handlers/nf's rg_nf.c does for the stock NFs); the driver
 * looks the name given to --nf up in it, lists the table in --help, adds
 * each NF's flag to its options and attaches it to the run's chain.  The runtime names no NF: the
 * arrow goes from the NFs to the runtime. */
#ifndef RG_NF_REGISTRY_H
#define RG_NF_REGISTRY_H

#include <stddef.h>

#include "rg_api.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rg_nf_abi;

/* A stock NF: an NF of the ABI (rg_nf_api.h: its name, help line, init, fini), which the
 * driver runs in a chain like a loaded one, plus the driver option it may have. */
typedef struct rg_nf_desc {
    const struct rg_nf_abi *abi;
    /* an optional boolean option of this NF (--FLAG, e.g. "flowstats-all"), NULL if none,
     * with its --help line and the configuration key it sets to "1" ("all"); given with
     * another NF, ignored */
    const char *flag;
    const char *flag_help;
    const char *flag_key;
} rg_nf_desc;

/* Its name (the ABI's): what --nf names. */
const char *rg_nf_desc_name(const rg_nf_desc *d);
/* Its --help line (the ABI's). */
const char *rg_nf_desc_help(const rg_nf_desc *d);

/* The NFs linked into the binary, NULL-terminated (defined by the NF
 * library). */
extern const rg_nf_desc *const rg_nf_table[];

/* The NF called name in table, NULL if none. */
const rg_nf_desc *rg_nf_find(const rg_nf_desc *const *table, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* RG_NF_REGISTRY_H */
