/* rg_json.h - JSON output shared by the driver and the NFs: the one string
 * escaper, so that every record escapes names and paths the same way. */
#ifndef RG_JSON_H
#define RG_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* s as a JSON string (quoted; '"', '\\', \n, \r, \t escaped, other control
 * bytes as \u00XX; bytes >= 0x80 as they are); NULL as null. */
void rg_json_string(FILE *out, const char *s);

/* n bytes of p (a protocol field: untrusted, maybe not text) as a JSON
 * string: printable ASCII kept ('"' and '\\' escaped), every other byte as
 * \u00XX, so the string says exactly which bytes were there. */
void rg_json_bytes(FILE *out, const uint8_t *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RG_JSON_H */
