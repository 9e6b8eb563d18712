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
#      steps 3 and 4 are tools/finish_env.sh, which binder/postBuild and the conda recipe run too;
#   5. a stamp holding the hash of everything above: when it matches, nothing is redone.
# Interrupted builds leave no stamp, so the next run starts over cleanly.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv=${GAN3D_VENV:-$root/.venv}

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] error: %s\n' "$*" >&2; exit 1; }

# Bump when the recipe below changes in a way that needs a rebuilt environment.
RECIPE=3
# The stamp covers the pins and the recipe; the package's own metadata has a stamp of its own, as
# re-installing gan3d (editable) takes seconds while the environment takes minutes.
key=$( (cat requirements.txt requirements-horovod.txt; echo "recipe $RECIPE") | sha256sum | cut -c1-16)
pkg_key=$(sha256sum pyproject.toml | cut -c1-16)

# gan3d itself (editable) and its kernel, as every recipe installs them (tools/finish_env.sh).
install_package() {
    bash tools/finish_env.sh --python "$venv/bin/python" package >/dev/null
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

# Horovod from source (its wheel cached in $GAN3D_CACHE), then gan3d and its kernel: the steps
# that binder/postBuild and the conda recipe run too.
bash tools/finish_env.sh --python "$vpy" horovod \
    || die "the environment was built but Horovod is not (see above)"
install_package

"$vpy" -m pip freeze --exclude-editable >"$venv/freeze.txt"
echo "$key" >"$venv/.gan3d-stamp"
built=$(( $(date +%s) - t0 ))
# what the build cost, for the README's cost line (gan3d.report.claims reads it)
printf '{"seconds": %d, "built_utc": "%s", "cores": %d, "horovod": "%s"}\n' "$built" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(cat "$venv/gan3d-horovod.txt" 2>/dev/null || echo unknown)" \
    >"$venv/gan3d-build.json"
say "environment ready in $built s"
