/* host.c — the embedding side of the Python frontend (python/host.h).
 *
 * The interpreter starts once per process and stays (advisor trials load models again and
 * again; a restart of CPython per trial would cost more than the trial). It installs no signal
 * handlers: SIGINT and the sampler's SIGPROF stay the program's. The `mstune._C` module is this
 * binary's own code (put into sys.modules before `import mstune`), so a Python model's ops reach
 * the same runtime, profiler and tracer as the trainer — never a second copy from the .so.
 *
 * A Python exception in the model is printed as Python prints it (traceback with file:line) and
 * becomes the context's error naming the innermost file:line, so the trainer stops with exit 2 and
 * keeps every output written so far.
 */
#include "python/host.h"

#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "python/pyfront.h"

#include <frameobject.h>
#include "profiler/events.h"
#include "profiler/sampler.h"
#include "runtime/ops.h"

bool mst_py_available(void) { return true; }

static char g_pkg_dir[PATH_MAX];
/* profiler range names: the model's Python forward and loss run inside a `dispatch` range, so the
 * interpreter's time between ops is dispatch (host framework work), the ops' kernels stay kernel */
static uint32_t g_name_forward, g_name_loss;     /* the mstune package's folder: frames there are ours, not the model's */

typedef struct {
    PyObject *model;        /* the nn.Module the builder returned */
    PyObject *module_name;  /* its file's module in sys.modules, dropped with the model */
    int training;           /* the mode last set on the model (-1: unknown) */
} py_model;

/* The package folder: $MSTUNE_PYTHONPATH, else the build tree's python/ beside the program, else
 * the install's site-packages relative to bin/. */
static int package_dir(char *out, size_t n) {
    const char *env = getenv("MSTUNE_PYTHONPATH");
    if (env && *env) return snprintf(out, n, "%s", env) < (int)n ? 0 : -1;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) return -1;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    const char *cands[] = {"python", "../" MSTUNE_PY_INSTALL_REL};
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof(probe), "%s/%s/mstune/__init__.py", exe, cands[i]);
        if (access(probe, R_OK) == 0) return snprintf(out, n, "%s/%s", exe, cands[i]) < (int)n ? 0 : -1;
    }
    return -1;
}

static int start_interpreter(char *err, size_t errn) {
    if (Py_IsInitialized()) return 0;
    char pkg[PATH_MAX];
    if (package_dir(pkg, sizeof(pkg)) != 0 || !realpath(pkg, g_pkg_dir)) {
        snprintf(err, errn, "python: the mstune Python package was not found beside the program (python/mstune/) nor under "
                            "../" MSTUNE_PY_INSTALL_REL "; set MSTUNE_PYTHONPATH to the folder holding mstune/");
        return -1;
    }
    g_name_forward = mst_prof_intern("python.forward");
    g_name_loss = mst_prof_intern("python.loss");
    PyConfig cfg;
    PyConfig_InitPythonConfig(&cfg);
    cfg.install_signal_handlers = 0;
    cfg.parse_argv = 0;
    PyStatus st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        snprintf(err, errn, "python: the interpreter did not start: %s", st.err_msg ? st.err_msg : "unknown error");
        return -1;
    }
    PyObject *c = mst_py_module_init();
    PyObject *mods = PyImport_GetModuleDict();     /* borrowed */
    PyObject *path = PySys_GetObject("path");      /* borrowed */
    PyObject *dir = PyUnicode_DecodeFSDefault(g_pkg_dir);
    if (!c || !dir || PyDict_SetItemString(mods, "mstune._C", c) != 0 || !path || PyList_Insert(path, 0, dir) != 0) {
        PyErr_Print();
        snprintf(err, errn, "python: could not set up the mstune module");
        Py_XDECREF(c);
        Py_XDECREF(dir);
        return -1;
    }
    Py_DECREF(c);
    Py_DECREF(dir);
    return 0;
}

/* Print the pending exception as Python would and describe it in one line: "Type: message
 * (file:line in function)", the location being the innermost frame. */
static void describe_exception(char *out, size_t n) {
    PyObject *type = NULL, *val = NULL, *tb = NULL;
    PyErr_Fetch(&type, &val, &tb);
    if (!type) { snprintf(out, n, "unknown Python error"); return; }
    PyErr_NormalizeException(&type, &val, &tb);
    if (tb && val) PyException_SetTraceback(val, tb);
    char where[PATH_MAX + 128] = "";
    if (tb) {
        /* the innermost frame of the model's own code: skip the mstune package's frames */
        PyTracebackObject *t = (PyTracebackObject *)tb, *user = NULL;
        size_t plen = strlen(g_pkg_dir);
        for (PyTracebackObject *i = t; i; i = i->tb_next) {
            PyCodeObject *c = PyFrame_GetCode(i->tb_frame);
            const char *f = PyUnicode_AsUTF8(c->co_filename);
            if (!f || !plen || strncmp(f, g_pkg_dir, plen) != 0) user = i;
            Py_DECREF(c);
            t = i;
        }
        PyErr_Clear();
        if (user) t = user;
        PyCodeObject *code = PyFrame_GetCode(t->tb_frame);
        const char *file = PyUnicode_AsUTF8(code->co_filename), *fn = PyUnicode_AsUTF8(code->co_name);
        snprintf(where, sizeof(where), " (at %s:%d in %s)", file ? file : "?", t->tb_lineno, fn ? fn : "?");
        Py_DECREF(code);
    }
    PyObject *s = val ? PyObject_Str(val) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(out, n, "%s: %s%s", ((PyTypeObject *)type)->tp_name, msg ? msg : "?", where);
    Py_XDECREF(s);
    PyErr_Clear();
    fflush(stdout);
    PyErr_Display(type, val, tb);       /* the full traceback, to stderr */
    fflush(stderr);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
}

static void fail_from_exception(mst_ctx *ctx, const char *what) {
    char msg[640];
    describe_exception(msg, sizeof(msg));
    mst_ctx_clear_error(ctx);          /* the exception is the story; an op's message is inside it */
    mst_ctx_fail(ctx, MST_ERR_ARG, "python model %s: %s", what, msg);
}

static mst_tensor *result_tensor(mst_ctx *ctx, PyObject *r, const char *what) {
    if (!r) { fail_from_exception(ctx, what); return NULL; }
    if (!mst_py_tensor_check(r)) {
        mst_ctx_fail(ctx, MST_ERR_ARG, "python model %s: returned %s, expected an mstune.Tensor", what, Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return NULL;
    }
    mst_tensor *t = mst_tensor_autorelease(ctx, mst_py_tensor_get(r));   /* the caller's pool keeps it */
    Py_DECREF(r);
    return t;
}

static mst_tensor *py_forward(mst_model *m, mst_ctx *ctx, mst_tensor *x, bool training) {
    py_model *p = m->impl;
    if (!x) return NULL;
    if (p->training != (int)training) {
        PyObject *r = PyObject_CallMethod(p->model, "train", "O", training ? Py_True : Py_False);
        if (!r) { fail_from_exception(ctx, "train()"); return NULL; }
        Py_DECREF(r);
        p->training = training;
    }
    PyObject *xo = mst_py_tensor_wrap(x);
    if (!xo) { fail_from_exception(ctx, "forward"); return NULL; }
    mst_prof_op_begin(MST_CAT_DISPATCH, g_name_forward, -1);
    PyObject *r = PyObject_CallOneArg(p->model, xo);
    mst_prof_op_end(MST_CAT_DISPATCH, g_name_forward, -1);
    mst_sampler_set_label(NULL);           /* C code from here on (loss, backward, optimizer) */
    Py_DECREF(xo);
    return result_tensor(ctx, r, "forward");
}

static mst_tensor *py_loss(mst_model *m, mst_ctx *ctx, mst_tensor *out, mst_tensor *target) {
    py_model *p = m->impl;
    if (!out || !target) return NULL;
    PyObject *a = mst_py_tensor_wrap(out), *b = mst_py_tensor_wrap(target);
    mst_prof_op_begin(MST_CAT_DISPATCH, g_name_loss, -1);
    PyObject *r = a && b ? PyObject_CallMethod(p->model, "loss", "OO", a, b) : NULL;
    mst_prof_op_end(MST_CAT_DISPATCH, g_name_loss, -1);
    mst_sampler_set_label(NULL);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return result_tensor(ctx, r, "loss");
}

static void py_model_free(void *impl) {
    py_model *p = impl;
    if (!p) return;
    Py_XDECREF(p->model);
    if (p->module_name) {
        PyObject *mods = PyImport_GetModuleDict();
        if (PyDict_DelItem(mods, p->module_name) != 0) PyErr_Clear();
        Py_DECREF(p->module_name);
    }
    PyObject *gc = PyImport_ImportModule("gc");    /* cycles holding tensors go while the context lives */
    PyObject *r = gc ? PyObject_CallMethod(gc, "collect", NULL) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(gc);
    PyErr_Clear();
    mst_py_bind_ctx(NULL);
    free(p);
}

/* Registers each (name, tensor) pair of the iterable into the model's list (one reference each). */
static int collect(mst_model *m, PyObject *pairs, bool buffers, char *err, size_t errn) {
    PyObject *it = PyObject_GetIter(pairs);
    if (!it) return -1;
    PyObject *pair;
    while ((pair = PyIter_Next(it))) {
        PyObject *t = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 ? PyTuple_GET_ITEM(pair, 1) : NULL;
        if (!t || !mst_py_tensor_check(t)) {
            snprintf(err, errn, "python model: %s must yield (name, mstune.Tensor) pairs", buffers ? "named_buffers()" : "named_parameters()");
            Py_DECREF(pair);
            Py_DECREF(it);
            return -2;
        }
        mst_tensor ***list = buffers ? &m->buffers : &m->params;
        int *cnt = buffers ? &m->n_buffers : &m->n_params, *cap = buffers ? &m->cap_buffers : &m->cap_params;
        if (*cnt == *cap) {
            int c = *cap ? *cap * 2 : 16;
            mst_tensor **nl = realloc(*list, (size_t)c * sizeof(*nl));
            if (!nl) { Py_DECREF(pair); Py_DECREF(it); snprintf(err, errn, "out of memory"); return -2; }
            *list = nl;
            *cap = c;
        }
        (*list)[(*cnt)++] = mst_tensor_retain(mst_py_tensor_get(t));
        Py_DECREF(pair);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

mst_model *mst_py_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn) {
    if (!spec->py_file || !*spec->py_file) {
        snprintf(err, errn, "model python: set model.file to the Python file that defines build(info, **args)");
        return NULL;
    }
    if (start_interpreter(err, errn) != 0) return NULL;
    mst_py_bind_ctx(ctx);
    mst_model *m = calloc(1, sizeof(*m));
    py_model *p = calloc(1, sizeof(*p));
    PyObject *host = NULL, *res = NULL;
    if (!m || !p) {
        snprintf(err, errn, "out of memory building a Python model");
        goto fail;
    }
    snprintf(m->name, sizeof(m->name), "python");
    m->impl = p;
    m->free_impl = py_model_free;
    p->training = -1;
    host = PyImport_ImportModule("mstune._host");
    if (host)
        res = PyObject_CallMethod(host, "load", "ss(iii)iiii", spec->py_file, spec->py_args ? spec->py_args : "{}", spec->in_c,
                                  spec->in_h, spec->in_w, spec->classes, spec->vocab, (int)spec->tokens, (int)spec->paired);
    if (!res) {
        char msg[640];
        describe_exception(msg, sizeof(msg));
        snprintf(err, errn, "model python (%s): %s", spec->py_file, msg);
        goto fail;
    }
    /* load() returns (model, module name, named params, named buffers, metric name, has own loss) */
    PyObject *model, *modname, *params, *bufs;
    const char *metric;
    int own_loss;
    if (!PyArg_ParseTuple(res, "OOOOsp", &model, &modname, &params, &bufs, &metric, &own_loss)) {
        PyErr_Clear();
        snprintf(err, errn, "model python: internal error: mstune._host.load returned an unexpected value");
        goto fail;
    }
    p->model = Py_NewRef(model);
    p->module_name = Py_NewRef(modname);
    int rc = collect(m, params, false, err, errn);
    if (rc == 0) rc = collect(m, bufs, true, err, errn);
    if (rc == -1) {
        char msg[640];
        describe_exception(msg, sizeof(msg));
        snprintf(err, errn, "model python (%s): %s", spec->py_file, msg);
    }
    if (rc != 0) goto fail;
    m->metric = MST_METRIC_COUNT;
    for (int k = 0; k < MST_METRIC_COUNT; k++)
        if (strcmp(mst_metric_name((mst_metric)k), metric) == 0) m->metric = (mst_metric)k;
    if (m->metric == MST_METRIC_COUNT) {
        snprintf(err, errn, "model python (%s): metric '%s' is not one mstune evaluates (accuracy or psnr)", spec->py_file, metric);
        goto fail;
    }
    m->forward = py_forward;
    m->loss = own_loss ? py_loss : NULL;
    Py_DECREF(res);
    Py_DECREF(host);
    return m;
fail:
    Py_XDECREF(res);
    Py_XDECREF(host);
    if (m) mst_model_free(m);
    else free(p);
    return NULL;
}
