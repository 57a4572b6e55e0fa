"""The segmented neuron cache in DRAM (PowerInfer-2, section 4.3): policy and slot map.

The unit of caching is a cluster (the unit the file is read in; with one neuron per
cluster, a neuron). The cache owns `n_slots` slots of one cluster each:

- **hot** slots [0, n_hot): the clusters with the highest profiled activation frequency
  over the whole model (`plan_segments` picks them from `ActivationProfile` counts),
  loaded once and pinned: never evicted.
- **LRU** slots: a fixed share per layer (proportional to the layer's non-hot clusters, so
  a 100% budget holds every cluster), each evicting its least recently used cluster.
  Recency is a per-slot tick (numpy; no per-neuron Python objects): a lookup stamps the
  hits, an admission takes the slots with the oldest stamps among those not used by the
  current call (the active set being computed is never evicted under itself). A call
  whose misses do not fit gets fewer slots: the rest are read into scratch, uncached.

This module holds no weights: `lookup` / `admit` say which slot holds which cluster; the
engine keeps the weight arenas indexed by slot. Counters per segment: hits, misses,
admissions, evictions, bypassed misses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class CacheStats:
    lookups: int = 0  # clusters looked up
    hot_hits: int = 0
    lru_hits: int = 0
    misses: int = 0
    admitted: int = 0  # misses given an LRU slot
    evicted: int = 0  # admissions that pushed another cluster out
    bypassed: int = 0  # misses read into scratch (no LRU slot free of the current call)

    @property
    def hot_hit_rate(self) -> float:
        return self.hot_hits / self.lookups if self.lookups else 0.0

    @property
    def lru_hit_rate(self) -> float:
        return self.lru_hits / self.lookups if self.lookups else 0.0

    @property
    def hit_rate(self) -> float:
        return (self.hot_hits + self.lru_hits) / self.lookups if self.lookups else 0.0

    def reset(self) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, 0)


@dataclass(frozen=True)
class Lookup:
    """One layer call's clusters split into resident (with their slots) and missing."""

    hit_pos: np.ndarray  # positions in the looked-up array that are resident
    hit_slots: np.ndarray
    miss_pos: np.ndarray  # positions that are not

    @property
    def n_hits(self) -> int:
        return int(self.hit_pos.size)


@dataclass(frozen=True)
class SegmentPlan:
    hot: tuple[np.ndarray, ...]  # per layer: pinned cluster ids
    lru: tuple[int, ...]  # per layer: LRU slots

    @property
    def n_hot(self) -> int:
        return sum(int(h.size) for h in self.hot)

    @property
    def n_slots(self) -> int:
        return self.n_hot + sum(self.lru)


def plan_segments(frequencies: np.ndarray | None, n_layers: int, units_per_layer: int,
                  capacity: int, hot_fraction: float = 0.5) -> SegmentPlan:
    """Split `capacity` cluster slots into a pinned hot set and per-layer LRU shares.

    `frequencies` [n_layers, units_per_layer]: activation frequency of each cluster (e.g.
    summed neuron counts); None: no profile, the whole capacity is LRU. The hot set is
    the model-wide top `hot_fraction * capacity` clusters (ties: lower layer, lower id).
    """
    if not 0.0 <= hot_fraction <= 1.0:
        raise ValueError(f"hot_fraction must be in [0, 1], got {hot_fraction}")
    total = n_layers * units_per_layer
    capacity = max(0, min(int(capacity), total))
    n_hot = int(round(hot_fraction * capacity)) if frequencies is not None else 0
    hot_mask = np.zeros((n_layers, units_per_layer), dtype=bool)
    if n_hot:
        f = np.asarray(frequencies, dtype=np.float64)
        if f.shape != (n_layers, units_per_layer):
            raise ValueError(f"frequencies of shape {f.shape}, expected "
                             f"{(n_layers, units_per_layer)}")
        hot_mask.ravel()[_top_k(f.ravel(), n_hot)] = True
    cold = (~hot_mask).sum(axis=1)
    rest = capacity - n_hot
    lru = np.floor(rest * cold / max(cold.sum(), 1)).astype(np.int64)
    # hand out the rounding remainder to the layers with the most cold clusters left
    short = rest - int(lru.sum())
    for layer in np.argsort(-(cold - lru), kind="stable")[:short]:
        lru[layer] += 1
    lru = np.minimum(lru, cold)
    hot = tuple(np.flatnonzero(hot_mask[layer]) for layer in range(n_layers))
    return SegmentPlan(hot=hot, lru=tuple(int(x) for x in lru))


def _top_k(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest values, ties to the lower index (as a stable descending
    sort's first k), in O(n): a partition finds the k-th value."""
    kth = np.partition(values, values.size - k)[values.size - k]
    above = np.flatnonzero(values > kth)
    return np.concatenate([above, np.flatnonzero(values == kth)[:k - above.size]])


class SegmentedNeuronCache:
    def __init__(self, plan: SegmentPlan, units_per_layer: int) -> None:
        self.plan = plan
        self.n_layers = len(plan.hot)
        self.units_per_layer = units_per_layer
        self.n_hot = plan.n_hot
        self.n_slots = plan.n_slots
        # cluster -> slot (-1: absent); slot -> cluster (-1: free); slot -> last use
        self.slot_of = np.full((self.n_layers, units_per_layer), -1, dtype=np.int64)
        self.owner = np.full(self.n_slots, -1, dtype=np.int64)
        self.last_used = np.full(self.n_slots, -1, dtype=np.int64)
        slot = 0
        for layer, ids in enumerate(plan.hot):
            self.slot_of[layer, ids] = np.arange(slot, slot + ids.size)
            self.owner[slot: slot + ids.size] = ids
            slot += ids.size
        self.lru_range: list[tuple[int, int]] = []
        for n in plan.lru:
            self.lru_range.append((slot, slot + n))
            slot += n
        self.tick = 0
        self._call_start = 0
        self.stats = CacheStats()

    # ---- queries --------------------------------------------------------------------------
    def is_hot_slot(self, slot: int | np.ndarray) -> bool | np.ndarray:
        return np.asarray(slot) < self.n_hot

    def segment_of(self, layer: int, unit: int) -> str | None:
        slot = int(self.slot_of[layer, unit])
        if slot < 0:
            return None
        return "hot" if slot < self.n_hot else "lru"

    def resident(self, layer: int) -> np.ndarray:
        """Cluster ids of `layer` held (hot and LRU), ascending."""
        return np.flatnonzero(self.slot_of[layer] >= 0)

    def lru_order(self, layer: int) -> np.ndarray:
        """The layer's LRU clusters, least recently used first."""
        a, b = self.lru_range[layer]
        used = np.flatnonzero(self.owner[a:b] >= 0)
        order = used[np.argsort(self.last_used[a:b][used], kind="stable")]
        return self.owner[a:b][order]

    # ---- a layer call -----------------------------------------------------------------------
    def lookup_slots(self, layer: int, units: np.ndarray, count: bool = True
                     ) -> tuple[np.ndarray, int]:
        """The engine's per-call lookup, a handful of array operations: `slots[i]` = the
        slot holding `units[i]` (distinct cluster ids), -1 where it is missing, and the
        number missing. Stamps the LRU hits as the most recent (in the order given) and
        protects them from this call's admissions."""
        slots = self.slot_of[layer][units]
        lru = slots >= self.n_hot
        lru_slots = slots[lru]
        n_lru = int(lru_slots.size)
        n_miss = int(np.count_nonzero(slots < 0))
        self._call_start = self.tick
        if n_lru:
            self.last_used[lru_slots] = np.arange(self.tick, self.tick + n_lru)
        self.tick += max(n_lru, 1)
        if count:
            s = self.stats
            s.lookups += int(slots.size)
            s.lru_hits += n_lru
            s.hot_hits += int(slots.size) - n_lru - n_miss
            s.misses += n_miss
        return slots, n_miss

    def lookup(self, layer: int, units: np.ndarray, count: bool = True) -> Lookup:
        """Which of `units` (distinct cluster ids) are resident: `lookup_slots` split into
        hit positions (with their slots) and miss positions."""
        slots, _ = self.lookup_slots(layer, np.asarray(units, dtype=np.int64), count)
        hit = slots >= 0
        hit_pos = np.flatnonzero(hit)
        return Lookup(hit_pos=hit_pos, hit_slots=slots[hit_pos], miss_pos=np.flatnonzero(~hit))

    def admit(self, layer: int, units: np.ndarray, count: bool = True) -> np.ndarray:
        """Give missing `units` of `layer` LRU slots, evicting the least recently used
        clusters not touched by the current call. Returns each unit's slot, -1 where no
        slot was free of the current call (read into scratch, not cached)."""
        units = np.asarray(units, dtype=np.int64)
        out = np.full(units.size, -1, dtype=np.int64)
        a, b = self.lru_range[layer]
        if units.size == 0 or a == b:
            if count:
                self.stats.bypassed += int(units.size)
            return out
        stamps = self.last_used[a:b]
        evictable = np.flatnonzero(stamps < self._call_start)  # free slots have -1
        n = min(units.size, evictable.size)
        if n:
            if n < evictable.size:
                pick = evictable[np.argpartition(stamps[evictable], n - 1)[:n]]
            else:
                pick = evictable
            pick = pick[np.argsort(stamps[pick], kind="stable")]  # oldest first
            victims = a + pick
            old = self.owner[victims]
            gone = old >= 0
            self.slot_of[layer, old[gone]] = -1
            self.owner[victims] = units[:n]
            self.slot_of[layer, units[:n]] = victims
            self.last_used[victims] = self.tick + np.arange(n)
            self.tick += n
            out[:n] = victims
            if count:
                self.stats.evicted += int(gone.sum())
        if count:
            self.stats.admitted += n
            self.stats.bypassed += int(units.size) - n
        return out

    def preload(self, layer: int, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Warm start: put `units` (most valuable first) into free LRU slots of `layer`,
        without evicting or counting; the first listed is the most recently used.
        Returns (units placed, their slots)."""
        units = np.asarray(units, dtype=np.int64)
        units = units[self.slot_of[layer, units] < 0]
        a, b = self.lru_range[layer]
        free = a + np.flatnonzero(self.owner[a:b] < 0)
        n = min(units.size, free.size)
        units, slots = units[:n], free[:n]
        self.owner[slots] = units
        self.slot_of[layer, units] = slots
        self.last_used[slots] = self.tick + np.arange(n)[::-1]
        self.tick += n
        return units, slots

    def access(self, layer: int, units: Sequence[int] | np.ndarray) -> tuple[int, int]:
        """lookup + admit, for traces (repeats dropped, order kept): returns (hits, misses)."""
        units = np.array(list(dict.fromkeys(int(u) for u in units)), dtype=np.int64)
        look = self.lookup(layer, units)
        self.admit(layer, units[look.miss_pos])
        return look.n_hits, int(look.miss_pos.size)
