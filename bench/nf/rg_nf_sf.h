/* rg_nf_sf.h - the signature-matching (SF) network function of the benchmark.
 *
 * An observer (rg_obs, see rg_api.h) like the stock NFs of handlers/nf, kept
 * out of them (and out of librgnf.a) because it needs Hyperscan: only the SF
 * benchmark binaries link it (bench/Makefile, `make sf`).
 *
 * It feeds the "data" argument (the first RG_VAL_BYTES argument named
 * "data") of every handler call that has an instance to that instance's
 * Hyperscan stream for the call's direction (sf_hs.h: opened on the first
 * chunk, closed when the instance closes), and counts the matches.  Calls
 * without an instance have no stream to continue: they are counted
 * (noflow_calls) and not scanned; the benchmark stacks deliver TCP data with
 * an instance only. */
#ifndef BENCH_RG_NF_SF_H
#define BENCH_RG_NF_SF_H

#include "rg/rg_api.h"
#include "sf_hs.h"

typedef struct rg_nf_sf rg_nf_sf;

/* A fresh NF for stack matching with db (which must outlive it); NULL with a
 * message in err. */
rg_nf_sf *rg_nf_sf_new(const rg_stack_desc *stack, const sf_db *db, char *err, size_t errlen);

/* The observer to attach to a stack context (valid while the NF lives). */
const rg_obs *rg_nf_sf_obs(rg_nf_sf *nf);

/* Close the streams of instances that have not closed (a context freed
 * without a flush); after a flush there are none. */
void rg_nf_sf_end(rg_nf_sf *nf);

/* The counts so far. */
const sf_counts *rg_nf_sf_counts(const rg_nf_sf *nf);
/* Data calls without an instance (not scanned). */
uint64_t rg_nf_sf_noflow_calls(const rg_nf_sf *nf);

void rg_nf_sf_free(rg_nf_sf *nf);

#endif /* BENCH_RG_NF_SF_H */
