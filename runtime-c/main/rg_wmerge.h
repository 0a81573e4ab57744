/* rg_wmerge.h - --workers N: gathering the workers' own NF files (rg_wmerge.c).  Private to
 * runtime-c/main/. */
#ifndef RG_WMERGE_H
#define RG_WMERGE_H

#include <stddef.h>
#include <stdint.h>

#include "rg_nfchain.h"

/* Gather OUT/.rg-worker-K (K < nw) of every directory OUT of dirs into OUT: the workers'
 * own files, what they did not write through the line outputs (rg_wmerge.c); RG_OK, or an
 * error printed with prog (the workers' parts then stay). */
int rg_wmerge(const rg_wdirs *dirs, unsigned nw, const char *prog);

#endif /* RG_WMERGE_H */
