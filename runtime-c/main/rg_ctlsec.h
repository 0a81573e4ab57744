/* rg_ctlsec.h - who may use the control socket and what it may load (rg_ctlsec.c).
 *
 * - the socket's mode (default 0600) and group (--control-mode, --control-group);
 * - the peer check: SO_PEERCRED's uid is root, the process's own, or a member of the chosen
 *   group;
 * - one resolution rule for an NF's or a rule set's .so (rg_so_resolve): a path, relative ones
 *   relative to a base directory (the current one unless a chain file's), made absolute so
 *   dlopen never searches the library path;
 * - the trust check of what a control request loads (rg_so_trusted), before dlopen runs any
 *   constructor: a regular file under a --nf-path / --rules-path directory (default: the
 *   binary's own), it and every parent owned by root or the process's user and not writable
 *   by group or others;
 * - the request parser (rg_ctlreq_parse): bounded size and field count, known verbs only.
 * Private to runtime-c/main/. */
#ifndef RG_CTLSEC_H
#define RG_CTLSEC_H

#include <stddef.h>

enum {
    RG_CTLREQ_MAX = 8192,   /* bytes of a request line, its newline included */
    RG_CTLREQ_FIELDS = 67,  /* attach NF NAME and 64 KEY=VALUE */
    RG_CTL_TRUST_DIRS = 16, /* --nf-path / --rules-path directories of each kind */
};

/* The driver's options of this module (rg_opts.c): "control-mode", "control-group",
 * "nf-path", "rules-path"; 0, or -1 with a message in err. */
int rg_ctlsec_option(const char *name, const char *value, char *err, size_t errlen);

/* Give the bound socket at path its mode and group; 0 or -1 (err). */
int rg_ctlsec_socket(const char *path, char *err, size_t errlen);

/* May the peer of the accepted connection fd send requests? 1, or 0 with the reason (its
 * uid and pid) in why. */
int rg_ctlsec_peer_ok(int fd, char *why, size_t whylen);

/* The absolute path of an NF's or rule set's .so named name: relative to dir (NULL: the
 * current directory), canonical (symbolic links resolved) when the file exists.  0, or -1
 * (err: the path is too long, or the current directory cannot be read). */
int rg_so_resolve(const char *dir, const char *name, char *out, size_t outlen, char *err,
                  size_t errlen);

/* Is resolved path (rg_so_resolve) one a control request may load?  kind: 'n' (an NF,
 * --nf-path) or 'r' (a rule set, --rules-path).  0, or -1 with the reason in err. */
int rg_so_trusted(const char *path, int kind, char *err, size_t errlen);

/* The directories a control request of kind ('n', 'r') may load from, ':'-separated. */
void rg_so_trusted_dirs(int kind, char *out, size_t outlen);

/* One request line split in place into fields (tabs; empty fields kept) and checked: its
 * length (len bytes, no NUL, no control byte but tab), the field count, the verb and its
 * arity, KEY=VALUE parameters of attach.  0, or -1 with the reason in err. */
typedef struct rg_ctlreq {
    char *f[RG_CTLREQ_FIELDS];
    unsigned n;
} rg_ctlreq;
int rg_ctlreq_parse(char *line, size_t len, rg_ctlreq *r, char *err, size_t errlen);

/* `trace N [TIMEOUT]` (the fields of a parsed request, f[0] "trace"): N packets, 1 to
 * RG_TRACE_PKTS_MAX (rg_trace.h's RG_TRACE_MAX), and the wait in whole seconds (empty or
 * absent: RG_TRACE_TIMEOUT_S).  0, or -1 with the reason in err. */
enum { RG_TRACE_PKTS_MAX = 1000, RG_TRACE_TIMEOUT_S = 10, RG_TRACE_TIMEOUT_MAX = 3600 };
int rg_trace_args(char *const *f, unsigned n, unsigned *count, unsigned *timeout_ms, char *err,
                  size_t errlen);

#endif
