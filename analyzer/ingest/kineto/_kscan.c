/* The Kineto document's structure in one pass, in C: which events a table may read, and where they are.

   scan(buffer, max_depth, cats, names, prefixes, drop) walks the whole JSON document once, validating it strictly
   (RFC 8259: the number grammar, string escapes and surrogate pairs, UTF-8 without overlongs or surrogates, no
   control characters in strings, no NaN or Infinity, only space, tab, CR and LF between tokens, nesting at most
   max_depth with a top-level object at depth 1), and finds the top-level "traceEvents" array. For each object
   in it (an event), it reads the raw text of three keys: "cat" and "name" at the event's top level and
   "correlation" inside its top-level "args" object. An event is a *candidate* when

     HIT     its "cat" is one of `cats`, or its "name" is one of `names` or starts with one of `prefixes`, or a
             key or value it looked at cannot be judged from its raw text (an escape in it, a key seen twice):
             the caller decodes it with the other hits;
     CORR    its args.correlation is a plain integer of at most 18 digits (value returned);
     UNSURE  its args.correlation is anything else (a float, a string, a long number, an escaped key, a
             repeated key): the caller offers it whenever it is not a hit (a superset is safe).

   Returns None for anything it does not accept (invalid JSON, too deep, no or a repeated "traceEvents", an
   element that is not an object, a key that may spell "traceEvents" through escapes): the caller then takes
   its other paths, which word every error as before. Otherwise (lo, hi, starts, ends, flags, corrs): the offsets
   of the array's '[' and ']', and per candidate, in file order, its first byte, the byte after its '}', its flags
   and its correlation (int64 and uint8 arrays as bytes).

   With drop set (a read-only file mapping), pages more than 8 MiB behind the cursor are released with
   MADV_DONTNEED as the scan goes (the page cache keeps them), so a 500 MB rank does not stay mapped in the
   worker. The GIL is released while scanning. Every read is bounds-checked against the buffer's end. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define KSCAN_SSE2 1
#if defined(_MSC_VER)
#include <intrin.h>
static inline int ctz32(unsigned x) {
    unsigned long i;
    _BitScanForward(&i, x);
    return (int)i;
}
#else
#define ctz32(x) __builtin_ctz(x)
#endif
#endif

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define KSCAN_MADVISE 1
#endif

enum { F_HIT = 1, F_CORR = 2, F_UNSURE = 4 };
#define MAX_PATTERNS 64
#define DROP_BEHIND (8u << 20)
#define MAX_RECURSION 2048

typedef struct {
    const uint8_t *text;
    Py_ssize_t len;
} Pat;

typedef struct {
    const uint8_t *buf, *p, *end;
    int max_depth;
    int fail;
    /* patterns */
    Pat cats[MAX_PATTERNS], names[MAX_PATTERNS], prefixes[MAX_PATTERNS];
    int ncats, nnames, nprefixes;
    /* candidates */
    int64_t *starts, *ends, *corrs;
    uint8_t *flags;
    Py_ssize_t n, cap;
    /* the events array */
    Py_ssize_t lo, hi;
    int seen_events;
    /* dropping pages behind */
    int drop;
    uintptr_t dropped_to, page;
} S;

/* ------------------------------------------------------------------ helpers */

static inline void skip_ws(S *s) {
    const uint8_t *p = s->p, *end = s->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    s->p = p;
}

static void maybe_drop(S *s) {
#ifdef KSCAN_MADVISE
    if (!s->drop)
        return;
    uintptr_t at = (uintptr_t)s->p;
    if (at - s->dropped_to < 2 * DROP_BEHIND)
        return;
    uintptr_t to = (at - DROP_BEHIND) & ~(s->page - 1);
    if (to > s->dropped_to) {
        madvise((void *)s->dropped_to, to - s->dropped_to, MADV_DONTNEED);
        s->dropped_to = to;
    }
#else
    (void)s;
#endif
}

static inline int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(S *s, const uint8_t *p, unsigned *out) {
    if (s->end - p < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return 0;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 1;
}

/* One UTF-8 sequence at p (p[0] >= 0x80): its length, or 0 when invalid (overlong, surrogate, past U+10FFFF,
   truncated). */
static inline int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    Py_ssize_t room = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        if (room < 2 || (p[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (room < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (room < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* past U+10FFFF */
        return 4;
    }
    return 0;
}

/* A string at s->p (its opening quote). On success s->p is past the closing quote, *body and *blen give the raw
   text between the quotes and *escaped says whether it holds a backslash escape. */
static int scan_string(S *s, const uint8_t **body, Py_ssize_t *blen, int *escaped) {
    const uint8_t *p = s->p + 1, *end = s->end;
    *body = p;
    *escaped = 0;
    for (;;) {
#ifdef KSCAN_SSE2
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* '"', '\\', and (signed) < 0x20: control characters and every byte >= 0x80 */
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                  _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                     _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
            int mask = _mm_movemask_epi8(m);
            if (mask == 0) {
                p += 16;
                continue;
            }
            p += ctz32((unsigned)mask);
            break;
        }
#endif
        if (p >= end) return 0;
        uint8_t c = *p;
        if (c == '"') {
            *blen = p - *body;
            s->p = p + 1;
            return 1;
        }
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2) return 0;
            uint8_t e = p[1];
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            if (e != 'u') return 0;
            unsigned u;
            if (!read_u4(s, p + 2, &u)) return 0;
            p += 6;
            if (u >= 0xDC00 && u <= 0xDFFF) return 0; /* a lone low surrogate */
            if (u >= 0xD800 && u <= 0xDBFF) {           /* must pair with a low one */
                unsigned lo;
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_u4(s, p + 2, &lo)) return 0;
                if (lo < 0xDC00 || lo > 0xDFFF) return 0;
                p += 6;
            }
            continue;
        }
        if (c < 0x20) return 0;
        if (c >= 0x80) {
            int n = utf8_len(p, end);
            if (!n) return 0;
            p += n;
            continue;
        }
        p++;
    }
}

/* A number at s->p. *plain: an integer of at most 18 digits, its value in *val. */
static int scan_number(S *s, int64_t *val, int *plain) {
    const uint8_t *p = s->p, *end = s->end;
    int neg = 0;
    *plain = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return 0;
    const uint8_t *digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return 0;
    }
    Py_ssize_t nd = p - digits;
    int is_int = 1;
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        const uint8_t *f = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == f) return 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const uint8_t *x = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == x) return 0;
    }
    if (is_int && nd <= 18) {
        int64_t v = 0;
        for (const uint8_t *q = digits; q < digits + nd; q++) v = v * 10 + (*q - '0');
        *val = neg ? -v : v;
        *plain = 1;
    }
    s->p = p;
    return 1;
}

static int scan_value(S *s, int depth);

static int scan_literal(S *s, const char *word, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, word, (size_t)n) != 0) return 0;
    s->p += n;
    return 1;
}

/* An object or array at s->p whose own depth is `depth`. */
static int scan_container(S *s, int depth) {
    if (depth > s->max_depth) return 0;
    uint8_t open = *s->p, close = open == '{' ? '}' : ']';
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 1;
    }
    for (;;) {
        if (open == '{') {
            const uint8_t *b;
            Py_ssize_t n;
            int esc;
            if (s->p >= s->end || *s->p != '"' || !scan_string(s, &b, &n, &esc)) return 0;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return 0;
            s->p++;
            skip_ws(s);
        }
        if (!scan_value(s, depth + 1)) return 0;
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == close) {
            s->p++;
            return 1;
        }
        return 0;
    }
}

/* Any value at s->p; a container there would have depth `depth`. */
static int scan_value(S *s, int depth) {
    if (s->p >= s->end) return 0;
    switch (*s->p) {
    case '{':
    case '[':
        return scan_container(s, depth);
    case '"': {
        const uint8_t *b;
        Py_ssize_t n;
        int esc;
        return scan_string(s, &b, &n, &esc);
    }
    case 't':
        return scan_literal(s, "true", 4);
    case 'f':
        return scan_literal(s, "false", 5);
    case 'n':
        return scan_literal(s, "null", 4);
    default: {
        int64_t v;
        int plain;
        return scan_number(s, &v, &plain);
    }
    }
}

static inline int key_is(const uint8_t *b, Py_ssize_t n, const char *word, Py_ssize_t wn) {
    return n == wn && memcmp(b, word, (size_t)wn) == 0;
}

static int any_equal(const Pat *pats, int n, const uint8_t *b, Py_ssize_t len) {
    for (int i = 0; i < n; i++)
        if (pats[i].len == len && memcmp(pats[i].text, b, (size_t)len) == 0) return 1;
    return 0;
}

static int any_prefix(const Pat *pats, int n, const uint8_t *b, Py_ssize_t len) {
    for (int i = 0; i < n; i++)
        if (pats[i].len <= len && memcmp(pats[i].text, b, (size_t)pats[i].len) == 0) return 1;
    return 0;
}

/* The event's "args" object at s->p (depth `depth`): its "correlation". */
static int scan_args(S *s, int depth, uint8_t *flags, int64_t *corr) {
    if (depth > s->max_depth) return 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 1;
    }
    int seen = 0;
    for (;;) {
        const uint8_t *b;
        Py_ssize_t n;
        int esc;
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, &b, &n, &esc)) return 0;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return 0;
        s->p++;
        skip_ws(s);
        if (esc) {
            *flags |= F_UNSURE; /* may spell "correlation" */
            if (!scan_value(s, depth + 1)) return 0;
        } else if (key_is(b, n, "correlation", 11)) {
            if (seen++) *flags |= F_UNSURE;
            if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
                int64_t v;
                int plain;
                if (!scan_number(s, &v, &plain)) return 0;
                if (plain) {
                    *corr = v;
                    *flags |= F_CORR;
                } else {
                    *flags |= F_UNSURE;
                }
            } else {
                if (s->p < s->end && *s->p != 'n') *flags |= F_UNSURE; /* null links nothing, as on every path */
                if (!scan_value(s, depth + 1)) return 0;
            }
        } else if (!scan_value(s, depth + 1)) {
            return 0;
        }
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            return 1;
        }
        return 0;
    }
}

static int push(S *s, Py_ssize_t start, Py_ssize_t end, uint8_t flags, int64_t corr) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 1 << 16;
        int64_t *a = realloc(s->starts, (size_t)cap * sizeof(int64_t));
        if (a) s->starts = a;
        int64_t *b = realloc(s->ends, (size_t)cap * sizeof(int64_t));
        if (b) s->ends = b;
        int64_t *d = realloc(s->corrs, (size_t)cap * sizeof(int64_t));
        if (d) s->corrs = d;
        uint8_t *f = realloc(s->flags, (size_t)cap);
        if (f) s->flags = f;
        if (!a || !b || !d || !f) return 0;
        s->cap = cap;
    }
    s->starts[s->n] = start;
    s->ends[s->n] = end;
    s->corrs[s->n] = corr;
    s->flags[s->n] = flags;
    s->n++;
    return 1;
}

/* One event object at s->p, whose depth is `depth` (3: document, array, event). */
static int scan_event(S *s, int depth) {
    if (depth > s->max_depth) return 0;
    Py_ssize_t start = s->p - s->buf;
    uint8_t flags = 0;
    int64_t corr = 0;
    int seen_cat = 0, seen_name = 0, seen_args = 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 1; /* {}: no table reads it */
    }
    for (;;) {
        const uint8_t *k;
        Py_ssize_t kn;
        int kesc;
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, &k, &kn, &kesc)) return 0;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return 0;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end) return 0;
        int is_cat = !kesc && key_is(k, kn, "cat", 3);
        int is_name = !kesc && key_is(k, kn, "name", 4);
        if (kesc) flags |= F_HIT; /* may spell "cat", "name" or "args" */
        if (is_cat || is_name) {
            if ((is_cat ? seen_cat++ : seen_name++)) flags |= F_HIT;
            if (*s->p == '"') {
                const uint8_t *b;
                Py_ssize_t n;
                int esc;
                if (!scan_string(s, &b, &n, &esc)) return 0;
                if (esc) {
                    flags |= F_HIT;
                } else if (is_cat) {
                    if (any_equal(s->cats, s->ncats, b, n)) flags |= F_HIT;
                } else if (any_equal(s->names, s->nnames, b, n) || any_prefix(s->prefixes, s->nprefixes, b, n)) {
                    flags |= F_HIT;
                }
            } else if (!scan_value(s, depth + 1)) {
                return 0;
            }
        } else if (!kesc && key_is(k, kn, "args", 4)) {
            if (seen_args++) flags |= F_HIT | F_UNSURE;
            if (*s->p == '{') {
                if (!scan_args(s, depth + 1, &flags, &corr)) return 0;
            } else if (!scan_value(s, depth + 1)) {
                return 0;
            }
        } else if (!scan_value(s, depth + 1)) {
            return 0;
        }
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            break;
        }
        return 0;
    }
    if (flags)
        return push(s, start, s->p - s->buf, flags, corr);
    return 1;
}

/* The "traceEvents" array at s->p (depth 2). */
static int scan_events(S *s) {
    if (2 > s->max_depth) return 0;
    s->lo = s->p - s->buf;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->hi = s->p - s->buf;
        s->p++;
        return 1;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '{') return 0; /* an element that is not an event */
        if (!scan_event(s, 3)) return 0;
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            maybe_drop(s);
            continue;
        }
        if (*s->p == ']') {
            s->hi = s->p - s->buf;
            s->p++;
            return 1;
        }
        return 0;
    }
}

static int scan_document(S *s) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '{' || s->max_depth < 1) return 0;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') return 0; /* no traceEvents */
    for (;;) {
        const uint8_t *k;
        Py_ssize_t kn;
        int kesc;
        if (s->p >= s->end || *s->p != '"' || !scan_string(s, &k, &kn, &kesc)) return 0;
        if (kesc) return 0; /* might spell "traceEvents" */
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return 0;
        s->p++;
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (key_is(k, kn, "traceEvents", 11)) {
            if (s->seen_events++ || *s->p != '[') return 0;
            if (!scan_events(s)) return 0;
        } else if (!scan_value(s, 2)) {
            return 0;
        }
        skip_ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            break;
        }
        return 0;
    }
    skip_ws(s);
    return s->p == s->end && s->seen_events == 1;
}

/* ------------------------------------------------------------------ Python */

static int load_patterns(PyObject *seq, Pat *out, int *n, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return 0;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(fast);
    if (m > MAX_PATTERNS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "at most %d %s", MAX_PATTERNS, what);
        return 0;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(item)) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
            return 0;
        }
        out[i].text = (const uint8_t *)PyBytes_AS_STRING(item);
        out[i].len = PyBytes_GET_SIZE(item);
    }
    *n = (int)m;
    Py_DECREF(fast); /* the items stay alive: the caller's sequences hold them */
    return 1;
}

static PyObject *as_bytes(const void *p, Py_ssize_t n) {
    return PyBytes_FromStringAndSize(n ? (const char *)p : "", n);
}

static PyObject *kscan_scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    int max_depth, drop;
    PyObject *cats, *names, *prefixes;
    if (!PyArg_ParseTuple(args, "y*iOOOp", &view, &max_depth, &cats, &names, &prefixes, &drop)) return NULL;
    S s;
    memset(&s, 0, sizeof s);
    s.buf = s.p = (const uint8_t *)view.buf;
    s.end = s.buf + view.len;
    s.max_depth = max_depth;
    if (!load_patterns(cats, s.cats, &s.ncats, "cats") || !load_patterns(names, s.names, &s.nnames, "names") ||
        !load_patterns(prefixes, s.prefixes, &s.nprefixes, "prefixes")) {
        PyBuffer_Release(&view);
        return NULL;
    }
#ifdef KSCAN_MADVISE
    s.page = (uintptr_t)sysconf(_SC_PAGESIZE);
    s.drop = drop && s.page && ((uintptr_t)s.buf % s.page) == 0;
    s.dropped_to = (uintptr_t)s.buf;
#endif
    int ok;
    if (max_depth > MAX_RECURSION) {
        ok = 0; /* deeper limits are left to the other paths (C recursion per level) */
    } else {
        Py_BEGIN_ALLOW_THREADS
        ok = scan_document(&s);
        Py_END_ALLOW_THREADS
    }
#ifdef KSCAN_MADVISE
    if (s.drop && (uintptr_t)s.end > s.dropped_to)
        madvise((void *)s.dropped_to, (uintptr_t)s.end - s.dropped_to, MADV_DONTNEED);
#endif
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (!ok) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = Py_BuildValue("nnNNNN", s.lo, s.hi, as_bytes(s.starts, s.n * 8), as_bytes(s.ends, s.n * 8),
                            as_bytes(s.flags, s.n), as_bytes(s.corrs, s.n * 8));
    }
    free(s.starts);
    free(s.ends);
    free(s.corrs);
    free(s.flags);
    return out;
}

/* gather(buffer, starts, ends) -> bytes: "[" + buffer[starts[0]:ends[0]] + "," + ... + "]" (int64 arrays as bytes,
   each span inside the buffer): the events a msgspec call decodes, copied once. */
static PyObject *kscan_gather(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view, sv, ev;
    if (!PyArg_ParseTuple(args, "y*y*y*", &view, &sv, &ev)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = sv.len / 8;
    const int64_t *a = (const int64_t *)sv.buf, *b = (const int64_t *)ev.buf;
    Py_ssize_t total = 2;
    if (sv.len % 8 || ev.len != sv.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends must be int64 arrays of one length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (a[i] < 0 || b[i] < a[i] || b[i] > view.len) {
            PyErr_SetString(PyExc_ValueError, "a span outside the buffer");
            goto done;
        }
        total += (Py_ssize_t)(b[i] - a[i]) + (i > 0);
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *o = PyBytes_AS_STRING(out);
    *o++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *o++ = ',';
        memcpy(o, (const char *)view.buf + a[i], (size_t)(b[i] - a[i]));
        o += b[i] - a[i];
    }
    *o = ']';
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&ev);
    return out;
}

static PyMethodDef methods[] = {
    {"gather", kscan_gather, METH_VARARGS, "gather(buffer, starts, ends) -> b'[' + spans joined by ',' + b']'"},
    {"scan", kscan_scan, METH_VARARGS,
     "scan(buffer, max_depth, cats, names, prefixes, drop) -> (lo, hi, starts, ends, flags, corrs) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kscan", "The Kineto document's structure in one pass.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModule_Create(&module); }
