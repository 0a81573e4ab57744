/* rg_nf_registry.c - NF lookup (see rg_nf_registry.h). */
#include "rg/rg_nf_registry.h"

#include <string.h>

#include "rg/rg_nf_api.h"

const char *rg_nf_desc_name(const rg_nf_desc *d)
{
    return d->abi->name;
}

const char *rg_nf_desc_help(const rg_nf_desc *d)
{
    return d->abi->help;
}

const rg_nf_desc *rg_nf_find(const rg_nf_desc *const *table, const char *name)
{
    for (; table && *table; table++)
        if (!strcmp(rg_nf_desc_name(*table), name)) return *table;
    return NULL;
}
