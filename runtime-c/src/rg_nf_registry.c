/* rg_nf_registry.c - NF lookup (see rg_nf_registry.h). */
#include "rg/rg_nf_registry.h"

#include <string.h>

const rg_nf_desc *rg_nf_find(const rg_nf_desc *const *table, const char *name)
{
    for (; table && *table; table++)
        if (!strcmp((*table)->name, name)) return *table;
    return NULL;
}
