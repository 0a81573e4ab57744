/* rg_write.c - --write OUT.pcap: the packets that pass, after the stack ran
 * (so edits made in the frame by handlers are written), in input order.  The
 * offline twin of inline forwarding: try a drop or rewrite on a capture
 * before putting it on a link. */
#include <errno.h>
#include <inttypes.h>
#include <pcap/pcap.h>
#include <string.h>

#include "rg_driver.h"

int rg_writer_open(rg_writer *w, const char *path, int dlt, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    w->dlt = dlt;
    /* nanosecond pcap: the frames' timestamps are written as read (tshark,
     * tcpreplay and libpcap >= 1.5 read it) */
    w->dead = pcap_open_dead_with_tstamp_precision(dlt, 262144, PCAP_TSTAMP_PRECISION_NANO);
    if (!w->dead) {
        snprintf(err, errlen, "--write %s: out of memory", path);
        return RG_ENOMEM;
    }
    w->d = pcap_dump_open(w->dead, path);
    if (!w->d) {
        snprintf(err, errlen, "--write %s: %s", path, pcap_geterr(w->dead));
        pcap_close(w->dead);
        w->dead = NULL;
        return RG_EIO;
    }
    return RG_OK;
}

void rg_writer_put(rg_writer *w, const rg_frame *f)
{
    if (f->dlt != w->dlt) {
        /* a pcap file has one link type: frames of another (pcapng inputs
         * with several interfaces) cannot be written to it */
        w->other_link++;
        return;
    }
    struct pcap_pkthdr h;
    h.ts.tv_sec = (time_t)(f->ts_ns / NS_PER_S);
    h.ts.tv_usec = (suseconds_t)(f->ts_ns % NS_PER_S); /* nanoseconds: see rg_writer_open */
    h.caplen = f->caplen;
    h.len = f->len < f->caplen ? f->caplen : f->len;
    pcap_dump((u_char *)w->d, &h, f->data);
    w->written++;
}

void rg_writer_put_reply(rg_writer *w, const rg_frame *f)
{
    uint64_t n = w->written;
    rg_writer_put(w, f);
    if (w->written != n) { /* "written" counts the packets that passed */
        w->written = n;
        w->replies++;
    }
}

int rg_writer_close(rg_writer *w, const char *prog)
{
    if (!w->d) return RG_OK;
    int rc = RG_OK;
    if (pcap_dump_flush(w->d) != 0 || ferror(pcap_dump_file(w->d))) {
        fprintf(stderr, "%s: --write %s: %s\n", prog, w->path, strerror(errno ? errno : EIO));
        rc = RG_EIO;
    }
    pcap_dump_close(w->d);
    pcap_close(w->dead);
    w->d = NULL;
    w->dead = NULL;
    if (w->other_link)
        fprintf(stderr,
                "%s: --write %s: %" PRIu64 " passed frames of another link type than the "
                "first (%d) not written\n",
                prog, w->path, w->other_link, w->dlt);
    return rc;
}
