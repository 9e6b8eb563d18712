"""The decisions: one function per claim, from an :class:`~.outcome.Evidence` to an
:class:`~.outcome.Outcome`, each with its tolerance written into its code."""

from __future__ import annotations

import dataclasses
import math

from .outcome import Evidence, MissingEvidence, Outcome, percent

__all__ = ["train_efficiency", "overall_speedup", "serial_gap", "compute_bound", "nvlink", "power", "other_methods", "earlier_work", "distributed_eval", "model_error", "reference_targets", "inference", "validator"]


# ---------------------------------------------------------------------------------------------
# Small helpers of the decisions


def _signed(x: float) -> str:
    return f"{100 * x:+.1f} %"


def _scaling(ev: Evidence) -> dict:
    return ev.json("results/scaling/scaling_summary.json")


def _point(summary: dict, workers: int) -> dict | None:
    return next((p for p in summary.get("measured_training", []) if p["workers"] == workers), None)


# ---------------------------------------------------------------------------------------------
# The decisions, one per claim


def train_efficiency(ev: Evidence) -> Outcome:
    """The paper's 12-GPU claim, decided by the model on the paper's hardware; the efficiency
    measured here at 2 workers (small batches on shared cores) is reported, and judged by the
    ``scaling-model-error`` claim instead."""
    s = _scaling(ev)
    model = s["paper_model"]["model_efficiency_12"]
    two = _point(s, 2)
    here = two["efficiency"] if two else None
    where = (f"batch {two['batch_per_worker']} per worker" if two and "batch_per_worker" in two
             else "")
    value = (f"modelled at 12 P100: {percent(model)}; measured here at 2 workers"
             f"{' (' + where + ')' if where else ''}: "
             f"{percent(here) if here is not None else 'not run'}")
    # The model has no stragglers: it says what the ring and the compute allow. The paper's
    # 98.9 % is reachable when the model allows at least 97.9 % (1 point of tolerance).
    verdict = "reproduced" if model >= 0.979 else "not reproduced"
    return Outcome(verdict, "modelled", value,
                   "the model on the paper's hardware (no stragglers) allows "
                   f"{percent(model)} at 12 P100 and batch 512 (needs >= 97.9 %: 98.9 % less 1 "
                   "point); the 2-worker "
                   "efficiency measured here is this machine's, at the quick profile's batch",
                   numbers={"model_12": model, "measured_2": here})


def overall_speedup(ev: Evidence) -> Outcome:
    s = _scaling(ev)
    pm_ = s["paper_model"]
    model, published = pm_["model_speedup"], pm_["published_speedup"]
    rel = model / published - 1
    verdict = "reproduced" if abs(rel) <= 0.10 else "not reproduced"
    return Outcome(verdict, "modelled",
                   f"{model:.2f}x modelled at 12 P100 with the serial evaluation "
                   f"({_signed(rel)} from the paper's {published:.2f}x)",
                   "tolerance +-10 % of the published 9.07x; the model's evaluation cost is the "
                   "FLOPs of the test-loss passes", numbers={"model": model,
                                                            "published": published})


def serial_gap(ev: Evidence) -> Outcome:
    s = _scaling(ev)
    o = s.get("overall_measured")
    if not o:
        raise MissingEvidence("scaling_summary.json has no overall_measured (2-worker epochs)")
    amdahl, measured = o["amdahl_speedup"], o["measured_speedup_serial"]
    rel = measured / amdahl - 1
    gap_s, gap_d = o["efficiency_gap_serial_points"], o["efficiency_gap_distributed_points"]
    value = (f"2 workers, serial evaluation: speed-up {measured:.3f}x against Amdahl's "
             f"{amdahl:.3f}x from the measured serial fraction "
             f"{percent(o['serial_fraction_measured'])}"
             f"; efficiency lost: {gap_s:.1f} points serial, {gap_d:.1f} distributed")
    explained = abs(rel) <= 0.05
    gap = gap_s - gap_d
    if explained and gap > 0:
        verdict = "reproduced"
    elif not explained:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    return Outcome(verdict, "measured", value,
                   f"Amdahl's law from the measured serial fraction must predict the serial "
                   f"speed-up within 5 % ({_signed(rel)}) and the serial evaluation must cost more "
                   f"efficiency than the distributed one ({gap:+.1f} points)",
                   "" if verdict != "inconclusive" else
                   "a larger serial share (more test showers per epoch) or more repeats",
                   numbers={"amdahl": amdahl, "measured": measured, "gap_serial": gap_s,
                            "gap_distributed": gap_d})


def compute_bound(ev: Evidence) -> Outcome:
    s = _scaling(ev)
    comm = s["timeline_measured"]["comm_fraction"]
    wait = s["timeline_measured"]["wait_fraction"]
    verdict = "reproduced" if comm < 0.10 else "not reproduced"
    return Outcome(verdict, "measured",
                   f"all-reduce share of the 2-worker step here: {percent(comm)} (waiting "
                   f"{percent(wait)})", "compute-bound means the all-reduce takes < 10 % of the "
                   "step (the timeline of notebook 03)",
                   numbers={"comm_fraction": comm, "wait_fraction": wait})


def nvlink(ev: Evidence) -> Outcome:
    from ...scaling import perfmodel as pm

    wl = pm.threedgan_workload()
    hw = pm.paper_hardware(wl)
    p, b = pm.PAPER["workers"], pm.PAPER["batch"]
    st = pm.step_time(p, b, wl, hw)
    moved = 2 * (p - 1) / p * sum(wl.allreduce_bytes)  # bytes each GPU sends per step (ring)
    need = moved / st.total
    nvlink = pm.PAPER["nvlink_link_Bps"] * pm.PAPER["nvlink_links_gpu_gpu"]
    use = need / nvlink
    verdict = "reproduced" if use < 0.5 else "not reproduced"
    return Outcome(verdict, "modelled",
                   f"the ring moves {moved / 1e6:.1f} MB per GPU in a step of {st.total:.2f} s "
                   f"(batch {b}): {need / 1e6:.1f} MB/s on average, {use:.2g} of the 2 NVLink "
                   f"links' {nvlink / 1e9:.0f} GB/s", "not saturated means < 50 % of the links' "
                   "bandwidth averaged over the step (modelled: there is no NVLink here to "
                   "profile; nvprof's per-transfer rate is not modelled)",
                   numbers={"bytes_per_step": moved, "step_s": st.total, "demand_Bps": need,
                            "nvlink_Bps": nvlink})


def power(ev: Evidence) -> Outcome:
    from ...scaling import energy

    e = ev.json("results/scaling/energy.json")
    here = e.get("here") or {}
    measured = here.get("kind") == "measured"
    jps = here.get("joule_per_shower")
    how = (energy.describe(here) if measured or {"cpu", "watts_per_core"} <= set(here)
           else here.get("label", "estimated"))
    value = f"{jps:.2f} J per trained shower here, {how}" if jps else "no energy number"
    paper = e.get("paper", {}).get("runs", {})
    serial = paper.get("12 GPUs, serial evaluation (paper)", {})
    dist = paper.get("12 GPUs, distributed evaluation", {})
    if serial and dist:
        value += (f"; the paper's 12-GPU run, estimated from TDPs: {serial['kwh']:.1f} kWh with "
                  f"its serial evaluation, {dist['kwh']:.1f} kWh with a distributed one")
    numbers = {"joule_per_shower": jps, "kind": here.get("kind")}
    if not measured:
        return Outcome("not testable here", "estimated", value,
                       "the paper asks the question and gives no number; an answer needs energy "
                       "measured by counters around the timed training",
                       "no energy counter could be read on this machine ("
                       + (here.get("reason") or "no RAPL under /sys/class/powercap, no NVML")
                       + "): every number is an estimate from vendor TDPs", numbers=numbers)
    return Outcome("reproduced", "measured", value, "answered: energy per trained shower "
                   "measured by counters around the timed steps", numbers=numbers)


def other_methods(ev: Evidence) -> Outcome:
    s = _scaling(ev)
    comm = s["timeline_measured"]["comm_fraction"]
    a = ev.json("studies/algorithms.json")
    rows = [r for r in a.get("rows", []) if isinstance(r.get("time_s"), dict)]
    # At the measured size nearest the 3DGAN's largest all-reduce (the generator's gradient),
    # per network and layout: the best algorithm against the ring.
    from ...scaling import perfmodel as pm

    target = max(pm.threedgan_workload().allreduce_bytes)
    sizes = sorted({int(k) for r in rows for k in r["time_s"]})
    size = str(min(sizes, key=lambda n: abs(math.log(n / target)))) if sizes else None
    gains = []
    for key in {(r["profile"], r["ranks"], r.get("hosts"), r.get("per_host")) for r in rows}:
        group = [r for r in rows if (r["profile"], r["ranks"], r.get("hosts"),
                                     r.get("per_host")) == key and size in r["time_s"]]
        ring = [r["time_s"][size] for r in group if r["algorithm"] == "ring"]
        if ring:
            best = min(group, key=lambda r: r["time_s"][size])
            gains.append((1 - best["time_s"][size] / ring[0], key[0], key[1], best["algorithm"]))
    best_gain = max(gains, default=(0.0, None, None, None))
    bound = comm * best_gain[0]
    where = (f" ({best_gain[3]}, {best_gain[1]}, {best_gain[2]} ranks, {int(size) / 2**20:g} MiB)"
             if best_gain[1] else "")
    value = (f"best Open MPI algorithm against the ring on the emulated networks: "
             f"{percent(best_gain[0])} less all-reduce time at best{where}; with the all-reduce at "
             f"{percent(comm)} of the 2-worker step here, at most {percent(bound, 2)} of the step")
    verdict = "not reproduced" if bound < 0.02 else "reproduced"
    return Outcome(verdict, "study", value,
                   "\"other methods could improve the training time\" holds if another "
                   "all-reduce would save >= 2 % of the step; IBM DDL itself cannot run here",
                   study=value, numbers={"best_gain": best_gain[0], "comm_fraction": comm,
                                         "bound": bound})


def earlier_work(ev: Evidence) -> Outcome:
    from ...scaling import perfmodel as pm

    wl = pm.threedgan_workload()
    hw = pm.paper_hardware(wl)
    three = 3 * pm.epoch_time(16, pm.PAPER["batch"], wl, hw, "serial")["total"]
    ratio = 2 * 3600 / three
    verdict = "reproduced" if ratio >= 2 else "not reproduced"
    return Outcome(verdict, "modelled",
                   f"3 epochs on 16 P100 (this stack, modelled): {three / 60:.1f} min, "
                   f"{ratio:.1f}x faster than the earlier 2 h",
                   "\"a significant improvement\" read as >= 2x faster than 2 h for 3 epochs",
                   numbers={"model_s": three, "ratio": ratio})


def distributed_eval(ev: Evidence) -> Outcome:
    s = _scaling(ev)
    o = s.get("overall_measured")
    if not o:
        raise MissingEvidence("scaling_summary.json has no overall_measured (2-worker epochs)")
    pm_ = s["paper_model"]
    gap = o["efficiency_gap_distributed_points"]
    model_d = pm_.get("model_speedup_distributed")
    value = (f"2 workers here: the distributed evaluation loses {gap:.1f} points of efficiency "
             f"against training alone (serial: {o['efficiency_gap_serial_points']:.1f})")
    if model_d:
        value += f"; modelled at 12 P100: {model_d:.2f}x instead of {pm_['model_speedup']:.2f}x"
    verdict = "reproduced" if abs(gap) <= 3.0 else "not reproduced"
    return Outcome(verdict, "measured", value, "removes the gap: within 3 points of the training-"
                   "only efficiency (measured, 2 workers)",
                   numbers={"gap_distributed": gap, "model_speedup_distributed": model_d})


MODEL_TOLERANCE = 0.05  # the modelled 2-worker step within +-5 % of the measured one


def _half_range(times) -> float:
    """Half the range of the repeats' median step times, relative to their middle."""
    t = sorted(float(x) for x in times)
    return (t[-1] - t[0]) / (t[-1] + t[0])


def model_error(ev: Evidence) -> Outcome:
    """|error| +- u against the tolerance, u the repeats' half-ranges of the 1-worker step (the
    calibration: the model scales with it) and of the 2-worker step added: inside, reproduced;
    outside, not reproduced; across, inconclusive with the repeats that would decide (u ~ 1 /
    sqrt(repeats)). The compute-sharing probe, measured once, adds noise u does not hold."""
    m = _scaling(ev)["model_here"]
    rel = m["rel_error_2"]
    if rel is None:
        raise MissingEvidence("scaling_summary.json has no 2-worker model check")
    reps = {p["workers"]: p.get("repeat_step_times_s") or []
            for p in ev.json("results/scaling/scaling_weak.json").get("points", [])}
    n, tol, needs = min(len(reps.get(1, [])), len(reps.get(2, []))), MODEL_TOLERANCE, ""
    u = _half_range(reps[1]) + _half_range(reps[2]) if n >= 2 else math.inf
    if n < 2:
        verdict, needs = "inconclusive", ("fewer than 2 repeats of the 1- and the 2-worker step: "
                                          "the error has no spread; at least 2 (scale.repeats)")
    elif abs(rel) + u <= tol:
        verdict = "reproduced"
    elif abs(rel) - u > tol:
        verdict = "not reproduced"
    else:
        verdict, gap = "inconclusive", abs(tol - abs(rel))
        more = math.ceil(n * (u / gap) ** 2) if gap > 1e-3 else None
        needs = ("the error sits on the tolerance's edge: no number of repeats decides it"
                 if more is None else f"about {more} repeats (scale.repeats; {n} here) to "
                 f"bring the spread inside the gap to +-{percent(tol, 0)}")
    return Outcome(verdict, "measured",
                   f"2-worker step: model {m['predicted_step_2_s']:.3f} s, measured "
                   f"{m['measured_step_2_s']:.3f} s ({_signed(rel)} +- "
                   f"{percent(u) if n >= 2 else 'unknown'} over {n} repeat{'s' * (n != 1)})",
                   "the model calibrated on this machine must predict the 2-worker step within "
                   "+-5 %, the error's spread over the repeats included", needs=needs,
                   numbers={"rel_error": rel, "spread": u, "repeats": n})


def reference_targets(ev: Evidence) -> Outcome:
    """The default shipped generator (:func:`gan3d.gan.reference.best`, what `gan3d simulate`
    uses without --generator), by the targets it met when exported."""
    from ...gan import reference

    name = reference.best()
    folder = reference.SHIPPED[name].relative_to(reference.FOLDER.parents[2])
    ref = ev.json(f"src/{folder.as_posix()}/reference.json")
    fm = ref["final_monitors"]
    met, of = fm["targets_met"], fm.get("targets", 20)
    verdict = "reproduced" if met >= 18 else "not reproduced"
    return Outcome(verdict, "study",
                   f"`{name}`: {met} of {of} targets met after {ref['showers_seen']:,} showers "
                   f"({ref.get('workers', 1)} worker(s), physics monitors when exported)"
                   + _still_missed(ev),
                   "the default shipped generator must meet >= 18 of its 20 targets",
                   study=f"{met} of {of}", numbers={"met": met, "of": of,
                                                   "showers_seen": ref["showers_seen"]})


def _still_missed(ev: Evidence) -> str:
    """What notebook 04 measured of each shipped generator beside its targets (where it ran):
    the classifier's AUC on the high-level features against the floor of two reference samples,
    and the feature that tells its showers from the reference's best on its own."""
    m = ev.peek("results/validation/metrics.json")
    shipped = {lab: g["bins"].get("inclusive", {}) for lab, g in (m or {}).get("generators", {}).items()
               if "long run" in lab or lab.startswith("reference generator")}
    if not shipped:
        return ""
    from ...validation.study import feature_label

    ev.record("results/validation/metrics.json", m)
    floor = m["reference"]["inclusive"]["classifier_high"]["auc"]
    parts = []
    for lab, b in shipped.items():
        name, f = next(iter(b.get("feature_auc", {}).items()), (None, None))
        parts.append(f"{lab}: AUC {b['classifier_high']['auc']:.3f}"
                     + (f", most by {feature_label(name)} (AUC {f['auc']:.2f}, spread "
                        f"{f['spread']:.2f}x)" if name else ""))
    return (f". What the shipped generators still miss (notebook 04, high-level classifier, "
            f"floor {floor:.3f}): " + "; ".join(parts))


def inference(ev: Evidence) -> Outcome:
    h = ev.json("results/validation/headline.json")
    rows = h.get("speed") or []
    gan = [r for r in rows if str(r.get("source", "")).startswith("GAN")]
    best = max(gan, key=lambda r: r["showers_per_s"]) if gan else None
    batch = best and best.get("batch_size", best.get("batch"))
    value = (f"GAN inference here: {best['showers_per_s']:,.0f} showers/s ({best['precision']}, "
             f"batch {batch})" if best else "no inference measured")
    return Outcome("not testable here", "estimated", value,
                   "Geant4's speed here could only be estimated from the published ratio, which "
                   "would make the comparison circular",
                   "Geant4 cannot run here (its data sets cannot be fetched); the GAN side is "
                   "measured, the Geant4 side would be the published ratio",
                   numbers={"gan_showers_per_s": best and best["showers_per_s"]})


def validator(ev: Evidence) -> Outcome:
    s = ev.json("results/validation/sensitivity.json")
    wanted = ("sampling fraction +2 %", "5 % wider", "0.3 layer deeper")
    sizes = s["sizes"]
    visible = {d: s["visible_from"].get(d) for d in wanted}
    value = ", ".join(f"{d}: {f'n = {n}' if n else f'not by n = {sizes[-1]}'}"
                      for d, n in visible.items()) + f" ({s['trials']} trials per size)"
    stated = 1000
    if all(n is not None and n <= stated for n in visible.values()):
        verdict = "reproduced"
    elif max(sizes) < stated:
        return Outcome("inconclusive", "measured", value, "", f"sample sizes up to {stated}",
                       numbers={"visible_from": visible})
    else:
        verdict = "not reproduced"
    return Outcome(verdict, "measured", value,
                   f"each flaw must be visible (power >= 0.5 at the 95 % null threshold) by "
                   f"n = {stated} showers, the validation's sample size",
                   numbers={"visible_from": visible})
