/* rg_source.c - the registry of packet sources (see rg_source.h).  A new
 * source adds its ops table here, one line. */
#include "rg/rg_source.h"

#include <string.h>

/* The DPDK source lives in its own archive (build/librgdpdk.a) that only
 * binaries built with --io dpdk link (with -u rg_source_dpdk): elsewhere this
 * weak reference is NULL and ends the list. */
extern const rg_source_ops rg_source_dpdk __attribute__((weak));

const rg_source_ops *const rg_sources[] = {
    &rg_source_file,
    &rg_source_live,
    &rg_source_dpdk, /* last: NULL when not linked */
    NULL,
};

const rg_source_ops *rg_source_find(const char *name)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        if (!strcmp((*s)->name, name)) return *s;
    return NULL;
}
