/* fuzz_control.c - libFuzzer harness for the control socket's request parser
 * (main/rg_ctlsec.c, rg_ctlreq_parse): the input is what a client sends, cut at its first
 * newline as rg_control.c's reader does (up to the request bound and one byte more); every
 * field of an accepted request must lie inside the line, and attach's parameters must be
 * KEY=VALUE, and trace's N and timeout within their bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../main/rg_ctlsec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char line[RG_CTLREQ_MAX + 1];
    size_t n = size > RG_CTLREQ_MAX ? RG_CTLREQ_MAX : size;
    const uint8_t *nl = memchr(data, '\n', n);
    if (nl) n = (size_t)(nl - data);
    memcpy(line, data, n);
    line[n] = 0;
    rg_ctlreq r;
    char err[512];
    if (rg_ctlreq_parse(line, n, &r, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err)) abort(); /* a message, terminated */
        return 0;
    }
    if (r.n == 0 || r.n > RG_CTLREQ_FIELDS) abort();
    for (unsigned i = 0; i < r.n; i++) {
        if (r.f[i] < line || r.f[i] + strlen(r.f[i]) > line + n) abort();
        if (!strcmp(r.f[0], "attach") && i >= 3 && (!strchr(r.f[i], '=') || r.f[i][0] == '='))
            abort();
    }
    if (!strcmp(r.f[0], "trace")) { /* accepted: N packets and the wait in their bounds */
        unsigned count = 0, ms = 0;
        if (rg_trace_args(r.f, r.n, &count, &ms, err, sizeof err) || count < 1 ||
            count > RG_TRACE_PKTS_MAX || ms < 1000 || ms > RG_TRACE_TIMEOUT_MAX * 1000u)
            abort();
    }
    return 0;
}
