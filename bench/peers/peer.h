/* peer.h - the common harness of the benchmark peers (bench/peers/).
 *
 * A peer is a program `PEER CAPTURE --passes N [--fork] [--cap N]
 * [--patterns FILE]` that loads the whole capture into memory first
 * (rg_capture_load), then runs N passes over it, each from a fresh state, and
 * prints ONE JSON line in the format of the rubikgen stack binaries' `--bench`
 * mode:
 *
 *   {"peer","pkts","passes","cpu_ns_per_pkt","wall_ns_per_pkt",
 *    "payload_bytes","flows_opened","flows_closed", ...extra counters,
 *    "mode": "in-process" | "fork", "consistent": bool}
 *
 * cpu_ns_per_pkt / wall_ns_per_pkt are the best pass (CLOCK_THREAD_CPUTIME_ID
 * and CLOCK_MONOTONIC read around the processing loop only: set-up and
 * tear-down of each pass are outside).  The counters are those of the last
 * pass; "consistent" says whether every pass produced the same counters.
 *
 * Each pass reads the clocks exactly like rg_driver.c's --bench does (CPU,
 * wall, loop, CPU, wall) and no other code of a pass calls clock_gettime, so
 * `valgrind --tool=callgrind --dump-before=clock_gettime*` splits every
 * program the same way: dump part 4k+3 holds the loop of pass k (from 0).
 * bench/run.py --callgrind relies on it. */
#ifndef BENCH_PEER_H
#define BENCH_PEER_H

#include <stdint.h>
#include <stdio.h>

#include "rg/rg_pcap.h"

#define PEER_MAX_COUNTERS 24

/* Counters a pass reports: a name and a value each, printed in order. */
typedef struct peer_counts {
    unsigned n;
    const char *name[PEER_MAX_COUNTERS];
    uint64_t value[PEER_MAX_COUNTERS];
} peer_counts;

/* Set (or add) a counter. */
void peer_count_set(peer_counts *c, const char *name, uint64_t value);

typedef struct peer_opts {
    uint64_t cap;         /* --cap N: table size hint (0 = the peer's default) */
    const char *patterns; /* --patterns FILE (peers with patterns_default only) */
    uint64_t burst;       /* --burst N: frames per burst (parse peers; default 32) */
} peer_opts;

typedef struct peer_ops {
    const char *name;
    /* once, after loading: prepare what every pass shares (untimed); 0 = OK */
    int (*prepare)(const rg_capture *cap, const peer_opts *o);
    /* start of a pass: a fresh state (untimed); 0 = OK */
    int (*setup)(const rg_capture *cap, const peer_opts *o);
    /* the timed loop: every frame of the capture, in order */
    void (*run)(const rg_capture *cap);
    /* end of a pass: report and release (untimed) */
    void (*teardown)(peer_counts *out);
    /* optional: more JSON fields (each preceded by a comma) after the
     * counters of the last pass.  They come from the peer's own state, which
     * a --fork pass does not bring back: such peers refuse --fork. */
    void (*extra_json)(FILE *out);
    /* the default of --patterns; NULL: the peer takes no --patterns */
    const char *patterns_default;
} peer_ops;

/* Parse the command line, load the capture, run the passes, print the JSON
 * line.  Returns the process exit status. */
int peer_main(int argc, char **argv, const peer_ops *ops);

#endif /* BENCH_PEER_H */
