"""PhonePlacement: a Placement whose FFN may live partly in flash (the offline planner's
output), with the CPU core plan decode runs on."""

from __future__ import annotations

from dataclasses import dataclass

from powerbench.profiling.activation_profile import ActivationProfile
from powerbench.solver.flash_plan import FlashPlan
from powerbench.solver.placement import Placement

CLASS_CODE = {"big": 0.0, "mid": 1.0, "little": 2.0}


@dataclass(frozen=True)
class CorePlan:
    """CPU clusters decode computes on, their sustained FLOP/s, and the flash issuers."""

    compute_clusters: tuple[str, ...]
    compute_flops: float  # while a layer's flash reads are in flight
    io_core: str  # class: big | mid | little
    io_cores: int
    # FLOP/s the I/O thread(s) take from the compute set while reads are in flight; the rest
    # of the token (attention, predictors, layers without reads) runs on compute + io_flops
    io_flops: float = 0.0


@dataclass
class PhonePlacement(Placement):
    flash: FlashPlan | None = None  # None: the whole FFN is resident in DRAM
    cores: CorePlan | None = None
    dram_budget_bytes: float = 0.0
    resident_ffn_share: float = 1.0  # of the FFN bytes

    def metrics(self, profile: ActivationProfile) -> dict[str, float]:
        out = super().metrics(profile)
        out |= {"pi2_dram_budget_gb": self.dram_budget_bytes / 1e9,
                "pi2_dram_used_gb": (self.cpu.total + self.gpu.total) / 1e9,
                "pi2_resident_ffn_share": self.resident_ffn_share,
                "pi2_ffn_in_flash": float(self.flash is not None)}
        if self.flash is not None:
            seg = self.flash.segments
            out |= {"pi2_cluster_neurons": float(self.flash.cluster_neurons),
                    "pi2_hot_clusters": float(seg.n_hot),
                    "pi2_lru_clusters": float(sum(seg.lru))}
        if self.cores is not None:
            out |= {"pi2_compute_gflops": self.cores.compute_flops / 1e9,
                    "pi2_io_cores": float(self.cores.io_cores),
                    "pi2_io_core_class": CLASS_CODE.get(self.cores.io_core, -1.0)}
        return out
