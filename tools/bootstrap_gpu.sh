#!/usr/bin/env bash
# The GPU variant of the environment: TensorFlow 2.18.1 with CUDA from PyPI's NVIDIA wheels, and
# Horovod 0.28.1 built with NCCL for GPU all-reduces (one MPI rank per GPU, as the paper ran).
#
#   CUDA_HOME=/path/to/cuda-12.x tools/bootstrap_gpu.sh      # or: make env GPU=1
#   GAN3D_VENV=/path tools/bootstrap_gpu.sh                   # default: .venv-gpu in the checkout
#
# Compiling needs no GPU, but it needs a CUDA 12 toolkit's `nvcc` (Horovod compiles CUDA kernels
# for its fusion buffer): PyPI's nvidia-cuda-nvcc-cu12 wheels (12.0-12.9) carry only ptxas, and
# the only PyPI wheel with nvcc (nvidia-cuda-nvcc 13.x) is CUDA 13, which TensorFlow 2.18.1
# (built for CUDA 12.5) does not match and which no longer compiles for the paper's P100
# (compute capability 6.0). So the toolkit comes from the site (a `cuda/12.x` module) or NVIDIA's
# installer; everything else - CUDA runtime, cuBLAS, cuDNN, NCCL - comes from PyPI.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=${GAN3D_VENV:-$root/.venv-gpu}
say() { printf '[bootstrap-gpu] %s\n' "$*" >&2; }
die() { printf '[bootstrap-gpu] error: %s\n' "$*" >&2; exit 1; }

nvcc=""
if [[ -n "${CUDA_HOME:-}" && -x "$CUDA_HOME/bin/nvcc" ]]; then
    nvcc="$CUDA_HOME/bin/nvcc"
elif command -v nvcc >/dev/null 2>&1; then
    nvcc=$(command -v nvcc)
fi
[[ -n "$nvcc" ]] || die "no CUDA 12 compiler: set CUDA_HOME to a CUDA 12.x toolkit (a site's cuda/12.x module, or NVIDIA's installer) or put its nvcc on PATH. PyPI cannot provide it: nvidia-cuda-nvcc-cu12 carries ptxas only, and nvidia-cuda-nvcc (with nvcc) is CUDA 13, which TensorFlow 2.18.1 (CUDA 12.5) does not match"
release=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
[[ "$release" == 12.* ]] || die "$nvcc is CUDA $release; TensorFlow 2.18.1 is built for CUDA 12.5: use a CUDA 12.x toolkit"
cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)

py=${GAN3D_PYTHON:-python3.11}
command -v "$py" >/dev/null || die "Python 3.11 not found (set GAN3D_PYTHON)"
t0=$(date +%s)
say "building the GPU environment in $venv with nvcc $release from $cuda_home"
rm -rf "$venv"
"$py" -m venv "$venv"
vpy="$venv/bin/python"
export PATH="$venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1
"$vpy" -m pip install --quiet -r requirements-gpu.txt -r <(grep -v '^tensorflow-cpu==' requirements.txt)
command -v cmake >/dev/null 2>&1 || "$vpy" -m pip install --quiet 'cmake==3.31.6'
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
nccl="$site/nvidia/nccl"
[[ -f "$nccl/include/nccl.h" ]] || die "the nvidia-nccl-cu12 wheel is missing from $site"
ln -sf libnccl.so.2 "$nccl/lib/libnccl.so"      # the linker looks for the unversioned name
say "building Horovod with NCCL (GPU all-reduce), MPI and Gloo"
HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_HOME="$nccl" HOROVOD_NCCL_LINK=SHARED \
HOROVOD_CUDA_HOME="$cuda_home" HOROVOD_BUILD_CUDA_CC_LIST="${GAN3D_CUDA_CC_LIST:-60,70,75,80,86,90}" \
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
    "$vpy" -m pip install --quiet --no-deps --no-build-isolation --no-cache-dir \
    -r requirements-horovod.txt
"$vpy" -m pip install --quiet --no-deps --no-build-isolation -e .
"$vpy" - <<'PY' || die "Horovod was built without NCCL or MPI (see above)"
import horovod.tensorflow as hvd
missing = [n for n, ok in (("NCCL", hvd.nccl_built()), ("MPI", hvd.mpi_built())) if not ok]
if missing:
    raise SystemExit(f"Horovod lacks {', '.join(missing)}")
PY
say "GPU environment ready in $(( $(date +%s) - t0 )) s; check a GPU node with: $venv/bin/gan3d doctor"
