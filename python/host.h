/* host.h — models written in Python, for the trainer: starts the embedded CPython on first use,
 * loads the model file and wraps what its builder returns as an mst_model whose forward (and
 * loss, when the model defines one) call into Python. Graph mode traces those calls like a C
 * model's; the replay runs in C without Python.
 *
 *     spec.py_file = "/abs/models/mlp.py"; spec.py_args = "{\"hidden\": 64}";
 *     mst_model *m = mst_py_model_new(ctx, &spec, err, sizeof(err));   // NULL: err says why (traceback printed)
 */
#ifndef MST_PYTHON_HOST_H
#define MST_PYTHON_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/model.h"
#include "workloads/zoo.h"

/* True when this build embeds Python (python3-dev was found). */
bool mst_py_available(void);
mst_model *mst_py_model_new(mst_ctx *ctx, const mst_model_spec *spec, char *err, size_t errn);

#endif
