"""The CPU part of engine=hybrid's FFN, run on a worker thread while the host issues the GPU
part (`powerbench.engine.hybrid`).

Per layer call, from the decoder's (main) thread:

    submit(...)  copy stream, after the main stream's work so far: x and the layer's active
                 union -> pinned host memory; the worker thread waits for that copy's event,
                 picks the CPU part's active ids, runs the CPU operator and writes y into a
                 pinned output slot
    ...          meanwhile the main thread enqueues the GPU part (its launches are host time
                 too: the worker runs beside them, not after them)
    merge(y)     waits for the worker only (never for the GPU part), copies the slot to the
                 GPU without blocking, on the main stream, and adds it there

so the host synchronises once per layer (the worker's wait for x) and runs ahead of the GPU
between that wait and the next layer's.

`inline=True` (engine.ffn.cpu_part=inline) keeps no worker: submit only starts the copies,
and merge runs the CPU part on the caller's thread (the same steps: the wait for x, the
ids, the operator, the slot), after the caller has issued the GPU part, which the GPU then
computes beside it. It spares the two thread hand-offs of every call (~55-67 us on the
2-vCPU development VM, see `ThreadPoolExecutor` below) and any wait for the GIL, at the
price of the GPU part's launches running before the CPU part instead of beside it; which
is faster is measured (`bench-hybrid` times both). The thread count is then set in the
caller's thread (the decoder's, whose own work runs on the GPU).

Buffer hazards: the pinned x and union buffers are rewritten only by the next call's copy,
enqueued after this call's merge has waited for the worker. Each output slot (two per
shape, used in turn) carries an event recorded after its host->device copy; the worker waits
on it before writing the slot again (a non-blocking copy reads host memory when it runs).
Tensors made on the main stream and read on the copy stream are `record_stream`-ed.

Thread count (`threads="auto"`, measured, no constant): the first decode calls try 1, 2, 4,
... up to the process's torch thread count in blocks of PROBE_CALLS calls (the first call of
a block untimed: it pays the switch), and the count with the lowest median CPU-part time is
kept. A few cold neurons are ~1 MB: waking helper threads can cost more than they save, and
a layer-offload layer (the whole FFN) wants every thread; the measurement decides. The count
is set in the worker thread (torch's OpenMP thread count is per thread: the main thread's
is untouched).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from powerbench.threads import doubling_counts, torch_threads

PROBE_CALLS = 16  # decode calls per candidate thread count (first one untimed)


@dataclass
class ThreadChoice:
    """The worker's thread count: fixed, or measured over the first decode calls."""

    candidates: list[int]
    probe_calls: int = PROBE_CALLS
    chosen: int | None = None
    times: dict[int, list[float]] = field(default_factory=dict)
    _calls: int = 0

    @classmethod
    def of(cls, threads: int | str, available: int) -> ThreadChoice:
        if threads == "auto":
            return cls(doubling_counts(available))
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"engine.ffn.cpu_threads={threads!r}: a thread count >= 1 or "
                             f"'auto' (measured over the first decode calls)")
        return cls([threads], chosen=threads)

    def current(self) -> int:
        """The count for the next decode call."""
        if self.chosen is not None:
            return self.chosen
        return self.candidates[min(self._calls // self.probe_calls, len(self.candidates) - 1)]

    def record(self, threads: int, seconds: float) -> None:
        """One decode call's CPU-part time at `threads` (ignored once chosen)."""
        if self.chosen is not None:
            return
        if self._calls % self.probe_calls:  # the block's first call pays the switch
            self.times.setdefault(threads, []).append(seconds)
        self._calls += 1
        if self._calls >= self.probe_calls * len(self.candidates):
            self.chosen = min(self.times, key=lambda k: (statistics.median(self.times[k]), k))


@dataclass
class CpuJob:
    """One layer call's CPU part: the worker's future, or (inline) the call that runs it
    (either gives y on the host, or None when no CPU neuron is active), and the output
    slot's event."""

    future: Future | None
    slot_event: Any = None
    run: Callable[[], Tensor | None] | None = None  # inline: runs the CPU part, once
    _done: tuple[Tensor | None] | None = None

    def result(self) -> Tensor | None:
        if self.future is not None:
            return self.future.result()
        if self._done is None:
            assert self.run is not None
            self._done = (self.run(),)
        return self._done[0]


class CpuPartRunner:
    """Runs CPU parts on one worker thread (see the module docstring)."""

    def __init__(self, ops: Any, device: torch.device, threads: int | str = "auto",
                 check: bool = False, inline: bool = False) -> None:
        self.ops, self.device, self.check = ops, device, check
        self.cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        ThreadChoice.of(threads, 1)  # a bad setting fails here, not in the first call
        self._threads_setting = threads
        self._threads: ThreadChoice | None = None
        self._worker = (None if inline else
                        ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-cpu"))
        self._worker_threads = 0  # the count last set in the worker thread
        self._pinned: dict[tuple, Tensor] = {}
        self._slots: dict[tuple, list[tuple[Tensor, Any]]] = {}
        self._turn: dict[tuple, int] = {}
        self.active = 0  # CPU-part neurons computed, over all calls
        self.gpu_active = 0  # GPU-part neurons of the same calls' unions (host-counted)
        self.seconds = 0.0
        self.decode_seconds = 0.0

    @property
    def threads(self) -> ThreadChoice:
        """The thread choice, made on first use from the CALLER's torch thread count (the
        decoder runs inside the session's `torch_threads`, the engine is built outside)."""
        if self._threads is None:
            self._threads = ThreadChoice.of(self._threads_setting, torch.get_num_threads())
        return self._threads

    @property
    def inline(self) -> bool:
        """The CPU part runs on the caller's thread (no worker)."""
        return self._worker is None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)

    # ---- main thread ------------------------------------------------------------------
    def submit(self, part: Any, x: Tensor, union: Tensor | None, decode: bool) -> CpuJob:
        """Start the CPU part of one call: `part` (the layer's CPU _Part: ids, all_ids, weights),
        x [rows, d] on the decoder's device, `union` bool [neurons] (None: every neuron)."""
        host_x, host_union, copied = self._to_host(x, union)
        slot = self._slot(x)
        choice = self.threads  # made here, in the caller's thread
        args = (part, host_x, host_union, copied, slot, decode, choice)
        if self.inline:
            return CpuJob(None, slot[1], run=lambda: self._run(*args))
        return CpuJob(self._worker.submit(self._run, *args), slot[1])

    def merge(self, job: CpuJob, y: Tensor | None) -> Tensor | None:
        """y (the GPU part, or None) plus the CPU part once the worker is done (inline: once
        it has run here); no GPU sync."""
        y_cpu = job.result()
        if y_cpu is None:
            return y
        if self.cuda:
            y_dev = y_cpu.to(self.device, non_blocking=True)
            job.slot_event.record(torch.cuda.current_stream(self.device))
        else:  # the slot is rewritten two calls later: the caller gets its own tensor
            y_dev = y_cpu.clone()
        if y is None:
            return y_dev
        return y + y_dev.to(y.dtype)

    def _pinned_like(self, key: str, like: Tensor) -> Tensor:
        shape = (key, tuple(like.shape), like.dtype)
        buf = self._pinned.get(shape)
        if buf is None:
            buf = torch.empty(like.shape, dtype=like.dtype, pin_memory=True)
            self._pinned[shape] = buf
        return buf

    def _slot(self, x: Tensor) -> tuple[Tensor, Any]:
        """The next of the two output slots for x's shape: (host buffer, the event of its
        last host->device copy; None on a CPU-only run)."""
        key = (tuple(x.shape), x.dtype)
        slots = self._slots.get(key)
        if slots is None:
            slots = [(torch.empty(x.shape, dtype=x.dtype, pin_memory=self.cuda),
                      torch.cuda.Event() if self.cuda else None) for _ in range(2)]
            self._slots[key] = slots
            self._turn[key] = 0
        turn = self._turn[key]
        self._turn[key] = 1 - turn
        return slots[turn]

    def _to_host(self, x: Tensor, union: Tensor | None) -> tuple[Tensor, Tensor | None, Any]:
        if not self.cuda:
            return x, union, None
        assert self.copy_stream is not None
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(self.device))
        host_x = self._pinned_like("x", x)
        host_union = self._pinned_like("union", union) if union is not None else None
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(ready)
            x.record_stream(self.copy_stream)
            host_x.copy_(x, non_blocking=True)
            if union is not None and host_union is not None:
                union.record_stream(self.copy_stream)
                host_union.copy_(union, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        return host_x, host_union, copied

    # ---- worker thread ----------------------------------------------------------------
    def _run(self, part: Any, host_x: Tensor, host_union: Tensor | None, copied: Any,
             slot: tuple[Tensor, Any], decode: bool, choice: ThreadChoice) -> Tensor | None:
        threads = choice.current() if decode else max(choice.candidates)
        if self.inline:  # the caller's count, set back afterwards (torch_threads)
            with torch_threads(threads):
                return self._compute(part, host_x, host_union, copied, slot, decode, choice,
                                     threads)
        if threads != self._worker_threads:
            torch.set_num_threads(threads)  # this thread's count (see the module docstring)
            self._worker_threads = threads
        return self._compute(part, host_x, host_union, copied, slot, decode, choice, threads)

    def _compute(self, part: Any, host_x: Tensor, host_union: Tensor | None, copied: Any,
                 slot: tuple[Tensor, Any], decode: bool, choice: ThreadChoice,
                 threads: int) -> Tensor | None:
        if copied is not None:
            copied.synchronize()
        start = time.perf_counter()
        # the decoder's thread runs in inference mode (thread-local): so does the worker, or
        # writing a slot made there would be an in-place update of an inference tensor
        with torch.inference_mode():
            if host_union is None:
                ids = part.all_ids
            else:
                ids = torch.nonzero(host_union.index_select(0, part.ids)).flatten()
                self.gpu_active += int(host_union.sum()) - int(ids.numel())
            self.active += int(ids.numel())
            y = (self.ops.ffn(host_x, part.weights, ids, check=self.check) if ids.numel()
                 else None)
            if y is not None:
                buf, consumed = slot
                if consumed is not None:
                    consumed.synchronize()  # the slot's previous host->device copy has run
                buf.copy_(y)
                y = buf
        spent = time.perf_counter() - start
        self.seconds += spent
        if decode:
            self.decode_seconds += spent
            choice.record(threads, spent)
        return y
