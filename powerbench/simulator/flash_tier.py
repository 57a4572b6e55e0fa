"""The flash tier of a phone: which FFN neurons a decode token must read from flash, and
how long the reads take.

A FlashPlan (made by the offline planner, powerbench.solver.pi2_planner) says what of the
FFN stays in DRAM:

    segmented   PowerInfer-2 / LLM-in-a-Flash: clusters of `cluster_neurons` neurons; a
                pinned hot set per layer and an LRU share per layer (the policy of the
                measured engine, powerbench.solver.neuron_cache.SegmentedNeuronCache, is replayed
                here on the profile's per-token traces). A token reads the clusters of its
                computed neurons that are not resident, one read per cluster and matrix
                group (`reads_per_neuron`: 1 = gate, up and down bundled; 3 = separate).
    mmap        llama.cpp: the weights are mmap-ed; the DRAM left after the resident
                parts is an LRU page cache of `page_cache_units` blocks of
                `cluster_neurons` neurons (one readahead window, `block_bytes`) over all
                layers (powerbench.simulator.page_cache); every token pages in the
                blocks of its computed neurons that miss, as page faults (below).

Page faults (mmap): each missed readahead window is one major fault served synchronously
on the compute thread that touched it: the thread blocks while the kernel issues the
window as ONE random read and waits for it (queue depth 1 per faulting thread). The
`io_cores` compute threads fault at once, so they share UFS's one command queue
(FlashRates.queue_factor) at the random-read bandwidth of the window size from their core
class; each window also costs the faulting thread `fault_s` of kernel time (the major
fault + the fault-around minor faults that map the rest of the window), in parallel
across the threads. Bytes / s paged in: `mmap_bandwidth`.

    window      LLM in a Flash (simulator.window_tokens set): the plan's DRAM for neurons
                is not a cache but the sliding window of the neurons active in the last
                `window_tokens` tokens (powerbench.simulator.window_cache); a token reads
                its computed neurons outside the window.

`replay` gives per decode step and layer the reads and bytes (FlashTraffic), and for an
optional prompt pass before them the bytes its computed neurons miss (a segmented cache
only looks them up: the prompt streams them past the cache; the page cache admits them;
the sliding window then holds what the prompt's last tokens used, `prompt_tokens`);
`flash_seconds` turns them into read time with powerbench.hardware.flash_rates.FlashRates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from powerbench.hardware.flash_rates import FlashRates
from powerbench.simulator.page_cache import PageCacheLRU
from powerbench.simulator.window_cache import SlidingWindowCache
from powerbench.solver.flash_plan import FlashPlan, FlashPolicy
from powerbench.solver.neuron_cache import SegmentedNeuronCache


@dataclass
class FlashTraffic:
    """Per decode step and layer ([steps, layers]): clusters looked up, hits per segment,
    reads issued and bytes read from flash."""

    lookups: np.ndarray
    hot_hits: np.ndarray
    lru_hits: np.ndarray
    reads: np.ndarray
    bytes: np.ndarray
    prefill_bytes: np.ndarray | None = None  # [layers]: the prompt pass's missed bytes
    notes: list[str] = field(default_factory=list)

    def hit_rates(self) -> dict[str, float]:
        total = float(self.lookups.sum())
        if total <= 0:
            return {"hit": 1.0, "hot": 0.0, "lru": 0.0}
        hot, lru = float(self.hot_hits.sum()) / total, float(self.lru_hits.sum()) / total
        return {"hit": hot + lru, "hot": hot, "lru": lru}


def _cluster_ids(mask: np.ndarray, cluster: int) -> np.ndarray:
    """Ascending ids of the clusters with any neuron set in `mask` (bool [neurons]): the
    active ids are ascending, so a cluster repeats only next to itself (no sort needed)."""
    ids = np.flatnonzero(mask) // cluster
    first = np.empty(ids.size, dtype=bool)
    first[:1] = True
    np.not_equal(ids[1:], ids[:-1], out=first[1:])
    return ids[first]


def _units(mask: np.ndarray, cluster: int, n_units: int, layer: int) -> np.ndarray:
    return layer * n_units + _cluster_ids(mask, cluster)


def _replay_mmap(plan: FlashPlan, layer_masks: list[np.ndarray], warm: list[np.ndarray] | None,
                 prefill: list[np.ndarray] | None, out: FlashTraffic) -> None:
    k = plan.cluster_neurons
    n_units = -(-layer_masks[0].shape[1] // k)
    cache = PageCacheLRU(n_units * len(layer_masks), plan.page_cache_units)
    for t in range(warm[0].shape[0] if warm is not None else 0):
        for i in range(len(layer_masks)):
            cache.access(_units(warm[i][t], k, n_units, i))
    if prefill is not None:
        out.prefill_bytes = np.array([cache.access(_units(m, k, n_units, i))
                                      for i, m in enumerate(prefill)]) * plan.cluster_bytes
    for s in range(layer_masks[0].shape[0]):
        for i, masks in enumerate(layer_masks):
            units = _units(masks[s], k, n_units, i)
            misses = cache.access(units)
            out.lookups[s, i] = units.size
            out.lru_hits[s, i] = units.size - misses
            out.reads[s, i] = misses * -(-plan.cluster_bytes // plan.block_bytes)
            out.bytes[s, i] = misses * plan.cluster_bytes


def _replay_window(plan: FlashPlan, layer_masks: list[np.ndarray], window: int,
                   warm: list[np.ndarray] | None, prefill: list[np.ndarray] | None,
                   prompt_tokens: list[np.ndarray] | None, out: FlashTraffic) -> None:
    k = plan.cluster_neurons
    n_units = -(-layer_masks[0].shape[1] // k)
    capacity = [len(h) + lru for h, lru in zip(plan.segments.hot, plan.segments.lru,
                                               strict=True)]
    cache = SlidingWindowCache(len(layer_masks), n_units, window, capacity)

    def fill(tokens: list[np.ndarray] | None) -> None:  # uncounted tokens
        for i, per_token in enumerate(tokens if tokens is not None else ()):
            for token in per_token:
                cache.access(i, _cluster_ids(token, k))

    fill(warm)
    if prefill is not None:  # the prompt pass reads what the window lacks
        out.prefill_bytes = np.array([float((~cache.resident(i, _cluster_ids(m, k))).sum())
                                      for i, m in enumerate(prefill)]) * plan.cluster_bytes
    fill(prompt_tokens)
    for s in range(layer_masks[0].shape[0]):
        for i, masks in enumerate(layer_masks):
            units = _cluster_ids(masks[s], k)
            misses = cache.access(i, units)
            out.lookups[s, i] = units.size
            out.lru_hits[s, i] = units.size - misses
            out.reads[s, i] = misses * plan.reads_per_neuron
            out.bytes[s, i] = misses * plan.cluster_bytes


def replay(plan: FlashPlan, layer_masks: list[np.ndarray], warm: list[np.ndarray] | None = None,
           frequencies: list[np.ndarray] | None = None,
           prefill: list[np.ndarray] | None = None, window: int | None = None,
           prompt_tokens: list[np.ndarray] | None = None) -> FlashTraffic:
    """Replay per-step computed-neuron masks (per layer: bool [steps, neurons]) through the
    plan. `warm`: per layer bool [tokens, neurons] replayed first, uncounted. `frequencies`
    (per layer, per neuron): the LRU starts filled with the hottest non-pinned clusters
    (steady state), as the measured engine's warm start does. `prefill`: per layer bool
    [neurons] computed by the prompt pass, after the warm tokens (module docstring).
    `window` (segmented plans only): the sliding window of LLM in a Flash instead of the
    plan's cache; `prompt_tokens` (per layer bool [tokens, neurons]): the prompt's own
    tokens, replayed uncounted after the prompt pass to fill the window."""
    n_layers = len(layer_masks)
    steps = layer_masks[0].shape[0] if n_layers else 0
    shape = (steps, n_layers)
    out = FlashTraffic(*(np.zeros(shape) for _ in range(5)))
    if plan.policy is FlashPolicy.mmap:
        if n_layers:
            _replay_mmap(plan, layer_masks, warm, prefill, out)
        return out
    if window is not None:
        if n_layers:
            _replay_window(plan, layer_masks, window, warm, prefill, prompt_tokens, out)
        return out
    n_units = -(-layer_masks[0].shape[1] // plan.cluster_neurons) if n_layers else 0
    cache = SegmentedNeuronCache(plan.segments, n_units)
    for i in range(n_layers):
        if frequencies is not None and plan.segments.lru[i]:
            f = np.asarray(frequencies[i], dtype=np.float64)
            pad = n_units * plan.cluster_neurons - f.size
            per_unit = np.pad(f, (0, pad)).reshape(n_units, plan.cluster_neurons).sum(axis=1)
            cache.preload(i, np.argsort(-per_unit, kind="stable"))
        for token in (warm[i] if warm is not None else ()):
            cache.access(i, _cluster_ids(token, plan.cluster_neurons))
    if prefill is not None:
        out.prefill_bytes = np.array([
            float((cache.slot_of[i, _cluster_ids(m, plan.cluster_neurons)] < 0).sum())
            for i, m in enumerate(prefill)]) * plan.cluster_bytes
    for s in range(steps):
        for i in range(n_layers):
            units = _cluster_ids(layer_masks[i][s], plan.cluster_neurons)
            look = cache.lookup(i, units, count=False)
            cache.admit(i, units[look.miss_pos], count=False)
            lru = int((look.hit_slots >= cache.n_hot).sum())
            out.lookups[s, i] = units.size
            out.lru_hits[s, i] = lru
            out.hot_hits[s, i] = look.n_hits - lru
            misses = units.size - look.n_hits
            out.reads[s, i] = misses * plan.reads_per_neuron
            out.bytes[s, i] = misses * plan.cluster_bytes
    return out


def mmap_bandwidth(plan: FlashPlan, rates: FlashRates) -> float:
    """Bytes/s llama.cpp's page faults bring in (module docstring): `io_cores` threads,
    each with one synchronous readahead-window read outstanding, share the command queue,
    and each window costs its thread `fault_s` of kernel time:
        seconds per window = block / B(block, random, io_core, io_cores) + fault_s / io_cores
    """
    n = max(int(plan.io_cores), 1)
    device = plan.block_bytes / rates.bandwidth(plan.block_bytes, random=True,
                                                core=plan.io_core, issuers=n)
    return float(plan.block_bytes / (device + plan.fault_s / n))


def flash_seconds(plan: FlashPlan, traffic: FlashTraffic, rates: FlashRates) -> np.ndarray:
    """[steps, layers] seconds reading from flash: random reads of one cluster's matrix
    group each (segmented), or page faults of readahead windows (mmap: mmap_bandwidth);
    one command queue."""
    if plan.policy is FlashPolicy.mmap:
        return traffic.bytes / mmap_bandwidth(plan, rates)
    block = plan.cluster_bytes / plan.reads_per_neuron
    return rates.read_time(traffic.reads, block, random=True, core=plan.io_core,
                           issuers=plan.io_cores)


def first_read_seconds(plan: FlashPlan, rates: FlashRates) -> float:
    """One read's latency: what an I/O-compute pipeline cannot hide per layer (the first
    cluster must arrive before its computation starts)."""
    if plan.policy is FlashPolicy.mmap:  # one fault: the window's read + kernel time
        return float(plan.block_bytes / rates.bandwidth(plan.block_bytes, random=True,
                                                        core=plan.io_core) + plan.fault_s)
    block = plan.cluster_bytes / plan.reads_per_neuron
    return float(rates.read_time(plan.reads_per_neuron, block, core=plan.io_core))
