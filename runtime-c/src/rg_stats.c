/* rg_stats.c - runtime counters: allocation, totals, printing. */
#include "rg/rg_stats.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_json.h"

static const char *const default_reason[RG_REASON_USER] = {
    "truncated", "malformed", "unsupported", "no_instance", "cap", "psm_fail", "checksum", "other",
};

rg_stats *rg_stats_new(uint32_t nlayers, const char *const *names)
{
    rg_stats *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->layer = calloc(nlayers ? nlayers : 1, sizeof *s->layer);
    if (!s->layer) {
        free(s);
        return NULL;
    }
    s->nlayers = nlayers;
    for (uint32_t i = 0; i < nlayers; i++)
        s->layer[i].name = names ? names[i] : NULL;
    for (unsigned r = 0; r < RG_REASON_USER; r++)
        s->reason_name[r] = default_reason[r];
    return s;
}

static void add_layer(rg_layer_stats *a, const rg_layer_stats *b)
{
    a->packets += b->packets;
    a->bytes += b->bytes;
    a->errors += b->errors;
    for (unsigned r = 0; r < RG_REASON_MAX; r++)
        a->error[r] += b->error[r];
    a->events += b->events;
    const uint64_t rec = a->inst.record_bytes; /* the same in every worker: not a count */
    uint64_t *ai = &a->inst.live;
    const uint64_t *bi = &b->inst.live;
    for (size_t k = 0; k < sizeof a->inst / sizeof(uint64_t); k++)
        ai[k] += bi[k];
    a->inst.record_bytes = rec;
    uint64_t *as = &a->seq.inserts;
    const uint64_t *bs = &b->seq.inserts;
    for (size_t k = 0; k < sizeof a->seq / sizeof(uint64_t); k++)
        as[k] += bs[k];
    a->dropped_by_verdict += b->dropped_by_verdict;
    a->bypassed += b->bypassed;
    a->checksum_bad += b->checksum_bad;
    a->transient += b->transient;
    a->late += b->late;
    a->lingering += b->lingering;
    uint64_t *am = &a->mem.seq_bytes;
    const uint64_t *bm = &b->mem.seq_bytes;
    for (size_t k = 0; k < sizeof a->mem / sizeof(uint64_t); k++)
        am[k] += bm[k];
}

/* the counter structs are arrays of uint64_t (what add_layer walks) */
_Static_assert(sizeof(rg_inst_stats) % sizeof(uint64_t) == 0, "rg_inst_stats: uint64_t only");
_Static_assert(sizeof(rg_seq_stats) % sizeof(uint64_t) == 0, "rg_seq_stats: uint64_t only");
_Static_assert(sizeof(rg_mem_stats) % sizeof(uint64_t) == 0, "rg_mem_stats: uint64_t only");

void rg_stats_add(rg_stats *into, const rg_stats *from)
{
    if (!into || !from) return;
    into->packets += from->packets;
    into->bytes += from->bytes;
    into->clock_jumps_fwd += from->clock_jumps_fwd;
    into->clock_jumps_back += from->clock_jumps_back;
    into->clock_resyncs += from->clock_resyncs;
    for (uint32_t i = 0; i < into->nlayers && i < from->nlayers; i++)
        add_layer(&into->layer[i], &from->layer[i]);
    into->mem_seq_peak += from->mem_seq_peak;
    into->mem_flow_peak += from->mem_flow_peak;
}

void rg_stats_free(rg_stats *s)
{
    if (!s) return;
    free(s->layer);
    free(s);
}

void rg_stats_reset(rg_stats *s)
{
    s->packets = 0;
    s->bytes = 0;
    s->clock_jumps_fwd = s->clock_jumps_back = s->clock_resyncs = 0;
    for (uint32_t i = 0; i < s->nlayers; i++) {
        const char *name = s->layer[i].name;
        memset(&s->layer[i], 0, sizeof s->layer[i]);
        s->layer[i].name = name;
    }
}

void rg_stats_set_reason_name(rg_stats *s, unsigned reason, const char *name)
{
    if (reason < RG_REASON_MAX) s->reason_name[reason] = name;
}

const char *rg_stats_reason_name(const rg_stats *s, unsigned reason)
{
    if (reason >= RG_REASON_MAX) return "invalid";
    return s->reason_name[reason] ? s->reason_name[reason] : "user";
}

void rg_stats_sum_inst(const rg_stats *s, rg_inst_stats *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < s->nlayers; i++) {
        const rg_inst_stats *l = &s->layer[i].inst;
        out->live += l->live;
        out->peak_live += l->peak_live;
        out->created += l->created;
        out->destroyed += l->destroyed;
        out->evicted += l->evicted;
        out->expired += l->expired;
        out->create_failed += l->create_failed;
    }
}

uint64_t rg_stats_total_errors(const rg_stats *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->nlayers; i++)
        n += s->layer[i].errors;
    return n;
}

static void layer_name(const rg_stats *s, uint32_t i, char *buf, size_t n)
{
    if (s->layer[i].name)
        snprintf(buf, n, "%s", s->layer[i].name);
    else
        snprintf(buf, n, "layer%" PRIu32, i);
}

#define PR(label, v)                                                                               \
    do {                                                                                           \
        if (v) fprintf(out, "  %-10s %-22s %" PRIu64 "\n", name, label, (uint64_t)(v));            \
    } while (0)

void rg_stats_print(const rg_stats *s, FILE *out)
{
    fprintf(out, "packets %" PRIu64 " bytes %" PRIu64 "\n", s->packets, s->bytes);
    if (s->clock_jumps_fwd || s->clock_jumps_back)
        fprintf(out, "clock_jumps forward %" PRIu64 " backward %" PRIu64 "\n", s->clock_jumps_fwd,
                s->clock_jumps_back);
    if (s->clock_resyncs) fprintf(out, "clock_resyncs %" PRIu64 "\n", s->clock_resyncs);
    for (uint32_t i = 0; i < s->nlayers; i++) {
        const rg_layer_stats *l = &s->layer[i];
        char name[64];
        layer_name(s, i, name, sizeof name);
        PR("packets", l->packets);
        PR("bytes", l->bytes);
        PR("events", l->events);
        for (unsigned r = 0; r < RG_REASON_MAX; r++) {
            char label[64];
            snprintf(label, sizeof label, "error.%s", rg_stats_reason_name(s, r));
            PR(label, l->error[r]);
        }
        PR("inst.live", l->inst.live);
        PR("inst.peak_live", l->inst.peak_live);
        PR("inst.created", l->inst.created);
        PR("inst.destroyed", l->inst.destroyed);
        PR("inst.evicted", l->inst.evicted);
        PR("inst.expired", l->inst.expired);
        PR("inst.create_failed", l->inst.create_failed);
        PR("seq.inserts", l->seq.inserts);
        PR("seq.rexmit", l->seq.rexmit);
        PR("seq.overlap", l->seq.overlap);
        PR("seq.out_of_window", l->seq.out_of_window);
        PR("seq.buffer_full", l->seq.buffer_full);
        PR("seq.conflict", l->seq.conflict);
        PR("seq.bytes_new", l->seq.bytes_new);
        PR("seq.bytes_dup", l->seq.bytes_dup);
        PR("seq.bytes_dropped", l->seq.bytes_dropped);
        PR("seq.bytes_skipped", l->seq.bytes_skipped);
        PR("seq.bytes_delivered", l->seq.bytes_delivered);
        PR("dropped_by_verdict", l->dropped_by_verdict);
        PR("bypassed", l->bypassed);
        PR("checksum_bad", l->checksum_bad);
    }
}
#undef PR

#define JU(key, v) fprintf(out, "%s\"%s\":%" PRIu64, first++ ? "," : "", key, (uint64_t)(v))

void rg_stats_json(const rg_stats *s, FILE *out)
{
    rg_inst_stats tot;
    rg_stats_sum_inst(s, &tot);
    fprintf(out, "{\"packets\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"errors\":%" PRIu64, s->packets,
            s->bytes, rg_stats_total_errors(s));
    fprintf(out, ",\"clock_jumps\":{\"forward\":%" PRIu64 ",\"backward\":%" PRIu64 "}",
            s->clock_jumps_fwd, s->clock_jumps_back);
    fprintf(out, ",\"clock_resyncs\":%" PRIu64, s->clock_resyncs);
    fprintf(out,
            ",\"instances\":{\"live\":%" PRIu64 ",\"created\":%" PRIu64 ",\"destroyed\":%" PRIu64
            ",\"evicted\":%" PRIu64 ",\"expired\":%" PRIu64 "}",
            tot.live, tot.created, tot.destroyed, tot.evicted, tot.expired);
    fputs(",\"layers\":[", out);
    for (uint32_t i = 0; i < s->nlayers; i++) {
        const rg_layer_stats *l = &s->layer[i];
        char name[64];
        int first = 0;
        layer_name(s, i, name, sizeof name);
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        rg_json_string(out, name);
        first = 1;
        JU("packets", l->packets);
        JU("bytes", l->bytes);
        JU("events", l->events);
        JU("errors", l->errors);
        fputs(",\"error\":{", out);
        int ef = 0;
        for (unsigned r = 0; r < RG_REASON_MAX; r++) {
            if (!l->error[r]) continue;
            if (ef++) fputc(',', out);
            rg_json_string(out, rg_stats_reason_name(s, r));
            fprintf(out, ":%" PRIu64, l->error[r]);
        }
        fputc('}', out);
        fputs(",\"inst\":{", out);
        first = 0;
        JU("live", l->inst.live);
        JU("peak_live", l->inst.peak_live);
        JU("created", l->inst.created);
        JU("destroyed", l->inst.destroyed);
        JU("evicted", l->inst.evicted);
        JU("expired", l->inst.expired);
        JU("create_failed", l->inst.create_failed);
        fputs("},\"seq\":{", out);
        first = 0;
        JU("inserts", l->seq.inserts);
        JU("rexmit", l->seq.rexmit);
        JU("overlap", l->seq.overlap);
        JU("out_of_window", l->seq.out_of_window);
        JU("buffer_full", l->seq.buffer_full);
        JU("conflict", l->seq.conflict);
        JU("bytes_new", l->seq.bytes_new);
        JU("bytes_dup", l->seq.bytes_dup);
        JU("bytes_dropped", l->seq.bytes_dropped);
        JU("bytes_skipped", l->seq.bytes_skipped);
        JU("bytes_delivered", l->seq.bytes_delivered);
        fputc('}', out);
        first = 1;
        JU("dropped_by_verdict", l->dropped_by_verdict);
        JU("bypassed", l->bypassed);
        fputc('}', out);
    }
    fputs("]}", out);
}
#undef JU
