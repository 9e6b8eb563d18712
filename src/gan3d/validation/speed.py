"""How fast the GAN simulates showers: inference on this machine, the synthetic generator, Geant4.

:func:`inference_speed` measures GAN inference (showers per second at several batch sizes, in
float32 and, where the CPU has bfloat16 arithmetic, bfloat16), through the generator's own layers
("GAN") and through the same network with its upsampling folded into the convolutions ("GAN,
folded": :mod:`gan3d.gan.inference`, what ``gan3d simulate`` runs), next to the synthetic
generator; :data:`PUBLISHED_SPEED` holds published
numbers for Geant4 on this calorimeter, with their source. ``bench/bench_inference.py`` runs it.
"""

from __future__ import annotations

import time

import numpy as np

from .. import console
from ..data import showers
from ..io import provenance

__all__ = ["PUBLISHED_SPEED", "inference_speed", "speed_table"]

log = console.get_logger(__name__)

# Published speed of Geant4 relative to 3DGAN for this calorimeter, quoted with its source. There
# is no Geant4 here, so its showers/s on this machine can only be *estimated* from the published
# ratio and the GAN speed measured here (done in :func:`inference_speed`, and labelled so).
PUBLISHED_SPEED: list[dict] = [{
    "label": "Geant4 (estimate from published ratio)",
    "gan_int8_over_geant4": 67000.0,  # "total speed-up ... (67 000x)" for the int8 3DGAN
    "int8_over_float32": 1.73,  # "1.73x speed-up ... compared to the initial float32 model"
    "source": ("F. Rehm, S. Vallecorsa, V. Saletore et al., Reduced Precision Strategies for Deep "
               "Learning: A High Energy Physics Generative Adversarial Network Use Case, ICPRAM "
               "2021, pp. 251-258, doi:10.5220/0010245002510258 (conclusions): 3DGAN on Intel "
               "CPUs, CLIC electromagnetic calorimeter showers"),
    "caveat": ("order of magnitude only: the ratio was measured on other hardware, where the GAN "
               "used a whole multi-core Intel server; Geant4 simulates one shower per core"),
}]


def speed_table(speed: dict) -> str:
    """A Markdown table of :func:`inference_speed` output, the published estimate last."""
    rows = [[r["source"], r["precision"], r["batch_size"], f"{r['showers_per_s']:.3g}"]
            for r in speed["rows"]]
    rows += [[p["label"], "-", "-", f"{p['showers_per_s']:.2g}"]
             for p in speed.get("published", []) if p.get("showers_per_s")]
    return console.table(rows, ["source", "precision", "batch", "showers/s"])


def _time_calls(fn, n_calls: int) -> float:
    t = time.perf_counter()
    for _ in range(n_calls):
        fn()
    return time.perf_counter() - t


def _gan_rows(base, batch_sizes, precisions, min_showers: int, max_seconds: float,
              repeats: int, seed: int, progress: bool) -> list[dict]:
    """Timed ``predict_on_batch`` per batch size, of the generator's own layers and of the folded
    network, per precision; all variants interleaved repeat by repeat so that their ratios are
    measured under the same machine state."""
    from ..gan import model  # imports TensorFlow
    from ..gan.inference import inference_network

    nets = {}
    for p in precisions:
        nets[("GAN", p)] = inference_network(base, p, fold=False)
        nets[("GAN, folded", p)] = inference_network(base, p)
    rows = []
    for b in batch_sizes:
        latent = model.latent_vectors(np.linspace(10, 500, b), seed)
        calls, runs = {}, {k: [] for k in nets}
        for k, net in nets.items():
            net.predict_on_batch(latent)  # warm-up: traces and compiles the predict function
            once = _time_calls(lambda net=net: net.predict_on_batch(latent), 1)
            calls[k] = max(1, min(-(-min_showers // b), int(max_seconds / once)))
        for _ in range(repeats):
            for k, net in nets.items():
                t = _time_calls(lambda net=net: net.predict_on_batch(latent), calls[k])
                runs[k].append(calls[k] * b / t)
        for (source, p) in nets:
            rows.append({"source": source, "precision": p, "batch_size": b,
                         "showers_per_s": float(np.median(runs[(source, p)])),
                         "runs": runs[(source, p)]})
            if progress:
                log.info("%-11s %-8s batch %4d: %8.2f showers/s", source, p, b,
                         rows[-1]["showers_per_s"])
    return rows


def inference_speed(generator=None, batch_sizes=(1, 8, 32), precisions=None,
                    min_showers: int = 64, max_seconds: float = 2.0, repeats: int = 3,
                    synthetic: bool = True, seed: int = 0, progress: bool = False) -> dict:
    """Showers per second of GAN inference and of the synthetic generator: medians of
    ``repeats`` timings, each of ``min_showers`` showers or ``max_seconds`` (whichever comes
    first, at least one call), after an untimed warm-up call.

    The GAN's speed does not depend on its weights: without ``generator`` an untrained one is
    timed. bfloat16 uses Keras' ``mixed_bfloat16`` policy with the same weights (fast only on
    CPUs with bfloat16 instructions; elsewhere it is emulated, ~28x slower, so ``precisions``
    defaults to float32 alone there).
    """
    from ..parallel import runtime
    from ..gan import model  # imports TensorFlow

    if precisions is None:
        precisions = ("float32", "bfloat16") if runtime.cpu_has_bf16() else ("float32",)

    base = generator if generator is not None else model.build_generator()
    rows = _gan_rows(base, batch_sizes, precisions, min_showers, max_seconds, repeats, seed,
                     progress)
    if synthetic:
        e = np.random.default_rng(seed).uniform(10, 500, max(min_showers, 64))
        runs = [len(e) / _time_calls(lambda: showers.generate(e, seed), 1) for _ in range(repeats)]
        rows.append({"source": "synthetic generator", "precision": "float32",
                     "batch_size": len(e), "showers_per_s": float(np.median(runs)), "runs": runs})
    return {"provenance": provenance(), "rows": rows, "published": _geant4_estimate(rows)}


def _geant4_estimate(rows: list[dict]) -> list[dict]:
    """Published ratios turned into an estimated Geant4 speed on this machine: the best float32
    GAN speed measured here divided by the published float32-3DGAN / Geant4 ratio."""
    fp32 = [r["showers_per_s"] for r in rows
            if r["source"].startswith("GAN") and r["precision"] == "float32"]
    out = []
    for pub in PUBLISHED_SPEED:
        ratio = pub["gan_int8_over_geant4"] / pub["int8_over_float32"]  # float32 GAN / Geant4
        out.append(dict(pub, gan_float32_over_geant4=ratio,
                        showers_per_s=max(fp32) / ratio if fp32 else None))
    return out
