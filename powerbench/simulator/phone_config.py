"""Typed schema of `simulator=phone` (schema/simulator/phone): the cost model plus a
phone's flash tier and NPU prefill (powerbench.simulator.phone)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from powerbench.schema_helpers import coerce_enums
from powerbench.simulator.config import SimulatorConfig


class PhoneUnit(StrEnum):
    """Where a phase runs. Prefill: npu: the prompt runs densely on the NPU (its sustained
    rate, NPU-only DRAM bandwidth), the CPU streams flash-resident weights in (both units
    together: the shared DRAM bandwidth); cpu: densely on the CPU cores (CPU-only
    bandwidth). Decode: cpu: the planned CPU clusters; npu: the whole model dense on the NPU
    (QNN), every weight resident in DRAM."""

    npu = "npu"
    cpu = "cpu"


@dataclass
class PhoneSimConfig(SimulatorConfig):
    _target_: str = "powerbench.simulator.phone.simulate_phone"
    name: str = "phone"
    # I/O-compute pipeline: a layer's FFN takes max(compute, flash reads) + one read's
    # latency; off: compute + reads (LLM-in-a-Flash, llama.cpp's page faults)
    pipeline: bool = True
    prefill_unit: PhoneUnit = PhoneUnit.npu
    decode_unit: PhoneUnit = PhoneUnit.cpu
    # NPU decode (QNN): share of the NPU-only effective DRAM bandwidth a dense token
    # sustains (conf/simulator/phone.yaml gives its source)
    npu_decode_efficiency: float = 0.7
    # LLM in a Flash's sliding window (powerbench.simulator.window_cache): DRAM holds the
    # neurons active in the last `window_tokens` tokens instead of the plan's cache
    # (None: the plan's cache policy)
    window_tokens: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        coerce_enums(self)
        if not 0.0 < self.npu_decode_efficiency <= 1.0:
            raise ValueError(f"simulator.npu_decode_efficiency must be in (0, 1], got "
                             f"{self.npu_decode_efficiency}")
        if self.window_tokens is not None and self.window_tokens < 1:
            raise ValueError(f"simulator.window_tokens must be >= 1 (or null: the plan's "
                             f"cache), got {self.window_tokens}")


SCHEMAS = {"phone": PhoneSimConfig}
