/* rg_common.c - shared runtime definitions. */
#include "rg/rg_common.h"

const uint8_t rg_empty_byte[1] = {0};

const char *rg_strerror(int err)
{
    switch (err) {
    case RG_OK:
        return "ok";
    case RG_ETRUNC:
        return "truncated";
    case RG_EINVAL:
        return "invalid argument";
    case RG_ENOMEM:
        return "out of memory";
    case RG_EUNSUPPORTED:
        return "unsupported";
    case RG_EIO:
        return "i/o error";
    default:
        return "unknown error";
    }
}
