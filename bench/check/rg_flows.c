/* rg_flows.c - the correctness side of the benchmark: what a generated stack
 * delivers and how its flows end, per layer.
 *
 * Built by bench/run.py (`make -C bench flows STACK=S STACK_DIR=DIR`) against
 * one generated stack (DIR/S_gen.c, DIR/S_handlers.c; -DRG_STACK_DESC=S_desc)
 * into DIR/S-flows.  `DIR/S-flows CAPTURE` feeds the capture exactly as the
 * driver's --bench mode does (whole capture in memory, idle expiry on packet
 * time once per second of it, the same entry layer per link type, a final
 * flush) with an observer that counts, per layer with instances, the
 * instances opened, how each one ended (accept = its PSM reached an accept
 * state, i.e. for TCP a FIN/ACK close or a RST; evicted; expired; flushed at
 * the end of the capture), how many were complete, and the bytes of the
 * "data" arguments of the layer's handler calls.  One JSON line:
 *
 *   {"stack","pkts","calls","payload_bytes","errors","skipped",
 *    "layers":{"tcp":{"opened","accept","evicted","expired","flushed",
 *                     "complete","payload_bytes"}, ...}}
 *
 * The --bench output only has totals over every layer (an IPv4 datagram is an
 * instance too, and the flush closes whatever is left), so it cannot tell a
 * TCP connection that closed from one that was flushed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_api.h"
#include "rg/rg_entry.h"
#include "rg/rg_json.h"
#include "rg/rg_obs.h"
#include "rg/rg_pcap.h"

#ifndef RG_STACK_DESC
#error "compile with -DRG_STACK_DESC=<stack>_desc"
#endif
extern const rg_stack_desc RG_STACK_DESC;

#define NS_PER_S UINT64_C(1000000000)

typedef struct layer_counts {
    uint64_t opened, closed[4], complete, payload;
} layer_counts;

typedef struct checker {
    const rg_stack_desc *stack;
    layer_counts *layer;
    int16_t *data_arg; /* per handler: index of its "data" bytes argument, or -1 (rg_obs.h) */
    uint64_t calls, payload;
} checker;

static void on_call(void *self, const rg_call *c)
{
    checker *k = self;
    k->calls++;
    int a = k->data_arg[c->handler];
    if (a >= 0 && c->args[a].kind == RG_VAL_BYTES) {
        k->payload += c->args[a].bytes.len;
        k->layer[c->layer].payload += c->args[a].bytes.len;
    }
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    (void)ts_ns;
    ((checker *)self)->layer[f->layer].opened++;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)ts_ns;
    layer_counts *l = &((checker *)self)->layer[f->layer];
    if (reason >= 0 && reason < 4) l->closed[reason]++;
    if (complete) l->complete++;
}

int main(int argc, char **argv)
{
    const rg_stack_desc *s = &RG_STACK_DESC;
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s CAPTURE\nPer-layer flow and payload counts of stack %s.\n",
                argv[0], s->name);
        return 2;
    }
    char err[512];
    rg_capture cap;
    if (rg_capture_load(argv[1], &cap, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    rg_entry_links lm; /* the driver's entry map (rg_entry.h) */
    if (rg_entry_links_init(&lm, s, &cap.link) ||
        (lm.m[0].fixed < 0 && lm.m[0].v4 < 0 && lm.m[0].v6 < 0)) {
        fprintf(stderr, "%s: stack %s has no entry for link type %d\n", argv[0], s->name,
                cap.link.dlt);
        rg_capture_free(&cap);
        return 1;
    }
    checker k = {s, calloc(s->nlayers, sizeof(layer_counts)), rg_obs_data_args(s), 0, 0};
    if (!k.layer || !k.data_arg) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    rg_obs obs = {.self = &k, .on_call = on_call, .on_open = on_open, .on_close = on_close};
    rg_ctx_cfg cfg = {.seed = 1, .obs = &obs};
    void *ctx = s->ctx_new(&cfg);
    if (!ctx) {
        fprintf(stderr, "%s: cannot create the stack context\n", argv[0]);
        return 1;
    }
    uint64_t next_expire = 0, skipped = 0;
    int expire_on = 0;
    for (size_t i = 0; i < cap.count; i++) {
        const rg_frame *f = &cap.frames[i];
        if (f->ts_ns >= next_expire) {
            if (expire_on) s->expire(ctx, f->ts_ns);
            expire_on = 1;
            next_expire = f->ts_ns + NS_PER_S;
        }
        unsigned layer;
        uint32_t off;
        int added, unsupported;
        if (!rg_entry_pick(rg_entry_of(&lm, f, &added, &unsupported), f, &layer, &off)) {
            skipped++;
            continue;
        }
        (void)s->process(ctx, layer, f->data + off, f->caplen - off, f->ts_ns);
    }
    s->flush(ctx);
    const rg_stats *st = s->stats ? s->stats(ctx) : NULL;
    uint64_t errors = st ? rg_stats_total_errors(st) : 0;

    printf("{\"stack\":");
    rg_json_string(stdout, s->name);
    printf(",\"pkts\":%zu,\"calls\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"skipped\":%" PRIu64 ",\"layers\":{",
           cap.count, k.calls, k.payload, errors, skipped);
    int first = 1;
    for (unsigned l = 0; l < s->nlayers; l++) {
        if (!s->layers[l].has_instance) continue;
        const layer_counts *c = &k.layer[l];
        printf("%s", first ? "" : ",");
        first = 0;
        rg_json_string(stdout, s->layers[l].name);
        printf(":{\"protocol\":");
        rg_json_string(stdout, s->layers[l].protocol);
        printf(",\"opened\":%" PRIu64 ",\"accept\":%" PRIu64 ",\"evicted\":%" PRIu64
               ",\"expired\":%" PRIu64 ",\"flushed\":%" PRIu64 ",\"complete\":%" PRIu64
               ",\"payload_bytes\":%" PRIu64 "}",
               c->opened, c->closed[RG_CLOSE_ACCEPT], c->closed[RG_CLOSE_EVICTED],
               c->closed[RG_CLOSE_EXPIRED], c->closed[RG_CLOSE_FLUSHED], c->complete, c->payload);
    }
    printf("}}\n");
    s->ctx_free(ctx);
    free(k.layer);
    free(k.data_arg);
    rg_capture_free(&cap);
    return 0;
}
