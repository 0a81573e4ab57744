/* rg_chainfile.c - chain files (--chain FILE): a YAML mapping with the key
 * `chain`, a list of NFs in chain order, each a mapping
 *
 *     - nf: flowstats          # a stock NF's name, or a path to an NF's .so
 *       name: fs               # optional: the instance name (default: the NF's)
 *       params: {all: true}    # optional: its configuration (scalars)
 *
 * A relative .so path is relative to the chain file's directory.  Events between NFs: the
 * top-level `events` declares them with their payload's fields and kinds, and an item says
 * which it raises and subscribes to (docs/nf.md, Events between NFs):
 *
 *     events:
 *       flagged: {reason: bytes, dir: num}
 *     chain:
 *       - nf: ./detect.so
 *         raises: [flagged]
 *       - nf: ./block.so
 *         subscribes: [flagged]      # or {flagged: {reason: bytes}}: the fields it reads
 *
 * An event an item subscribes to is raised by an NF before it in the chain (so there are no
 * cycles either).
 * `rubikgen validate` checks the same against schema/chain.schema.json; this
 * reader repeats the structural checks so a binary run directly reports
 * FILE:LINE:COL too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "rg_ctlsec.h"
#include "rg_nfchain.h"

enum { MAX_PARAMS = 64 };

typedef struct reader {
    const char *path;
    yaml_document_t doc;
    char *err;
    size_t errlen;
    uint64_t raised; /* the events raised by the items read so far */
} reader;

static int fail(reader *rd, const yaml_node_t *n, const char *msg, const char *hint)
{
    snprintf(rd->err, rd->errlen, "%s:%zu:%zu: error: %s%s%s", rd->path,
             n ? n->start_mark.line + 1 : 1, n ? n->start_mark.column + 1 : 1, msg,
             hint ? "\n  hint: " : "", hint ? hint : "");
    return RG_EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *node(reader *rd, int id)
{
    return yaml_document_get_node(&rd->doc, id);
}

/* A relative path is the chain file's directory's (rg_so_resolve: one rule for every .so). */
static char *nf_path(const char *chain, const char *nf)
{
    const char *slash = strrchr(chain, '/');
    int is_path = strchr(nf, '/') || (strlen(nf) > 3 && !strcmp(nf + strlen(nf) - 3, ".so"));
    if (!is_path) return strdup(nf);
    char dir[4096], so[4096], err[256];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - chain) : 1, slash ? chain : ".");
    if (slash == chain) snprintf(dir, sizeof dir, "/");
    if (rg_so_resolve(dir, nf, so, sizeof so, err, sizeof err)) return strdup(nf);
    return strdup(so);
}

/* `events`: name -> {field: num | bytes} (or null: no payload) */
static int load_events(reader *rd, rg_chain *ch, yaml_node_t *evs)
{
    if (evs->type != YAML_MAPPING_NODE)
        return fail(rd, evs, "`events` maps event names to their fields",
                    "events: {flagged: {reason: bytes}}");
    for (yaml_node_pair_t *p = evs->data.mapping.pairs.start; p < evs->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(rd, p->key), *v = node(rd, p->value);
        if (!scalar(k) || !*scalar(k)) return fail(rd, k, "an event's name is a string", NULL);
        const char *names[RG_CHAIN_EV_FIELDS];
        uint8_t kinds[RG_CHAIN_EV_FIELDS];
        unsigned n = 0;
        if (v->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *f = v->data.mapping.pairs.start; f < v->data.mapping.pairs.top;
                 f++) {
                yaml_node_t *fk = node(rd, f->key), *fv = node(rd, f->value);
                const char *t = scalar(fv);
                if (!scalar(fk)) return fail(rd, fk, "a field's name is a string", NULL);
                if (!t || (strcmp(t, "num") && strcmp(t, "bytes")))
                    return fail(rd, fv, "a field's type is num or bytes", NULL);
                if (n == RG_CHAIN_EV_FIELDS) return fail(rd, fk, "too many fields (16)", NULL);
                names[n] = scalar(fk);
                kinds[n++] = strcmp(t, "num") ? RG_VAL_BYTES : RG_VAL_NUM;
            }
        } else if (!(scalar(v) &&
                     (!*scalar(v) || !strcmp(scalar(v), "null") || !strcmp(scalar(v), "~")))) {
            return fail(rd, v, "an event's fields are a mapping of names to num or bytes",
                        "flagged: {reason: bytes}");
        }
        char why[300];
        if (rg_chain_declare_event(ch, scalar(k), n, names, kinds, why, sizeof why))
            return fail(rd, k, why, NULL);
    }
    return RG_OK;
}

/* An item's `raises` or `subscribes`: a list of event names, or (subscribes) a mapping of
 * them to the fields the NF reads with their types; the events' bits in *mask. */
static int load_uses(reader *rd, const rg_chain *ch, yaml_node_t *v, int sub, uint64_t *mask)
{
    const char *what = sub ? "subscribes" : "raises";
    yaml_node_item_t *i = NULL, *iend = NULL;
    yaml_node_pair_t *p = NULL, *pend = NULL;
    if (v->type == YAML_SEQUENCE_NODE) {
        i = v->data.sequence.items.start;
        iend = v->data.sequence.items.top;
    } else if (v->type == YAML_MAPPING_NODE && sub) {
        p = v->data.mapping.pairs.start;
        pend = v->data.mapping.pairs.top;
    } else {
        return fail(rd, v,
                    sub ? "`subscribes` is a list of event names, or maps them to the fields "
                          "read"
                        : "`raises` is a list of event names",
                    NULL);
    }
    for (; (i && i < iend) || (p && p < pend); i ? (void)i++ : (void)p++) {
        yaml_node_t *n = node(rd, i ? *i : p->key), *fields = p ? node(rd, p->value) : NULL;
        const char *name = scalar(n);
        int id = name ? rg_chain_event_id(ch, name) : -1;
        if (id < 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "`%s`: the chain file declares no event '%s'", what,
                     name ? name : "?");
            return fail(rd, n, msg, "declare it under the top-level `events`");
        }
        if (sub && !(rd->raised >> id & 1)) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "'%s' is raised by no NF before this one in the chain (events go to the "
                     "NFs after the one raising them)",
                     name);
            return fail(rd, n, msg, "move this NF after one that raises it");
        }
        *mask |= UINT64_C(1) << id;
        if (!fields || fields->type != YAML_MAPPING_NODE) continue;
        for (yaml_node_pair_t *f = fields->data.mapping.pairs.start;
             f < fields->data.mapping.pairs.top; f++) {
            const char *fname = scalar(node(rd, f->key)), *t = scalar(node(rd, f->value));
            if (!fname || !t) return fail(rd, node(rd, f->key), "a field is name: type", NULL);
            if (rg_chain_event_field_check(ch, id, fname, t)) {
                char msg[240];
                snprintf(msg, sizeof msg, "event '%s' has no field '%s' of type %s", name, fname,
                         t);
                return fail(rd, node(rd, f->value), msg, NULL);
            }
        }
    }
    return RG_OK;
}

static int load_item(reader *rd, rg_chain *ch, yaml_node_t *item)
{
    uint64_t raises = 0, subscribes = 0;
    if (item->type != YAML_MAPPING_NODE)
        return fail(rd, item, "a chain item is a mapping", "write `- nf: NAME_OR_PATH.so`");
    const char *nf = NULL, *name = NULL;
    yaml_node_t *nfn = item, *params = NULL;
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(rd, p->key), *v = node(rd, p->value);
        const char *key = scalar(k);
        if (key && !strcmp(key, "nf")) {
            nf = scalar(v);
            nfn = v;
            if (!nf || !*nf) return fail(rd, v, "`nf` is a stock NF's name or a .so path", NULL);
        } else if (key && !strcmp(key, "name")) {
            name = scalar(v);
            if (!name || !*name) return fail(rd, v, "`name` is a string", NULL);
        } else if (key && !strcmp(key, "raises")) {
            if (load_uses(rd, ch, v, 0, &raises)) return RG_EINVAL;
        } else if (key && !strcmp(key, "subscribes")) {
            if (load_uses(rd, ch, v, 1, &subscribes)) return RG_EINVAL;
        } else if (key && !strcmp(key, "params")) {
            params = v;
            if (v->type != YAML_MAPPING_NODE)
                return fail(rd, v, "`params` is a mapping of names to scalars",
                            "e.g. params: {all: true}");
        } else {
            return fail(rd, k, "unknown key in a chain item",
                        "the keys are nf, name, params, raises, subscribes");
        }
    }
    if (!nf) return fail(rd, item, "a chain item needs `nf`", "a stock NF's name or a .so path");
    rg_nf_kv kv[MAX_PARAMS];
    unsigned n = 0;
    if (params)
        for (yaml_node_pair_t *p = params->data.mapping.pairs.start;
             p < params->data.mapping.pairs.top; p++) {
            yaml_node_t *k = node(rd, p->key), *v = node(rd, p->value);
            if (!scalar(k) || !scalar(v))
                return fail(rd, scalar(k) ? v : k, "a parameter is a name and a scalar value",
                            NULL);
            if (n == MAX_PARAMS) return fail(rd, k, "too many parameters (64 at most)", NULL);
            kv[n++] = (rg_nf_kv){scalar(k), scalar(v)};
        }
    char *path = nf_path(rd->path, nf);
    if (!path) return fail(rd, nfn, "out of memory", NULL);
    char why[900];
    int rc = rg_chain_attach_ev(ch, path, name, kv, n, raises, subscribes, why, sizeof why);
    free(path);
    rd->raised |= raises;
    return rc ? fail(rd, nfn, why, NULL) : RG_OK;
}

int rg_chainfile_load(rg_chain *ch, const char *path, char *err, size_t errlen)
{
    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.path = path;
    rd.err = err;
    rd.errlen = errlen;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read the chain file", path);
        return RG_EIO;
    }
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int rc = RG_OK;
    if (!yaml_parser_load(&parser, &rd.doc)) {
        snprintf(err, errlen, "%s:%zu:%zu: error: YAML: %s", path, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1, parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        fclose(f);
        return RG_EINVAL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&rd.doc), *list = NULL, *evs = NULL;
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = fail(&rd, root, "a chain file is a mapping with the key `chain`",
                  "chain: [{nf: flowstats}, {nf: ./my_nf.so}]");
        goto done;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = node(&rd, p->key);
        if (scalar(k) && !strcmp(scalar(k), "chain")) {
            list = node(&rd, p->value);
        } else if (scalar(k) && !strcmp(scalar(k), "events")) {
            evs = node(&rd, p->value);
        } else {
            rc = fail(&rd, k, "unknown top-level key",
                      "a chain file has the keys `chain` and `events`");
            goto done;
        }
    }
    if (evs && (rc = load_events(&rd, ch, evs))) goto done;
    if (!list || list->type != YAML_SEQUENCE_NODE) {
        rc = fail(&rd, list ? list : root, "`chain` is a list of NFs", "chain: [{nf: events}]");
        goto done;
    }
    for (yaml_node_item_t *i = list->data.sequence.items.start;
         i < list->data.sequence.items.top && !rc; i++)
        rc = load_item(&rd, ch, node(&rd, *i));
done:
    yaml_document_delete(&rd.doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
