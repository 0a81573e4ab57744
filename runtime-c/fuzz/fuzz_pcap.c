/* fuzz_pcap.c - libFuzzer harness for the capture reader (rg_pcap.c): pcap through libpcap,
 * pcapng through rubikgen's own reader.  The input is the file: written to a temporary file
 * (rg_pcap_open takes a path, as the driver does), then read to its end; every frame's bytes are
 * read (caplen must not overstate the buffer) and located (rg_link_locate). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rg/rg.h"

static char path[64];
static volatile uint64_t sink;

static void setup(void)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/rg-fuzz-pcap-XXXXXX", dir && strlen(dir) < 32 ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
}

static void cleanup(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        setup();
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    char err[256];
    rg_pcap *c = rg_pcap_open(path, err, sizeof err);
    if (!c) return 0;
    const rg_linkinfo *li = rg_pcap_link(c);
    (void)rg_pcap_snaplen(c);
    rg_frame fr;
    int rc;
    uint64_t n = 0;
    while ((rc = rg_pcap_next(c, &fr)) == 1 && n++ < 100000) {
        uint64_t s = fr.ts_ns;
        for (uint32_t k = 0; k < fr.caplen; k++)
            s += fr.data[k];
        rg_linkinfo fl;
        if (rg_link_info(fr.dlt, &fl) == RG_OK) {
            rg_netpos np;
            if (rg_link_locate(&fl, fr.data, fr.caplen, &np) == RG_OK) s += np.off;
        }
        sink += s;
    }
    if (rc < 0) sink += strlen(rg_pcap_error(c));
    (void)li;
    rg_pcap_close(c);
    return 0;
}
