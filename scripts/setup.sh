#!/usr/bin/env bash
# setup.sh — install the Debian packages mstune needs, only those missing.
# Idempotent: a machine that has everything does nothing. As root it runs apt-get;
# otherwise it prints the exact command for the user to run.
set -euo pipefail

packages=(
  cmake gcc make pkg-config
  libopenblas-dev   # GEMM (sgemm/dgemm) behind matmul, linear and conv2d
  libcmocka-dev     # unit tests
  libcjson-dev      # JSON outputs
  libsqlite3-dev    # profile store
  libunwind-dev     # sampling profiler's stack unwinder
  libyaml-dev       # job files
  zlib1g-dev        # gzip'd IDX datasets
  gnuplot-nox       # charts, driven through a pipe
  libgsl-dev        # t and normal quantiles and CDFs of the gate's statistics (report/stats.c)
  dataset-fashion-mnist  # the real dataset, under /usr/share/datasets/fashion-mnist
  libgsl-dev        # advisor: t quantiles for the accuracy non-inferiority interval
  libdnnl-dev       # oneDNN 2.6: matmul/conv provider in f32 and bf16 (runtime/backend/, dlopen'd at run time)
  wamerican wngerman wfrench witalian wspanish wportuguese wdutch wswedish  # langid dataset: word lists in /usr/share/dict
  clang-14          # make fuzz (libFuzzer) and the clang build CI checks
  libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for clang
  python3-dev       # Python frontend (python/): embedded CPython and the mstune extension module
  libopenmpi-dev openmpi-bin  # data-parallel training over MPI (runtime/comm/comm_mpi.c, --nproc through mpirun)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "mstune setup: missing Debian packages: ${missing[*]}" >&2
  echo "run as root:  apt-get update && $cmd" >&2
  exit 1
fi

echo "mstune setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd
