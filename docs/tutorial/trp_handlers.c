/* The tutorial's handlers for trp_stack (docs/tutorial.md, step 12): the stub that
 * `rubikgen build docs/tutorial/trp_stack.yaml` writes, filled in to print one line per call. */
#include <stdio.h>

#include "trp_stack_gen.h"

/* trp_stack.yaml:16, layer trp: conn (uint16_t), data (rg_bytes), to_server (uint8_t) */
void trp_data(const struct trp_data_args *args, rg_hctx *h)
{
    (void)h;
    printf("conn %u %s %zu bytes: %.*s\n", (unsigned)args->conn,
           args->to_server ? "client->server" : "server->client", args->data.len,
           (int)args->data.len, (const char *)args->data.ptr);
}

/* trp.yaml:76 callback trp_open, layer trp: conn (uint16_t), client (rg_bytes), mss (uint16_t) */
void trp_open(const struct trp_open_args *args, rg_hctx *h)
{
    (void)h;
    const uint8_t *a = args->client.ptr;
    if (args->client.len == 4)
        printf("conn %u opened by %u.%u.%u.%u, mss %u\n", (unsigned)args->conn, a[0], a[1], a[2],
               a[3], (unsigned)args->mss);
}

/* trp.yaml:82 callback trp_rexmit, layer trp: conn (uint16_t), seq (uint32_t), len (uint16_t) */
void trp_rexmit(const struct trp_rexmit_args *args, rg_hctx *h)
{
    (void)h;
    printf("conn %u resent %u bytes at offset %u\n", (unsigned)args->conn, (unsigned)args->len,
           (unsigned)args->seq);
}
