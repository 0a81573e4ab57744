/* rg_json.c - the JSON string escaper (see rg_json.h). */
#include "rg/rg_json.h"

void rg_json_string(FILE *out, const char *s)
{
    if (!s) {
        fputs("null", out);
        return;
    }
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                putc(*p, out);
        }
    }
    putc('"', out);
}

void rg_json_bytes(FILE *out, const uint8_t *p, size_t n)
{
    putc('"', out);
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '"' || p[i] == '\\')
            fprintf(out, "\\%c", p[i]);
        else if (p[i] >= 0x20 && p[i] < 0x7f)
            putc(p[i], out);
        else
            fprintf(out, "\\u%04x", p[i]);
    }
    putc('"', out);
}
