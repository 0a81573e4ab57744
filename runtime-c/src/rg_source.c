/* rg_source.c - the registry of packet sources (see rg_source.h).  A new
 * source adds its ops table here, one line. */
#include "rg/rg_source.h"

#include <string.h>

const rg_source_ops *const rg_sources[] = {
    &rg_source_file,
    NULL,
};

const rg_source_ops *rg_source_find(const char *name)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        if (!strcmp((*s)->name, name)) return *s;
    return NULL;
}
