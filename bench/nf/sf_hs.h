/* sf_hs.h - the signature-matching (SF) workload's Hyperscan side, shared by
 * the rubikgen SF network function (rg_nf_sf.c) and the libnids SF peer
 * (../peers/nids_peer.c, NIDS_SF), so that both match with the same database,
 * the same flags and the same counting.
 *
 * Patterns: a text file, one pattern per line, pattern id = line number (from
 * 1); every line is a pattern (no comments: ids must stay line numbers), only
 * the line's "\n" is removed.  Compiled once per process in STREAMING mode
 * with HS_FLAG_DOTALL | HS_FLAG_MULTILINE on every pattern: "." also matches
 * "\n", and "^"/"$" match at line starts and ends (a header line is a line
 * anywhere in a stream), besides the stream's start and end.
 *
 * One Hyperscan stream per flow direction: opened at its first chunk,
 * scanned with every chunk delivered in that direction, closed when the flow
 * ends (hs_close_stream reports the matches that need the end of the data,
 * e.g. "$").  Streaming makes the matches independent of how the payload is
 * cut into chunks, so two reassemblers that deliver the same bytes report
 * the same matches.  Every match report counts (Hyperscan reports each end
 * offset at which a pattern matches, once per pattern). */
#ifndef BENCH_SF_HS_H
#define BENCH_SF_HS_H

#include <hs.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The compiled patterns and the scratch space of this (single-threaded)
 * process. */
typedef struct sf_db {
    hs_database_t *db;
    hs_scratch_t *scratch;
    unsigned n; /* patterns; ids 1..n */
} sf_db;

/* Load and compile the pattern file; 0 on success, -1 with a message in err. */
int sf_db_load(sf_db *d, const char *path, char *err, size_t errlen);
void sf_db_free(sf_db *d);

/* What one pass matched. */
typedef struct sf_counts {
    uint64_t matches; /* match reports, all patterns */
    uint64_t streams; /* Hyperscan streams opened (flow directions with data) */
    uint64_t chunks;  /* hs_scan_stream calls */
    uint64_t bytes;   /* bytes scanned */
    uint64_t errors;  /* Hyperscan calls that failed */
    unsigned n;
    uint64_t *by_id; /* by_id[id - 1]: match reports of pattern id */
} sf_counts;

/* 0, or -1 when out of memory. */
int sf_counts_init(sf_counts *c, unsigned n);
void sf_counts_free(sf_counts *c);
int sf_counts_equal(const sf_counts *a, const sf_counts *b);
/* Copy src into dst (same n). */
void sf_counts_copy(sf_counts *dst, const sf_counts *src);
/* Every count back to 0. */
void sf_counts_reset(sf_counts *c);
/* Patterns that matched at least once. */
unsigned sf_counts_patterns_hit(const sf_counts *c);

/* Scan one chunk of a flow direction whose stream is *s (NULL: not opened
 * yet, opened here). */
void sf_scan(const sf_db *d, hs_stream_t **s, const uint8_t *data, size_t len, sf_counts *c);
/* End a flow direction's stream (nothing if *s is NULL); *s becomes NULL. */
void sf_close(const sf_db *d, hs_stream_t **s, sf_counts *c);

/* The JSON fields of a run, each preceded by a comma:
 *   ,"sf_matches":N,"sf_patterns":n,"sf_patterns_hit":k,
 *    "sf_pattern_matches":[count of id 1, id 2, ...],
 *    "sf_streams":..,"sf_chunks":..,"sf_scanned_bytes":..,"sf_errors":..,
 *    "sf_consistent": every pass counted the same,"sf_pattern_file":path */
void sf_counts_json(FILE *out, const sf_counts *c, int consistent, const char *pattern_file);

#endif /* BENCH_SF_HS_H */
