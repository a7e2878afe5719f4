#!/bin/bash
# test_install.sh — `cmake --install` into a fresh prefix: the program runs from there, the man page
# and the bash completion are in place and usable, and a C program builds against the installed
# runtime through pkg-config alone and runs. Usage: test_install.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
fail() { echo "FAIL: $*" >&2; exit 1; }
"$prefix/bin/mstune" -V | grep -q '^mstune [0-9]' || fail "installed mstune -V"
man1=$(find "$prefix" -name mstune.1 -path '*man1*' | head -1)
[ -n "$man1" ] || fail "no man1/mstune.1 under $prefix"
for c in $("$prefix/bin/mstune" --help | awk '/^commands:/{on=1;next} on&&/^  [a-z]/{print $1} on&&/^$/{exit}'); do
  grep -q "^\.SS \"mstune $c " "$man1" || fail "the man page has no section for '$c'"
done
if command -v man >/dev/null; then
  MANWIDTH=100 man -l "$man1" 2>/dev/null | grep -q 'EXIT STATUS' || fail "man -l cannot render mstune.1"
fi
comp="$prefix/share/bash-completion/completions/mstune"
[ -f "$comp" ] || fail "no bash completion at $comp"
bash -c "source '$comp'; COMP_WORDS=(mstune train job.yaml --set amp.le); COMP_CWORD=4; _mstune; [[ \${COMPREPLY[*]} == amp.level= ]]" \
  || fail "the completion does not complete --set amp.le to amp.level="
pc=$(find "$prefix" -name mstune-runtime.pc | head -1)
[ -n "$pc" ] || fail "no mstune-runtime.pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
cat > "$prefix/hello.c" <<'C'
#include <stdio.h>
#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
int main(void) {
    mst_ctx *ctx = mst_ctx_new(&(mst_ctx_config){.seed = 1, .n_threads = 1});
    mst_tensor *a = mst_tensor_zeros(ctx, MST_DTYPE_F32, 1, (int64_t[]){4});
    for (int i = 0; i < 4; i++) mst_tensor_f32(a)[i] = (float)i;
    mst_tensor *s = mst_add(ctx, a, a);
    if (!s) { fprintf(stderr, "%s\n", mst_ctx_error(ctx)); return 1; }
    printf("%g\n", mst_tensor_f32(s)[3]);
    mst_ctx_free(ctx);
    return 0;
}
C
cc -std=gnu11 "$prefix/hello.c" -o "$prefix/hello" $(pkg-config --cflags --libs mstune-runtime) || fail "cannot build against mstune-runtime.pc"
[ "$("$prefix/hello")" = 6 ] || fail "the program built against the installed runtime printed $("$prefix/hello")"
# the Python frontend, when this build has it: the package imports from the prefix's site-packages
# in a plain python3, and the installed program finds it for a job's Python model
if [ -f "$build/python/mstune/__init__.py" ]; then
  init=$(find "$prefix" -path '*site-packages/mstune/__init__.py' | head -1)
  [ -n "$init" ] || fail "no mstune Python package under $prefix"
  PYTHONPATH=$(dirname "$(dirname "$init")") /usr/bin/python3 -c 'import mstune; assert (mstune.tensor([1.0]) + 1).item() == 2' \
    || fail "the installed mstune Python package does not import"
  src=$(cd "$(dirname "$0")/../.." && pwd)
  printf 'model: {name: python, file: %s/workloads/python/mlp.py, args: {hidden1: 8, hidden2: 8}}\ndata: {dataset: synthetic, batch_size: 8, synthetic: {samples: 32, test_samples: 8, height: 4, width: 4}}\ntrain: {epochs: 1}\n' \
    "$src" > "$prefix/py.yaml"
  (cd "$prefix" && env -u MSTUNE_PYTHONPATH "$prefix/bin/mstune" train py.yaml -o "$prefix/out-py" >/dev/null) \
    || fail "the installed mstune cannot train a Python model"
fi
echo "install ok: $prefix"
