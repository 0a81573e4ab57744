/* sf_hs.c - Hyperscan database, streams and counts of the SF workload: see
 * sf_hs.h. */
#include "sf_hs.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_json.h"

enum { SF_MAX_PATTERNS = 1024 };

int sf_db_load(sf_db *d, const char *path, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *expr[SF_MAX_PATTERNS];
    unsigned flags[SF_MAX_PATTERNS], ids[SF_MAX_PATTERNS], n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (n == SF_MAX_PATTERNS || !len) {
            /* an empty line would shift the ids of the lines after it */
            snprintf(err, errlen, "%s:%u: %s", path, n + 1,
                     len ? "too many patterns" : "empty line (one pattern per line)");
            rc = -1;
            break;
        }
        expr[n] = strdup(line);
        if (!expr[n]) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        flags[n] = HS_FLAG_DOTALL | HS_FLAG_MULTILINE;
        ids[n] = n + 1; /* the line number */
        n++;
    }
    free(line);
    if (!rc && ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        rc = -1;
    }
    fclose(f);
    if (!rc && !n) {
        snprintf(err, errlen, "%s: no patterns", path);
        rc = -1;
    }
    if (!rc) {
        hs_compile_error_t *ce = NULL;
        if (hs_compile_multi((const char *const *)expr, flags, ids, n, HS_MODE_STREAM, NULL, &d->db,
                             &ce) != HS_SUCCESS) {
            if (ce && ce->expression >= 0)
                snprintf(err, errlen, "%s:%d: %s", path, ce->expression + 1, ce->message);
            else
                snprintf(err, errlen, "%s: %s", path, ce ? ce->message : "compile failed");
            hs_free_compile_error(ce);
            d->db = NULL;
            rc = -1;
        } else if (hs_alloc_scratch(d->db, &d->scratch) != HS_SUCCESS) {
            snprintf(err, errlen, "hs_alloc_scratch failed");
            rc = -1;
        }
    }
    for (unsigned i = 0; i < n; i++)
        free(expr[i]);
    if (rc) {
        sf_db_free(d);
        return -1;
    }
    d->n = n;
    return 0;
}

void sf_db_free(sf_db *d)
{
    hs_free_scratch(d->scratch);
    hs_free_database(d->db);
    memset(d, 0, sizeof *d);
}

int sf_counts_init(sf_counts *c, unsigned n)
{
    memset(c, 0, sizeof *c);
    c->by_id = calloc(n ? n : 1, sizeof *c->by_id);
    c->n = n;
    return c->by_id ? 0 : -1;
}

void sf_counts_free(sf_counts *c)
{
    free(c->by_id);
    memset(c, 0, sizeof *c);
}

int sf_counts_equal(const sf_counts *a, const sf_counts *b)
{
    return a->matches == b->matches && a->streams == b->streams && a->chunks == b->chunks &&
           a->bytes == b->bytes && a->errors == b->errors && a->n == b->n &&
           !memcmp(a->by_id, b->by_id, a->n * sizeof *a->by_id);
}

void sf_counts_copy(sf_counts *dst, const sf_counts *src)
{
    uint64_t *keep = dst->by_id;
    *dst = *src;
    dst->by_id = keep;
    memcpy(dst->by_id, src->by_id, src->n * sizeof *src->by_id);
}

void sf_counts_reset(sf_counts *c)
{
    uint64_t *keep = c->by_id;
    unsigned n = c->n;
    memset(c, 0, sizeof *c);
    c->by_id = keep;
    c->n = n;
    memset(c->by_id, 0, n * sizeof *c->by_id);
}

unsigned sf_counts_patterns_hit(const sf_counts *c)
{
    unsigned k = 0;
    for (unsigned i = 0; i < c->n; i++)
        k += c->by_id[i] != 0;
    return k;
}

/* Hyperscan's match callback: count the report; 0 = go on scanning. */
static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
                    void *ctx)
{
    (void)from;
    (void)to;
    (void)flags;
    sf_counts *c = ctx;
    c->matches++;
    if (id - 1 < c->n) c->by_id[id - 1]++;
    return 0;
}

void sf_scan(const sf_db *d, hs_stream_t **s, const uint8_t *data, size_t len, sf_counts *c)
{
    if (!*s) {
        if (hs_open_stream(d->db, 0, s) != HS_SUCCESS) {
            *s = NULL;
            c->errors++;
            return;
        }
        c->streams++;
    }
    c->chunks++;
    c->bytes += len;
    /* hs_scan_stream takes an unsigned int length */
    while (len) {
        unsigned part = len > UINT_MAX ? UINT_MAX : (unsigned)len;
        if (hs_scan_stream(*s, (const char *)data, part, 0, d->scratch, on_match, c) != HS_SUCCESS)
            c->errors++;
        data += part;
        len -= part;
    }
}

void sf_close(const sf_db *d, hs_stream_t **s, sf_counts *c)
{
    if (!*s) return;
    if (hs_close_stream(*s, d->scratch, on_match, c) != HS_SUCCESS) c->errors++;
    *s = NULL;
}

void sf_counts_json(FILE *out, const sf_counts *c, int consistent, const char *pattern_file)
{
    fprintf(out, ",\"sf_matches\":%" PRIu64 ",\"sf_patterns\":%u,\"sf_patterns_hit\":%u",
            c->matches, c->n, sf_counts_patterns_hit(c));
    fputs(",\"sf_pattern_matches\":[", out);
    for (unsigned i = 0; i < c->n; i++)
        fprintf(out, "%s%" PRIu64, i ? "," : "", c->by_id[i]);
    fprintf(out,
            "],\"sf_streams\":%" PRIu64 ",\"sf_chunks\":%" PRIu64 ",\"sf_scanned_bytes\":%" PRIu64
            ",\"sf_errors\":%" PRIu64 ",\"sf_consistent\":%s,\"sf_pattern_file\":",
            c->streams, c->chunks, c->bytes, c->errors, consistent ? "true" : "false");
    rg_json_string(out, pattern_file);
}
