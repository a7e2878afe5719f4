/* xml_check.h — a small XML well-formedness check for the gate's JUnit output in tests: one root
 * element, every tag closed in order, attribute values quoted, no raw '<' and only known entities
 * after '&'. Not a validating parser; enough to catch broken escaping or nesting. Header-only so
 * the unit and integration tests share it. */
#ifndef MST_TESTS_XML_CHECK_H
#define MST_TESTS_XML_CHECK_H

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

static inline bool xml_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || c == ':'; }

/* Checks an entity at s (which points at '&'); returns its length or 0. */
static inline size_t xml_entity(const char *s) {
    static const char *const known[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strncmp(s, known[i], strlen(known[i])) == 0) return strlen(known[i]);
    if (s[1] == '#') {
        size_t k = 2;
        while (isalnum((unsigned char)s[k])) k++;
        if (s[k] == ';' && k > 2) return k + 1;
    }
    return 0;
}

/* true when doc is well-formed; otherwise why (with the byte offset) in err. */
static inline bool xml_well_formed(const char *doc, char *err, size_t errn) {
    const char *p = doc;
    char stack[32][64];
    int depth = 0, roots = 0;
    if (strncmp(p, "<?xml", 5) == 0) {
        while (*p && !(p[0] == '?' && p[1] == '>')) p++;
        if (!*p) goto bad_decl;
        p += 2;
    }
    while (*p) {
        if (*p == '&') {
            size_t k = xml_entity(p);
            if (!k) {
                snprintf(err, errn, "bad entity at %ld", (long)(p - doc));
                return false;
            }
            p += k;
            continue;
        }
        if (*p != '<') {
            if (depth == 0 && !isspace((unsigned char)*p)) {
                snprintf(err, errn, "text outside the root at %ld", (long)(p - doc));
                return false;
            }
            p++;
            continue;
        }
        p++;
        bool closing = *p == '/';
        if (closing) p++;
        char name[64];
        size_t n = 0;
        if (!(isalpha((unsigned char)*p) || *p == '_')) {
            snprintf(err, errn, "bad tag name at %ld", (long)(p - doc));
            return false;
        }
        while (xml_name_char(*p) && n + 1 < sizeof(name)) name[n++] = *p++;
        name[n] = '\0';
        if (closing) {
            while (isspace((unsigned char)*p)) p++;
            if (*p != '>' || depth == 0 || strcmp(stack[depth - 1], name) != 0) {
                snprintf(err, errn, "unmatched </%s> at %ld", name, (long)(p - doc));
                return false;
            }
            depth--;
            p++;
            continue;
        }
        for (;;) {      /* attributes */
            while (isspace((unsigned char)*p)) p++;
            if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
            if (!(isalpha((unsigned char)*p) || *p == '_')) {
                snprintf(err, errn, "bad attribute in <%s> at %ld", name, (long)(p - doc));
                return false;
            }
            while (xml_name_char(*p)) p++;
            if (*p++ != '=' || (*p != '"' && *p != '\'')) {
                snprintf(err, errn, "attribute without a quoted value in <%s> at %ld", name, (long)(p - doc));
                return false;
            }
            char q = *p++;
            while (*p && *p != q) {
                if (*p == '<') {
                    snprintf(err, errn, "raw '<' in an attribute of <%s> at %ld", name, (long)(p - doc));
                    return false;
                }
                if (*p == '&') {
                    size_t k = xml_entity(p);
                    if (!k) {
                        snprintf(err, errn, "bad entity in <%s> at %ld", name, (long)(p - doc));
                        return false;
                    }
                    p += k;
                } else {
                    p++;
                }
            }
            if (!*p) {
                snprintf(err, errn, "unterminated attribute in <%s>", name);
                return false;
            }
            p++;
        }
        if (depth == 0 && ++roots > 1) {
            snprintf(err, errn, "a second root <%s>", name);
            return false;
        }
        if (*p == '/') {
            p += 2;
            continue;
        }
        p++;
        if (depth == 32) {
            snprintf(err, errn, "nested too deep");
            return false;
        }
        snprintf(stack[depth++], sizeof(stack[0]), "%s", name);
    }
    if (depth != 0 || roots != 1) {
        snprintf(err, errn, "%d unclosed element(s), %d root(s)", depth, roots);
        return false;
    }
    return true;
bad_decl:
    snprintf(err, errn, "unterminated XML declaration");
    return false;
}

#endif
