/* rg_test_fs.h - file helpers for the suites that check written outputs
 * (test_nf, test_driver). */
#ifndef RG_TEST_FS_H
#define RG_TEST_FS_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory /tmp/<prefix>XXXXXX in buf (size >= 64); NULL on error. */
static inline char *fs_tmpdir(char *buf, const char *prefix)
{
    snprintf(buf, 64, "/tmp/%sXXXXXX", prefix);
    return mkdtemp(buf);
}

/* rm -rf path (no symlinks are followed: lstat). */
static inline void fs_rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st)) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            size_t n = strlen(path) + strlen(e->d_name) + 2;
            char *sub = malloc(n);
            if (!sub) break;
            snprintf(sub, n, "%s/%s", path, e->d_name);
            fs_rm_tree(sub);
            free(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* The whole file dir/name, NUL-terminated (length in *len if given); NULL
 * if it cannot be read.  Free with free(). */
static inline char *fs_read(const char *dir, const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* 1 if dir/name exists. */
static inline int fs_exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* Lines of s (count of '\n'). */
static inline size_t fs_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

#endif
