"""Sizing strategies, selected by `_target_` in conf/predictor/*.yaml.

Each strategy is built from its config node and exposes
`build(loaded, profile, evaluate_ppl=None) -> ActivePredictor | None`;
`cacheable` says whether the result is a trained PredictorSet worth caching.
`evaluate_ppl(predictors | None) -> float` is the perplexity of the model with FFN
neurons restricted to the predicted set (None: dense); only `adaptive` uses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from powerbench.predictor.config import (
    AdaptiveConfig,
    FixedConfig,
    NoneConfig,
    OracleConfig,
    ThresholdConfig,
)
from powerbench.predictor.fitting import LayerFit, LayerFitter
from powerbench.predictor.gate_threshold import (
    GateThresholdSet,
    collect_ffn_inputs,
    fit_gate_thresholds,
    model_gates,
    profile_ffn_inputs,
)
from powerbench.predictor.oracle import OraclePredictorSet
from powerbench.predictor.predictor_set import (
    ActivePredictor,
    PredictorSet,
    mean_active_fraction,
)
from powerbench.predictor.sizing import grown_rank, initial_rank, shrunk_rank
from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.progress import Progress

log = logging.getLogger(__name__)

PplFn = Callable[[ActivePredictor | None], float]


class FixedSizing:
    """The config's rank per layer (`fixed`: one for all; `tail_ranks`: another for the
    last layers); thresholds tuned per layer for the target recall."""

    cacheable = True
    uses_ppl = False

    def __init__(self, cfg: FixedConfig) -> None:
        self.cfg = cfg

    def build(self, loaded, profile: ActivationProfile,
              evaluate_ppl: PplFn | None = None) -> PredictorSet:
        start = time.perf_counter()
        cfg = self.cfg
        fitter = LayerFitter(loaded.spec, profile, cfg.train, cfg.weight_dtype)
        ranks = cfg.ranks(profile.n_layers)
        fits = [fitter.fit(layer, ranks[layer], cfg.target_recall, cfg.recall_margin,
                           cfg.recall_z, cfg.max_threshold)
                for layer in Progress.iter(range(profile.n_layers), "predictor layers trained")]
        info = {"target_recall": cfg.target_recall, "train_s_total": fitter.train_s_total,
                "build_s": time.perf_counter() - start}
        return fitter.assemble(fits, cfg.name, info)


class AdaptiveSizing:
    """Sparsity- and skew-sized ranks, grown where a layer misses its target, with the
    target recall tightened until sparse perplexity is within tolerance of dense."""

    cacheable = True
    uses_ppl = True

    def __init__(self, cfg: AdaptiveConfig) -> None:
        self.cfg = cfg

    def _meets(self, fit: LayerFit) -> bool:
        """Target recall reached (on validation) within the predicted-active budget."""
        val = fit.val
        return (val.recall >= fit.stats.target_recall
                and val.predicted_active_fraction
                <= self.cfg.max_active_ratio * max(val.true_active_fraction, 1e-12))

    def _fit(self, fitter: LayerFitter, layer: int, rank: int, target: float,
             initial: int) -> LayerFit:
        cfg = self.cfg
        return fitter.fit(layer, rank, target, cfg.recall_margin, cfg.recall_z,
                          cfg.max_threshold, initial)

    def fit_to_target(self, fitter: LayerFitter, ranks: list[int], initial: list[int],
                      target: float) -> tuple[list[LayerFit], list[int]]:
        """Grow the layers that miss `target` (up to max_rounds); returns fits and ranks."""
        cfg, ranks = self.cfg, list(ranks)
        fits: list[LayerFit] = []
        for _ in range(cfg.max_rounds + 1):
            fits = [self._fit(fitter, layer, ranks[layer], target, initial[layer])
                    for layer in range(len(ranks))]
            missed = [f.stats.layer for f in fits if not self._meets(f)]
            growable = [layer for layer in missed if grown_rank(ranks[layer], cfg) > ranks[layer]]
            log.info("adaptive target %.4f ranks %s missed %s", target, ranks, missed)
            if not growable:
                break
            for layer in growable:
                ranks[layer] = grown_rank(ranks[layer], cfg)
        return fits, ranks

    @staticmethod
    def layer_cost(fit: LayerFit, spec) -> float:
        """Weights read per token for one layer: predictor + the neurons it predicts."""
        predicted = fit.val.predicted_active_fraction * spec.neurons_per_layer
        return fit.stats.param_count + predicted * spec.params_per_neuron

    def shrink(self, fitter: LayerFitter, fits: list[LayerFit], ranks: list[int],
               initial: list[int], target: float, spec) -> tuple[list[LayerFit], list[int]]:
        """Shrink layers that still meet `target` one step at a time, largest first: any
        such shrink while the predictors exceed max_param_share of the model, then (with
        minimise_cost) only shrinks that lower the layer's per-token weight reads."""
        cfg, fits, ranks = self.cfg, list(fits), list(ranks)
        stuck: set[int] = set()
        while True:
            over = sum(f.stats.param_count for f in fits) > cfg.max_param_share * spec.total_params
            if not over and not cfg.minimise_cost:
                break
            candidates = [i for i in range(len(ranks))
                          if i not in stuck and ranks[i] > cfg.min_rank and self._meets(fits[i])]
            if not candidates:
                break
            layer = max(candidates, key=lambda i: (fits[i].stats.param_count, -i))
            smaller = shrunk_rank(ranks[layer], cfg)
            fit = self._fit(fitter, layer, smaller, target, initial[layer])
            cheaper = self.layer_cost(fit, spec) < self.layer_cost(fits[layer], spec)
            if smaller < ranks[layer] and self._meets(fit) and (over or cheaper):
                fits[layer], ranks[layer] = fit, smaller
                log.info("adaptive: layer %d shrunk to rank %d (%s)", layer, smaller,
                         "parameter budget" if over else "cheaper per token")
            else:
                stuck.add(layer)
        return fits, ranks

    def build(self, loaded, profile: ActivationProfile,
              evaluate_ppl: PplFn | None = None) -> PredictorSet:
        start = time.perf_counter()
        cfg = self.cfg
        fitter = LayerFitter(loaded.spec, profile, cfg.train, cfg.weight_dtype)
        sizes = [initial_rank(layer, cfg) for layer in profile.layers]
        initial = [s.rank for s in sizes]
        ranks, target = list(initial), cfg.target_recall
        dense = evaluate_ppl(None) if evaluate_ppl is not None else None
        history: list[dict] = []
        converged = evaluate_ppl is None
        pset: PredictorSet | None = None
        for _ in range(cfg.max_ppl_rounds + 1):
            fits, ranks = self.fit_to_target(fitter, ranks, initial, target)
            fits, ranks = self.shrink(fitter, fits, ranks, initial, target, loaded.spec)
            pset = fitter.assemble(fits, cfg.name, {})
            entry = {"target_recall": target, "ranks": list(ranks),
                     "layers_met": sum(self._meets(f) for f in fits)}
            if evaluate_ppl is not None:
                ppl = evaluate_ppl(pset)
                delta = 100.0 * (ppl - dense) / dense
                entry |= {"perplexity": ppl, "perplexity_delta_pct": delta}
                converged = delta <= cfg.ppl_tolerance_pct
            history.append(entry)
            if converged or target >= 1.0:
                break
            target = 1.0 - (1.0 - target) * cfg.recall_tighten
        assert pset is not None
        share = pset.param_count / max(loaded.spec.total_params, 1)
        if share > cfg.max_param_share:
            log.warning("adaptive predictors are %.1f%% of the model's parameters (budget "
                        "%.1f%%)", 100 * share, 100 * cfg.max_param_share)
        pset.info = {
            "target_recall": target, "initial_ranks": initial,
            "rank_from_sparsity": [s.from_sparsity for s in sizes],
            "skew_scale": [s.skew_scale for s in sizes], "history": history,
            "converged": bool(converged), "perplexity_dense": dense,
            "all_layers_met": history[-1]["layers_met"] == profile.n_layers,
            "param_share_over_budget": bool(share > cfg.max_param_share),
            "train_s_total": fitter.train_s_total, "build_s": time.perf_counter() - start,
        }
        return pset


class OracleSizing:
    """The true mask from the activation itself (needs the model's weights)."""

    cacheable = False
    uses_ppl = False

    def __init__(self, cfg: OracleConfig) -> None:
        self.cfg = cfg

    def build(self, loaded, profile: ActivationProfile,
              evaluate_ppl: PplFn | None = None) -> OraclePredictorSet:
        if not loaded.has_weights:
            raise ValueError(f"oracle predictors compute the true activations and need model "
                             f"weights; {loaded.spec.name} is shape-only")
        return OraclePredictorSet.from_hf(loaded.model, loaded.spec)


class ThresholdSizing:
    """CATS: per-layer thresholds on |act(gate)| for `target_sparsity` (no training).

    Calibration rows: the profile's FFN-input samples when it has them; otherwise a forward
    pass over the perplexity callback's calibration windows (`prepare_predictors` builds it
    from the train split's last documents; that is why `uses_ppl` is True: the callback is
    read for its windows, the sizing never tunes on perplexity).
    """

    cacheable = False  # seconds to fit; depends on the model's own gates
    uses_ppl = True

    def __init__(self, cfg: ThresholdConfig) -> None:
        self.cfg = cfg

    def calibration_samples(self, loaded, profile: ActivationProfile | None,
                            evaluate_ppl: PplFn | None) -> tuple[list, str]:
        samples = profile_ffn_inputs(profile)
        if samples is not None:
            return samples, "profile"
        windows = getattr(evaluate_ppl, "windows", None)
        if windows is None:
            raise ValueError(
                "threshold sizing needs calibration FFN inputs: a measured activation profile "
                "(with hidden samples) or calibration text (prepare_predictors("
                "calibration_texts=...) / a MaskedPerplexity callback with token windows)")
        return (collect_ffn_inputs(loaded.model, windows, self.cfg.samples_per_layer,
                                   seed=self.cfg.seed), "calibration")

    def build(self, loaded, profile: ActivationProfile | None,
              evaluate_ppl: PplFn | None = None) -> GateThresholdSet:
        if not loaded.has_weights:
            raise ValueError(f"threshold sparsity reads the model's gate weights; "
                             f"{loaded.spec.name} is shape-only")
        start = time.perf_counter()
        gates, kind = model_gates(loaded.model)
        samples, source = self.calibration_samples(loaded, profile, evaluate_ppl)
        samples = [s[: self.cfg.samples_per_layer] for s in samples]
        result = fit_gate_thresholds(loaded.spec, gates, samples, self.cfg.target_sparsity,
                                     kind, info={"calibration_source": source})
        result.info["build_s"] = time.perf_counter() - start
        log.info("threshold: target sparsity %.2f, calibration sparsity %.3f (%s, %d rows)",
                 self.cfg.target_sparsity, result.calibration_sparsity, source,
                 samples[0].shape[0])
        return result


class DenseSizing:
    """No predictor: every neuron is computed."""

    cacheable = False
    uses_ppl = False

    def __init__(self, cfg: NoneConfig) -> None:
        self.cfg = cfg

    def build(self, loaded, profile: ActivationProfile,
              evaluate_ppl: PplFn | None = None) -> None:
        return None


def strategy_metrics(predictors: ActivePredictor | None, spec,
                     profile: ActivationProfile) -> dict[str, float]:
    """Overall MLflow metrics of any strategy's result (`none` gives the dense bound)."""
    if predictors is None:  # dense: everything computed
        true_active = mean_active_fraction(profile)
        return {"predictor_recall": 1.0, "predictor_precision": true_active,
                "predicted_active_fraction": 1.0, "true_active_fraction": true_active,
                "predictor_param_bytes": 0.0, "predictor_param_share": 0.0,
                "predictor_train_s": 0.0}
    return predictors.metrics(spec, profile)
