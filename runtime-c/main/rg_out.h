/* rg_out.h - the NFs' line outputs (rg_out.c): one file per output whatever the number of
 * workers, written record by record while the run goes on, rotated (--rotate) and reopened
 * (SIGHUP, `rubikgen ctl SOCK reopen`).  Private to runtime-c/main/; NFs reach it through
 * rg_nf_host.out_open / out_write / out_close (rg_nf_api.h, ABI minor 1).
 *
 * Every opener of one path (the NF instances of every worker) shares one file: the first
 * open creates it (truncated, as one context's fopen did), each record is written whole
 * with one write() on an O_APPEND descriptor under the file's lock, so lines of several
 * workers never interleave and a line on disk is complete (a SIGKILL loses the records not
 * yet written, never half of one).  The last close closes the file. */
#ifndef RG_OUT_H
#define RG_OUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct rg_out rg_out;

enum {
    RG_OUT_TAG = 1,    /* add "worker":K to flow records (rg_out_write) */
    RG_OUT_APPEND = 2, /* the first open appends to what the file holds (else: emptied) */
};
/* Open path for a writer (worker: its worker; flags: RG_OUT_*).  A component ".rg-worker-K" of
 * path (an NF's per-worker out directory) is dropped: every worker's NF writes the one file.
 * NULL with a message in err. */
rg_out *rg_out_open(const char *path, unsigned worker, int flags, char *err, size_t errlen);
/* One record: rec[0..len) is one or more whole lines (a newline is added when the last has
 * none).  With tag, each line that is a JSON object with a top-level numeric "uid" or "flow"
 * member gets ,"worker":K as its last member.  RG_OK, or RG_EIO (errno set). */
int rg_out_write(rg_out *o, const char *rec, size_t len);
/* RG_OK, or RG_EIO when a write had failed (message in err). */
int rg_out_close(rg_out *o, char *err, size_t errlen);

/* --rotate SIZE|TIME: "100M", "10K", "1G", "5000" (bytes: a file is renamed before the
 * record that would take it past SIZE) or "30s", "10min", "1h", "1d" (a file is renamed
 * before its first record once it is that old).  Repeatable (one of each kind).  RG_OK or
 * RG_EINVAL with the reason in err. */
int rg_out_rotate_option(const char *arg, char *err, size_t errlen);
/* Reopen every output at its next record (async-signal-safe: SIGHUP). */
void rg_out_reopen_later(void);
/* Reopen every output now (ctl reopen): the number reopened, or -1 with the first error in
 * err (the others are reopened all the same). */
int rg_out_reopen_all(char *err, size_t errlen);

/* The line s[0..n) (no newline) with ,"worker":K appended when it is a flow record (see
 * rg_out_write), into a buffer the caller frees: the merge of legacy NFs' files uses it. */
char *rg_out_tag_line(const char *s, size_t n, unsigned worker, size_t *outlen);

#endif /* RG_OUT_H */
