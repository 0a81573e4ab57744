/* rg_wmerge.h - --workers N: merging the workers' NF outputs (rg_wmerge.c).  Private to
 * runtime-c/main/. */
#ifndef RG_WMERGE_H
#define RG_WMERGE_H

#include <stddef.h>
#include <stdint.h>

#include "rg_nfchain.h"

/* One worker's instances: key[i] orders the creation of its uid i + 1 among all workers'
 * (the input's frame number that created it; a timestamp where frames are not numbered). */
typedef struct rg_wuids {
    uint64_t *key;
    size_t n, cap;
    uint64_t *g; /* the global uids (rg_wmerge) */
} rg_wuids;

/* After a packet: the uids up to uid_max were created with key; RG_OK or RG_ENOMEM. */
int rg_wuids_note(rg_wuids *u, uint64_t uid_max, uint64_t key);
void rg_wuids_free(rg_wuids *u);

/* Merge OUT/.rg-worker-K (K < nw) of every directory OUT of dirs into OUT, with uids[K] the
 * workers' instances; RG_OK, or an error printed with prog (the workers' parts then stay). */
int rg_wmerge(const rg_wdirs *dirs, unsigned nw, rg_wuids *uids, const char *prog);

#endif /* RG_WMERGE_H */
