/* rg_ctlsec.c - the control socket's security (rg_ctlsec.h). */
#define _GNU_SOURCE /* struct ucred, SO_PEERCRED, getgrouplist */
#include "rg_ctlsec.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned sock_mode = 0600;
static int sock_gid = -1; /* --control-group: -1 none */
static char *trust[2][RG_CTL_TRUST_DIRS];
static unsigned ntrust[2];

static int kind_ix(int kind)
{
    return kind == 'r';
}

int rg_ctlsec_option(const char *name, const char *value, char *err, size_t errlen)
{
    if (!strcmp(name, "control-mode")) {
        char *end;
        errno = 0;
        unsigned long m = strtoul(value, &end, 8);
        if (errno || !*value || *end || m > 0777 || !(m & 0600)) {
            snprintf(err, errlen,
                     "--control-mode %s: an octal mode up to 0777 that lets the owner use it "
                     "(0600, 0660)",
                     value);
            return -1;
        }
        sock_mode = (unsigned)m;
        return 0;
    }
    if (!strcmp(name, "control-group")) {
        struct group gr, *g = NULL;
        char buf[4096];
        char *end;
        unsigned long id = strtoul(value, &end, 10);
        if (*value && !*end && id < (unsigned long)INT_MAX) {
            sock_gid = (int)id;
            return 0;
        }
        if (getgrnam_r(value, &gr, buf, sizeof buf, &g) || !g) {
            snprintf(err, errlen, "--control-group %s: no such group", value);
            return -1;
        }
        sock_gid = (int)g->gr_gid;
        return 0;
    }
    int k = !strcmp(name, "rules-path") ? 1 : !strcmp(name, "nf-path") ? 0 : -1;
    if (k < 0) {
        snprintf(err, errlen, "unknown option %s", name);
        return -1;
    }
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(value, real) || stat(real, &st)) {
        snprintf(err, errlen, "--%s %s: %s", name, value, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--%s %s: not a directory", name, value);
        return -1;
    }
    if (ntrust[k] == RG_CTL_TRUST_DIRS) {
        snprintf(err, errlen, "--%s: %d directories at most", name, RG_CTL_TRUST_DIRS);
        return -1;
    }
    trust[k][ntrust[k]] = strdup(real);
    if (!trust[k][ntrust[k]]) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ntrust[k]++;
    return 0;
}

int rg_ctlsec_socket(const char *path, char *err, size_t errlen)
{
    /* before listen: nobody can connect while the mode is still the umask's */
    if (chmod(path, sock_mode)) {
        snprintf(err, errlen, "cannot set its mode %04o: %s", sock_mode, strerror(errno));
        return -1;
    }
    if (sock_gid >= 0 && chown(path, (uid_t)-1, (gid_t)sock_gid)) {
        snprintf(err, errlen, "cannot give it group %d: %s", sock_gid, strerror(errno));
        return -1;
    }
    return 0;
}

/* Is user uid (primary group gid) a member of group g? */
static int in_group(uid_t uid, gid_t gid, gid_t g)
{
    if (gid == g) return 1;
    struct passwd pw, *p = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &p) || !p) return 0;
    gid_t groups[256];
    int n = (int)(sizeof groups / sizeof groups[0]);
    if (getgrouplist(p->pw_name, gid, groups, &n) < 0) return 0;
    for (int i = 0; i < n; i++)
        if (groups[i] == g) return 1;
    return 0;
}

int rg_ctlsec_peer_ok(int fd, char *why, size_t whylen)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) || len != sizeof cr) {
        snprintf(why, whylen, "cannot read the peer's credentials: %s", strerror(errno));
        return 0;
    }
    if (cr.uid == 0 || cr.uid == geteuid()) return 1;
    if (sock_gid >= 0 && in_group(cr.uid, cr.gid, (gid_t)sock_gid)) return 1;
    snprintf(why, whylen, "uid %u (pid %d) is neither root nor this process's user (uid %u)%s",
             (unsigned)cr.uid, (int)cr.pid, (unsigned)geteuid(),
             sock_gid >= 0 ? " nor in --control-group" : "");
    return 0;
}

int rg_so_resolve(const char *dir, const char *name, char *out, size_t outlen, char *err,
                  size_t errlen)
{
    char joined[PATH_MAX];
    int n;
    if (name[0] == '/') {
        n = snprintf(joined, sizeof joined, "%s", name);
    } else if (dir) {
        n = snprintf(joined, sizeof joined, "%s/%s", dir, name);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            snprintf(err, errlen, "%s: cannot read the current directory: %s", name,
                     strerror(errno));
            return -1;
        }
        n = snprintf(joined, sizeof joined, "%s/%s", cwd, name);
    }
    if (n < 0 || (size_t)n >= sizeof joined) {
        snprintf(err, errlen, "%.200s...: the path is too long", name);
        return -1;
    }
    char real[PATH_MAX];
    /* a missing file keeps its joined name: dlopen then says what is wrong with it */
    const char *p = realpath(joined, real) ? real : joined;
    if (strlen(p) >= outlen) {
        snprintf(err, errlen, "%.200s...: the path is too long", name);
        return -1;
    }
    memcpy(out, p, strlen(p) + 1);
    return 0;
}

static const char *default_dir(void)
{
    static char own[PATH_MAX];
    if (!own[0]) {
        char exe[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k <= 0) return NULL;
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (!slash) return NULL;
        *slash = 0;
        memcpy(own, exe[0] ? exe : "/", strlen(exe[0] ? exe : "/") + 1);
    }
    return own;
}

void rg_so_trusted_dirs(int kind, char *out, size_t outlen)
{
    int k = kind_ix(kind);
    size_t w = 0;
    out[0] = 0;
    if (!ntrust[k]) {
        const char *d = default_dir();
        snprintf(out, outlen, "%s", d ? d : "");
        return;
    }
    for (unsigned i = 0; i < ntrust[k] && w < outlen; i++)
        w += (size_t)snprintf(out + w, outlen - w, "%s%s", i ? ":" : "", trust[k][i]);
}

/* Is path's owner root or this process's user, and nobody else able to write it? */
static int safe_inode(const char *path, int want_reg, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (want_reg && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s is not a regular file", path);
        return -1;
    }
    if (!want_reg && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is not a directory", path);
        return -1;
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s belongs to uid %u, neither root nor this process's user", path,
                 (unsigned)st.st_uid);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen, "%s is writable by %s (mode %04o)", path,
                 st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

int rg_so_trusted(const char *path, int kind, char *err, size_t errlen)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int k = kind_ix(kind);
    const char *def = default_dir();
    const char *const *dirs = (const char *const *)trust[k];
    unsigned n = ntrust[k];
    if (!n) {
        dirs = &def;
        n = def ? 1 : 0;
    }
    int under = 0;
    for (unsigned i = 0; i < n && !under; i++) {
        size_t l = strlen(dirs[i]);
        under = !strncmp(real, dirs[i], l) && (real[l] == '/' || (l == 1 && dirs[i][0] == '/'));
    }
    if (!under) {
        char list[2048];
        rg_so_trusted_dirs(kind, list, sizeof list);
        snprintf(err, errlen, "%s is not under %s (%s; the binary's own directory unless given)",
                 real, list, kind == 'r' ? "--rules-path" : "--nf-path");
        return -1;
    }
    if (safe_inode(real, 1, err, errlen)) return -1;
    /* every parent: whoever can write one can replace what is under it */
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        *slash = 0;
        if (safe_inode(real[0] ? real : "/", 0, err, errlen)) return -1;
        if (!real[0]) break;
    }
    return 0;
}

static int bad(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* A decimal number of at most 9 digits in [lo, hi]: 0, else -1. */
static int small_number(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    unsigned v = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) {
        if (i == 9) return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (i == 0 || s[i] || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int rg_trace_args(char *const *f, unsigned n, unsigned *count, unsigned *timeout_ms, char *err,
                  size_t errlen)
{
    unsigned t = RG_TRACE_TIMEOUT_S;
    if (n < 2 || n > 3) return bad(err, errlen, "trace takes N and a timeout (may be empty)");
    if (small_number(f[1], 1, RG_TRACE_PKTS_MAX, count)) {
        snprintf(err, errlen, "trace: N is a number of packets, 1 to %u (got '%.40s')",
                 (unsigned)RG_TRACE_PKTS_MAX, f[1]);
        return -1;
    }
    if (n == 3 && f[2][0] && small_number(f[2], 1, RG_TRACE_TIMEOUT_MAX, &t)) {
        snprintf(err, errlen, "trace: the timeout is a number of seconds, 1 to %u (got '%.40s')",
                 (unsigned)RG_TRACE_TIMEOUT_MAX, f[2]);
        return -1;
    }
    *timeout_ms = t * 1000;
    return 0;
}

int rg_ctlreq_parse(char *line, size_t len, rg_ctlreq *r, char *err, size_t errlen)
{
    r->n = 0;
    if (len >= RG_CTLREQ_MAX) return bad(err, errlen, "the request is too long");
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)line[i];
        if ((b < 0x20 && b != '\t') || b == 0x7f)
            return bad(err, errlen, "the request holds a control byte");
    }
    line[len] = 0;
    /* strtok_r would merge empty fields (an empty NAME): split by hand */
    for (char *s = line;;) {
        if (r->n == RG_CTLREQ_FIELDS) return bad(err, errlen, "too many fields");
        r->f[r->n++] = s;
        char *t = strchr(s, '\t');
        if (!t) break;
        *t = 0;
        s = t + 1;
    }
    char **f = r->f;
    unsigned n = r->n;
    if (!strcmp(f[0], "list") && n == 1) return 0;
    if (!strcmp(f[0], "reopen") && n == 1) return 0;
    if (!strcmp(f[0], "detach") && n == 2 && f[1][0]) return 0;
    if (!strcmp(f[0], "rules") && n == 2 && !strcmp(f[1], "info")) return 0;
    if (!strcmp(f[0], "rules") && n == 3 && !strcmp(f[1], "load") && f[2][0]) return 0;
    if (!strcmp(f[0], "trace")) {
        unsigned count, ms;
        return rg_trace_args(f, n, &count, &ms, err, errlen);
    }
    if (!strcmp(f[0], "attach") && n >= 3 && f[1][0]) {
        for (unsigned i = 3; i < n; i++) {
            char *eq = strchr(f[i], '=');
            if (!eq || eq == f[i]) {
                snprintf(err, errlen, "'%.200s' is not KEY=VALUE", f[i]);
                return -1;
            }
        }
        return 0;
    }
    return bad(err, errlen,
               "unknown request (attach NF NAME [KEY=VALUE]..., detach NAME, list, reopen, "
               "rules info, rules load SO, trace N [TIMEOUT])");
}
