/* rg_json.h - JSON output shared by the driver and the NFs: the one string
 * escaper, so that every record escapes names and paths the same way. */
#ifndef RG_JSON_H
#define RG_JSON_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* s as a JSON string (quoted; '"', '\\', \n, \r, \t escaped, other control
 * bytes as \u00XX; bytes >= 0x80 as they are); NULL as null. */
void rg_json_string(FILE *out, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* RG_JSON_H */
