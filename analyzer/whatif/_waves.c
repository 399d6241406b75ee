/* The replay's two loops in C (whatif/native.py): the levels of its wave schedule and the wave loop itself.

   Both do what their numpy paths do (levels._levels_numpy, replay._run_numpy), operation for operation, so the
   results are the same bits: the same sums in the same order (a run's prefix sums over its wave, as np.cumsum
   takes them), the same maxima, and numpy's choice between equal maxima (the second of two, as np.maximum,
   np.maximum.reduceat; the first within a run, as the complex running maximum). The numpy path is what runs where
   this module is not built. Here each wave costs a few loops instead of a few dozen numpy calls: a replay is
   O(events x scenarios) with small constants, not O(waves) numpy passes.

   levels(n_groups, n_rank_codes, arrays):  Kahn's algorithm by rounds over the start and end events.
   run(n_scenarios, n_instances, arrays):   every wave's starts, chains' running maxima and groups' ends.

   The arrays come in a tuple in a fixed order (native.py), each a C-contiguous buffer of int64 ('l' or 'q'),
   float64 ('d') or bool ('?', one byte); writable where the function writes. Every index is checked against
   what it indexes before it is used (a schedule that is not one raises ValueError, never reads out of bounds).
   No global state, no recursion; the GIL is released while the loops run. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

enum { T_I64, T_F64, T_BOOL };

typedef struct {
    const char *name;
    int type;
    int writable;
} Spec;

#define NEG (-1e300) /* replay._NEG: -inf in the running maximum */

/* np.maximum: the first where it is greater (or NaN), else the second (of two equal values, the second) */
static inline double npmax(double a, double b) { return (a > b || a != a) ? a : b; }

static void release(Py_buffer *b, int n)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&b[i]);
}

static int type_ok(const Py_buffer *b, int type)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return 0;
    switch (type) {
    case T_I64: return b->itemsize == 8 && (f[0] == 'l' || f[0] == 'q');
    case T_F64: return b->itemsize == 8 && f[0] == 'd';
    default: return b->itemsize == 1 && (f[0] == '?' || f[0] == 'B' || f[0] == 'b');
    }
}

/* Every buffer of ``args`` (a tuple of ``n``) as ``spec`` says; on failure nothing is held and an error is set. */
static int take(PyObject *args, const Spec *spec, int n, Py_buffer *b, Py_ssize_t *len)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != n) {
        PyErr_Format(PyExc_TypeError, "expected a tuple of %d arrays", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (spec[i].writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, i), &b[i], flags) < 0) {
            release(b, i);
            return -1;
        }
        if (!type_ok(&b[i], spec[i].type)) {
            release(b, i + 1);
            PyErr_Format(PyExc_ValueError, "%s: wrong element type", spec[i].name);
            return -1;
        }
        len[i] = b[i].len / b[i].itemsize;
    }
    return 0;
}

/* 0 when every value of a[0..n) lies in [lo, hi) */
static int in_range(const int64_t *a, Py_ssize_t n, int64_t lo, int64_t hi)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] < lo || a[i] >= hi)
            return -1;
    return 0;
}

/* 0 when off[0..m) is non-decreasing within [0, top] */
static int offsets_ok(const int64_t *off, Py_ssize_t m, int64_t top)
{
    for (Py_ssize_t i = 0; i < m; i++)
        if (off[i] < 0 || off[i] > top || (i && off[i] < off[i - 1]))
            return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ levels */

enum {
    L_PTR, L_VAL, L_INDEG, L_ARR_INST, L_ARR_ALSO, L_NEED, L_EPTR, L_EVAL, L_END_GROUP, L_OWN_START, L_END_RANK,
    L_END_END, L_END_NODE, L_WAVE, L_LEV, L_N
};

static const Spec LEVEL_SPEC[L_N] = {
    {"succ_ptr", T_I64, 0}, {"succ_val", T_I64, 0}, {"indeg", T_I64, 1}, {"arr_inst", T_I64, 0},
    {"arr_also", T_I64, 0}, {"need", T_I64, 0}, {"ends_ptr", T_I64, 0}, {"ends_val", T_I64, 0},
    {"end_group", T_I64, 0}, {"own_start", T_I64, 0}, {"end_rank", T_I64, 0}, {"end_end", T_I64, 0},
    {"end_node", T_I64, 0}, {"wave", T_I64, 1}, {"lev", T_I64, 1},
};

typedef struct {
    int64_t *ev, *fr, *count, *gwave, *best; /* scratch */
} LevelScratch;

/* An arrival in group g at the current level: counted; the group's ends released (level k) when it is complete. */
static void arrive(int64_t g, int64_t w, int64_t k, const int64_t *need, const int64_t *eptr,
                   const int64_t *eval, int64_t *count, int64_t *gwave, int64_t *wave, int64_t *lev, int64_t *rel,
                   Py_ssize_t *n_rel)
{
    count[g]++;
    if (w > gwave[g])
        gwave[g] = w;
    if (count[g] != need[g])
        return;
    for (int64_t q = eptr[g]; q < eptr[g + 1]; q++) {
        int64_t e = eval[q];
        if (lev[e] >= 0) /* forced through earlier */
            continue;
        lev[e] = k;
        wave[e] = gwave[g];
        rel[(*n_rel)++] = e;
    }
}

/* The start events left with nothing to wait for once ``rel`` are final; each successor's wave raised. */
static Py_ssize_t release_events(const int64_t *rel, Py_ssize_t n_rel, const int64_t *ptr, const int64_t *val,
                                 int64_t *indeg, int64_t *wave, int64_t *out)
{
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n_rel; i++) {
        int64_t src = rel[i];
        for (int64_t q = ptr[src]; q < ptr[src + 1]; q++) {
            int64_t dst = val[q] >> 1, w = wave[src] + (val[q] & 1);
            if (w > wave[dst])
                wave[dst] = w;
            if (--indeg[dst] == 0)
                out[m++] = dst;
        }
    }
    return m;
}

static PyObject *levels(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t n_groups, n_codes;
    PyObject *arrays;
    if (!PyArg_ParseTuple(args, "nnO", &n_groups, &n_codes, &arrays))
        return NULL;
    Py_buffer b[L_N];
    Py_ssize_t len[L_N];
    if (take(arrays, LEVEL_SPEC, L_N, b, len) < 0)
        return NULL;
    const int64_t *ptr = b[L_PTR].buf, *val = b[L_VAL].buf, *arr_inst = b[L_ARR_INST].buf,
                  *arr_also = b[L_ARR_ALSO].buf, *need = b[L_NEED].buf, *eptr = b[L_EPTR].buf,
                  *eval = b[L_EVAL].buf, *end_group = b[L_END_GROUP].buf, *own_start = b[L_OWN_START].buf,
                  *end_rank = b[L_END_RANK].buf, *end_end = b[L_END_END].buf, *end_node = b[L_END_NODE].buf;
    int64_t *indeg = b[L_INDEG].buf, *wave = b[L_WAVE].buf, *lev = b[L_LEV].buf;
    const Py_ssize_t n_s = len[L_INDEG], n_e = len[L_END_GROUP], n_ev = n_s + n_e;
    const char *bad = NULL;
    if (n_groups < 1 || n_codes < 0)
        bad = "sizes";
    else if (len[L_PTR] != n_ev + 1 || offsets_ok(ptr, len[L_PTR], len[L_VAL]))
        bad = "succ_ptr";
    else if (len[L_ARR_INST] != n_s || len[L_ARR_ALSO] != n_s || in_range(arr_inst, n_s, -1, n_groups)
             || in_range(arr_also, n_s, -1, n_groups))
        bad = "arr_inst";
    else if (len[L_NEED] != n_groups || len[L_EPTR] != n_groups + 1 || offsets_ok(eptr, len[L_EPTR], len[L_EVAL]))
        bad = "ends_ptr";
    else if (in_range(eval, len[L_EVAL], n_s, n_ev))
        bad = "ends_val";
    else if (len[L_OWN_START] != n_e || len[L_END_RANK] != n_e || len[L_END_END] != n_e
             || len[L_END_NODE] != n_e || in_range(end_group, n_e, 0, n_groups) || in_range(own_start, n_e, 0, n_s)
             || in_range(end_rank, n_e, 0, n_codes))
        bad = "ends";
    else if (len[L_WAVE] != n_ev || len[L_LEV] != n_ev)
        bad = "wave";
    else {
        for (Py_ssize_t q = 0; q < len[L_VAL] && !bad; q++)
            if (val[q] < 0 || (val[q] >> 1) >= n_s)
                bad = "succ_val";
    }
    if (bad) {
        release(b, L_N);
        PyErr_Format(PyExc_ValueError, "levels: %s out of range", bad);
        return NULL;
    }
    LevelScratch s = {0};
    size_t nn = (size_t)(n_ev > 0 ? n_ev : 1);
    s.ev = malloc(nn * sizeof(int64_t));
    s.fr = malloc(nn * sizeof(int64_t));
    s.count = calloc((size_t)n_groups, sizeof(int64_t));
    s.gwave = calloc((size_t)n_groups, sizeof(int64_t));
    s.best = malloc((size_t)(n_codes > 0 ? n_codes : 1) * sizeof(int64_t));
    if (!s.ev || !s.fr || !s.count || !s.gwave || !s.best) {
        free(s.ev); free(s.fr); free(s.count); free(s.gwave); free(s.best);
        release(b, L_N);
        return PyErr_NoMemory();
    }
    int64_t forced = 0, k = 0;
    int cycle = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_ev; i++) {
        wave[i] = 0;
        lev[i] = -1;
    }
    Py_ssize_t n_fr = 0, done = 0; /* done: events with a level */
    for (Py_ssize_t i = 0; i < n_s; i++)
        if (indeg[i] == 0)
            s.fr[n_fr++] = i;
    for (;;) {
        while (n_fr) {
            Py_ssize_t n_rel = 0;
            for (Py_ssize_t i = 0; i < n_fr; i++) {
                int64_t f = s.fr[i];
                lev[f] = k;
                done++;
                if (arr_inst[f] < 0) {
                    s.ev[n_rel++] = f;
                    continue;
                }
                arrive(arr_inst[f], wave[f], k, need, eptr, eval, s.count, s.gwave, wave, lev, s.ev, &n_rel);
                if (arr_also[f] >= 0)
                    arrive(arr_also[f], wave[f], k, need, eptr, eval, s.count, s.gwave, wave, lev, s.ev,
                           &n_rel);
            }
            for (Py_ssize_t i = 0; i < n_rel; i++)
                done += s.ev[i] >= n_s; /* ends released with the arrivals */
            k++;
            n_fr = n_rel ? release_events(s.ev, n_rel, ptr, val, indeg, wave, s.fr) : 0;
        }
        if (done >= n_ev)
            break;
        /* inconsistent matching (crossing orders): each rank's earliest blocked end (by its measured end, then
           node), with what has arrived; the ends whose own kernel has arrived first, else any */
        Py_ssize_t n_rel = 0;
        for (int pass = 0; pass < 2 && n_rel == 0; pass++) {
            for (Py_ssize_t r = 0; r < n_codes; r++)
                s.best[r] = -1;
            for (Py_ssize_t j = 0; j < n_e; j++) {
                if (lev[n_s + j] >= 0 || (pass == 0 && lev[own_start[j]] < 0))
                    continue;
                int64_t r = end_rank[j], o = s.best[r];
                if (o < 0 || end_end[j] < end_end[o] || (end_end[j] == end_end[o] && end_node[j] < end_node[o]))
                    s.best[r] = j;
            }
            for (Py_ssize_t r = 0; r < n_codes; r++)
                if (s.best[r] >= 0)
                    s.ev[n_rel++] = n_s + s.best[r];
        }
        if (n_rel == 0) { /* start events wait for each other: a cycle */
            cycle = 1;
            break;
        }
        for (Py_ssize_t i = 0; i < n_rel; i++) {
            int64_t e = s.ev[i];
            lev[e] = k;
            wave[e] = s.gwave[end_group[e - n_s]];
        }
        forced += n_rel;
        done += n_rel;
        k++;
        n_fr = release_events(s.ev, n_rel, ptr, val, indeg, wave, s.fr);
    }
    Py_END_ALLOW_THREADS
    free(s.ev); free(s.fr); free(s.count); free(s.gwave); free(s.best);
    release(b, L_N);
    if (cycle) {
        PyErr_SetString(PyExc_ValueError, "levels: the events wait for each other (a cycle)");
        return NULL;
    }
    return PyLong_FromLongLong(forced);
}

/* ------------------------------------------------------------------------------------------------ run */

enum {
    R_X, R_S_OFF, R_BROW, R_SROW, R_HEAD, R_FIRST, R_BIS, R_H_OFF, R_H_POS, R_SCAN, R_D_OFF, R_D_SRC, R_D_SLACK,
    R_D_FIRST, R_D_POS, R_DG_OFF, R_V_OFF, R_V_ARR_OFF, R_V_ARR, R_V_WAIT, R_V_DTR, R_E_OFF, R_E_NODE, R_E_VIEW,
    R_SLACK, R_DUR, R_DDUR, R_DGAP, R_HIDE, R_DTR, R_OUT_S, R_OUT_E, R_N
};

static const Spec RUN_SPEC[R_N] = {
    {"x", T_I64, 0}, {"s_off", T_I64, 0}, {"brow", T_I64, 0}, {"srow", T_I64, 0}, {"head", T_BOOL, 0},
    {"run_first", T_I64, 0}, {"bind_is_stream", T_BOOL, 0}, {"h_off", T_I64, 0}, {"h_pos", T_I64, 0},
    {"scan", T_BOOL, 0}, {"d_off", T_I64, 0}, {"d_src", T_I64, 0}, {"d_slack", T_F64, 0}, {"d_first", T_I64, 0},
    {"d_pos", T_I64, 0}, {"dg_off", T_I64, 0}, {"v_off", T_I64, 0}, {"v_arr_off", T_I64, 0}, {"v_arr", T_I64, 0},
    {"v_wait", T_F64, 0}, {"v_dtr", T_I64, 0}, {"e_off", T_I64, 0}, {"e_node", T_I64, 0}, {"e_view", T_I64, 0},
    {"slack", T_I64, 0}, {"dur", T_I64, 0}, {"ddur", T_F64, 0}, {"dgap", T_F64, 0}, {"hide", T_BOOL, 0},
    {"dtr", T_F64, 0}, {"out_s", T_F64, 1}, {"out_e", T_F64, 1},
};

typedef struct {
    /* schedule */
    const int64_t *x, *s_off, *brow, *srow, *first, *h_off, *h_pos, *d_off, *d_src, *d_first, *d_pos, *dg_off,
        *v_off, *v_arr_off, *v_arr, *v_dtr, *e_off, *e_node, *e_view, *slack, *dur;
    const uint8_t *head, *bis, *scan, *hide;
    const double *d_slack, *v_wait, *ddur, *dgap, *dtr;
    double *ds, *de;
    Py_ssize_t n, s, n_inst, n_waves;
} Run;

/* What the chain adds to the predecessor's end at position p (replay.run's ``coef``). */
static inline double coef(const Run *r, int64_t p, Py_ssize_t c)
{
    double neg_slack = -(double)r->slack[r->x[p]];
    return r->bis[p] ? npmax(r->dgap[r->x[p] * r->s + c], neg_slack) : neg_slack;
}

/* One wave: its starts (xin: (hi - lo) x s scratch) and the ends of the groups whose last arrival it holds
   (best: views x s scratch; tmp: 3 x s). Returns 0, or -1 where the schedule points outside the wave. */
static int one_wave(const Run *r, Py_ssize_t k, double *xin, double *best, double *tmp)
{
    const Py_ssize_t s = r->s;
    const int64_t lo = r->s_off[k], hi = r->s_off[k + 1];
    double *de = r->de, *ds = r->ds;
    if (hi > lo) {
        for (int64_t p = lo; p < hi; p++) { /* its binding predecessor off the chain (or the start, or none) */
            const double *src = de + r->brow[p] * s, *gap = r->dgap + r->x[p] * s;
            double *out = xin + (p - lo) * s;
            for (Py_ssize_t c = 0; c < s; c++)
                out[c] = src[c] + gap[c];
        }
        const int64_t dl = r->d_off[k], dh = r->d_off[k + 1], gl = r->dg_off[k], gh = r->dg_off[k + 1];
        if (dh > dl) { /* not before its further dependencies end */
            const int reduce = gh - gl < dh - dl;
            for (int64_t g = gl; g < gh; g++) {
                int64_t j0 = reduce ? dl + r->d_first[g] : dl + (g - gl);
                int64_t j1 = reduce ? (g + 1 < gh ? dl + r->d_first[g + 1] : dh) : j0 + 1;
                int64_t t = r->d_pos[g];
                if (j0 < dl || j1 > dh || j1 <= j0 || t < 0 || t >= hi - lo)
                    return -1;
                double *out = xin + t * s;
                const double *src = de + r->d_src[j0] * s;
                for (Py_ssize_t c = 0; c < s; c++) /* np.maximum.reduceat over its dependencies, per scenario */
                    tmp[c] = src[c] - r->d_slack[j0];
                for (int64_t j = j0 + 1; j < j1; j++) {
                    src = de + r->d_src[j] * s;
                    for (Py_ssize_t c = 0; c < s; c++)
                        tmp[c] = npmax(tmp[c], src[c] - r->d_slack[j]);
                }
                for (Py_ssize_t c = 0; c < s; c++)
                    out[c] = npmax(out[c], tmp[c]);
            }
        }
        for (int64_t q = r->h_off[k]; q < r->h_off[k + 1]; q++) { /* runs' heads: after their predecessor */
            int64_t p = r->h_pos[q];
            if (p < lo || p >= hi)
                return -1;
            const double *src = de + r->srow[p] * s;
            double *out = xin + (p - lo) * s;
            for (Py_ssize_t c = 0; c < s; c++)
                out[c] = npmax(out[c], src[c] + coef(r, p, c));
        }
        if (r->scan[k]) { /* Δs_i = acc_i + running max of (x_j − acc_j), acc from the run's head */
            for (int64_t p = lo; p < hi; p++)
                if (r->first[p] < lo || r->first[p] > p || (r->first[p] == p) != (r->head[p] != 0))
                    return -1;
            /* per scenario: the wave's prefix sum (acc), its value at the run's head, the run's running maximum */
            double *acc = tmp, *at_head = tmp + s, *run_best = tmp + 2 * s;
            for (int64_t p = lo; p < hi; p++) {
                const int head = r->head[p] != 0;
                const double *dd_prev = head ? NULL : r->ddur + r->x[p - 1] * s;
                double *v = xin + (p - lo) * s;
                for (Py_ssize_t c = 0; c < s; c++) {
                    /* the increments (a head's is 0) added as np.cumsum adds them */
                    double inc = head ? 0.0 : coef(r, p, c) + dd_prev[c];
                    acc[c] = p == lo ? inc : acc[c] + inc;
                    if (head)
                        at_head[c] = acc[c];
                    double a = acc[c] - at_head[c];
                    double z = npmax(v[c] - a, NEG);
                    /* the running maximum within the run (complex maximum: of equal values, the earlier) */
                    run_best[c] = head ? z : (run_best[c] >= z ? run_best[c] : z);
                    v[c] = run_best[c] > NEG / 2 ? a + run_best[c] : -HUGE_VAL;
                }
            }
        }
        for (int64_t p = lo; p < hi; p++) {
            int64_t node = r->x[p];
            const double *in = xin + (p - lo) * s, *dd = r->ddur + node * s;
            double *o_s = ds + node * s, *o_e = de + node * s;
            for (Py_ssize_t c = 0; c < s; c++) {
                o_s[c] = in[c];
                o_e[c] = in[c] + dd[c]; /* a matched kernel's end is set again when its group ends */
            }
        }
    }
    const int64_t vl = r->v_off[k], vh = r->v_off[k + 1];
    if (vh > vl) { /* groups whose last arrival was in this wave end now: last arrival + transfer */
        for (int64_t v = vl; v < vh; v++) {
            double *out = best + (v - vl) * s;
            int64_t a0 = r->v_arr_off[v], a1 = r->v_arr_off[v + 1];
            for (Py_ssize_t c = 0; c < s; c++) /* a forced end before anything of its group arrived: -inf */
                out[c] = -HUGE_VAL;
            for (int64_t j = a0; j < a1; j++) { /* np.maximum.reduceat over its arrivals, per scenario */
                const double *src = ds + r->v_arr[j] * s;
                for (Py_ssize_t c = 0; c < s; c++) {
                    double got = src[c] - r->v_wait[j];
                    out[c] = j == a0 ? got : npmax(out[c], got);
                }
            }
        }
        for (int64_t e = r->e_off[vl]; e < r->e_off[vh]; e++) {
            int64_t node = r->e_node[e], v = r->e_view[e];
            if (v < 0 || v >= vh - vl)
                return -1;
            const double *b = best + v * s;
            double dur = (double)r->dur[node];
            for (Py_ssize_t c = 0; c < s; c++)
                de[node * s + c] = r->hide[node * s + c] ? ds[node * s + c] - dur
                                                         : b[c] + r->dtr[c * r->n_inst + r->v_dtr[vl + v]];
        }
    }
    return 0;
}

static PyObject *run(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t s, n_inst;
    PyObject *arrays;
    if (!PyArg_ParseTuple(args, "nnO", &s, &n_inst, &arrays))
        return NULL;
    Py_buffer b[R_N];
    Py_ssize_t len[R_N];
    if (take(arrays, RUN_SPEC, R_N, b, len) < 0)
        return NULL;
    Run r = {
        .x = b[R_X].buf, .s_off = b[R_S_OFF].buf, .brow = b[R_BROW].buf, .srow = b[R_SROW].buf,
        .first = b[R_FIRST].buf, .h_off = b[R_H_OFF].buf, .h_pos = b[R_H_POS].buf, .d_off = b[R_D_OFF].buf,
        .d_src = b[R_D_SRC].buf, .d_first = b[R_D_FIRST].buf, .d_pos = b[R_D_POS].buf, .dg_off = b[R_DG_OFF].buf,
        .v_off = b[R_V_OFF].buf, .v_arr_off = b[R_V_ARR_OFF].buf, .v_arr = b[R_V_ARR].buf, .v_dtr = b[R_V_DTR].buf,
        .e_off = b[R_E_OFF].buf, .e_node = b[R_E_NODE].buf, .e_view = b[R_E_VIEW].buf, .slack = b[R_SLACK].buf,
        .dur = b[R_DUR].buf, .head = b[R_HEAD].buf, .bis = b[R_BIS].buf, .scan = b[R_SCAN].buf,
        .hide = b[R_HIDE].buf, .d_slack = b[R_D_SLACK].buf, .v_wait = b[R_V_WAIT].buf, .ddur = b[R_DDUR].buf,
        .dgap = b[R_DGAP].buf, .dtr = b[R_DTR].buf,
        .n = len[R_X], .s = s, .n_inst = n_inst, .n_waves = len[R_SCAN],
    };
    const Py_ssize_t n = r.n, nw = r.n_waves, n_views = len[R_V_DTR];
    const char *bad = NULL;
    /* sizes, offsets and every index against what it indexes */
    if (s < 1 || n_inst < 0)
        bad = "sizes";
    else if (len[R_BROW] != n || len[R_SROW] != n || len[R_HEAD] != n || len[R_FIRST] != n || len[R_BIS] != n
             || len[R_SLACK] != n || len[R_DUR] != n)
        bad = "per-event arrays";
    else if (len[R_DDUR] != n * s || len[R_DGAP] != n * s || len[R_HIDE] != n * s || len[R_OUT_S] != n * s
             || len[R_OUT_E] != n * s || len[R_DTR] != s * n_inst)
        bad = "per-scenario arrays";
    else if (in_range(r.x, n, 0, n) || in_range(r.brow, n, 0, n + 2) || in_range(r.srow, n, 0, n + 2))
        bad = "x, brow or srow";
    else if (len[R_S_OFF] != nw + 1 || offsets_ok(r.s_off, nw + 1, n) || len[R_H_OFF] != nw + 1
             || offsets_ok(r.h_off, nw + 1, len[R_H_POS]) || len[R_D_OFF] != nw + 1
             || offsets_ok(r.d_off, nw + 1, len[R_D_SRC]) || len[R_DG_OFF] != nw + 1
             || offsets_ok(r.dg_off, nw + 1, len[R_D_FIRST]) || len[R_V_OFF] != nw + 1
             || offsets_ok(r.v_off, nw + 1, n_views))
        bad = "wave offsets";
    else if (len[R_D_SLACK] != len[R_D_SRC] || len[R_D_POS] != len[R_D_FIRST] || in_range(r.d_src, len[R_D_SRC], 0, n + 2))
        bad = "dependencies";
    else if (len[R_V_ARR_OFF] != n_views + 1 || offsets_ok(r.v_arr_off, n_views + 1, len[R_V_ARR])
             || len[R_V_WAIT] != len[R_V_ARR] || in_range(r.v_arr, len[R_V_ARR], 0, n)
             || in_range(r.v_dtr, n_views, 0, n_inst))
        bad = "views";
    else if (len[R_E_OFF] != n_views + 1 || offsets_ok(r.e_off, n_views + 1, len[R_E_NODE])
             || len[R_E_VIEW] != len[R_E_NODE] || in_range(r.e_node, len[R_E_NODE], 0, n))
        bad = "ends";
    if (bad) {
        release(b, R_N);
        PyErr_Format(PyExc_ValueError, "run: %s out of range", bad);
        return NULL;
    }
    Py_ssize_t widest = 1, most_views = 1;
    for (Py_ssize_t k = 0; k < nw; k++) {
        if (r.s_off[k + 1] - r.s_off[k] > widest)
            widest = r.s_off[k + 1] - r.s_off[k];
        if (r.v_off[k + 1] - r.v_off[k] > most_views)
            most_views = r.v_off[k + 1] - r.v_off[k];
    }
    /* event-major (rows by event id, as the numpy path lays them out; de's row n: the job's start (0), row
       n+1: none (-inf)), and the scratch of a wave */
    r.ds = malloc((size_t)(n > 0 ? n : 1) * (size_t)s * sizeof(double));
    r.de = malloc((size_t)(n + 2) * (size_t)s * sizeof(double));
    double *xin = malloc((size_t)widest * (size_t)s * sizeof(double));
    double *best = malloc((size_t)most_views * (size_t)s * sizeof(double));
    double *tmp = malloc(3 * (size_t)s * sizeof(double));
    if (!r.ds || !r.de || !xin || !best || !tmp) {
        free(r.ds);
        free(r.de);
        free(xin);
        free(best);
        free(tmp);
        release(b, R_N);
        return PyErr_NoMemory();
    }
    double *out_s = b[R_OUT_S].buf, *out_e = b[R_OUT_E].buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < (n + 2) * s; i++)
        r.de[i] = i < (n + 1) * s ? 0.0 : -HUGE_VAL;
    for (Py_ssize_t i = 0; i < n * s; i++)
        r.ds[i] = 0.0;
    for (Py_ssize_t k = 0; k < nw && !failed; k++)
        failed = one_wave(&r, k, xin, best, tmp) < 0;
    /* (S, events), +0.0 added (replay.run: a zero is +0.0 whichever of two equal maxima was kept), in blocks of
       events so both sides of the transpose stay in cache */
    for (Py_ssize_t i0 = 0; i0 < n && !failed; i0 += 64) {
        Py_ssize_t i1 = i0 + 64 < n ? i0 + 64 : n;
        for (Py_ssize_t c = 0; c < s; c++)
            for (Py_ssize_t i = i0; i < i1; i++) {
                out_s[c * n + i] = r.ds[i * s + c] + 0.0;
                out_e[c * n + i] = r.de[i * s + c] + 0.0;
            }
    }
    Py_END_ALLOW_THREADS
    free(r.ds);
    free(r.de);
    free(xin);
    free(best);
    free(tmp);
    release(b, R_N);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, "run: the schedule points outside a wave");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"levels", levels, METH_VARARGS, "levels(n_groups, n_rank_codes, arrays) -> forced ends (whatif/native.py)"},
    {"run", run, METH_VARARGS, "run(n_scenarios, n_instances, arrays): fills ds and de (whatif/native.py)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_waves", "The replay's loops in C (whatif/native.py).", 0,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__waves(void) { return PyModule_Create(&module); }
