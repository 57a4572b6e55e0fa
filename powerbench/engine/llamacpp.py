"""llama.cpp as a measured peer (optional: `pip install '.[llamacpp]'`, `make llamacpp`).

`LlamaCppRunner` loads a GGUF with `llama-cpp-python` and generates greedily from the same
token ids our decoder gets, with the same thread count, timed as `powerbench.engine.timing`
defines it: prefill = the prompt's evaluation up to the first new token; decode = the
N - 1 following single-token steps (evaluate one token, pick the argmax), so
decode tokens/s = (N - 1) / decode seconds, exactly as `StepClock` measures our decoder.

`dequantised_gguf` writes an F32 or F16 copy of a quantised GGUF with the `gguf` package
(every tensor dequantised with `gguf.quants.dequantize`, the same values transformers
loads; 1-D norm weights stay F32 as llama.cpp expects), so llama.cpp can be compared at
our decoder's precision.

llama.cpp segfaults in `eval` when torch was imported first in the same process (both
bring their own OpenMP runtime), so `LlamaCppProcess` runs `LlamaCppRunner` in a child
Python that never imports torch: a `WorkerProcess`, `python -c` loading THIS FILE ALONE
(not its package: `powerbench.engine` imports torch) and calling the module-level
function `llamacpp_worker`, which `serve`s JSON lines over the child's stdin/stdout; no
script entry point. So this file imports only the standard library at module level (a
test keeps it so): torch, llama_cpp and gguf are imported where used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

Precision = Literal["f32", "f16"]


def llamacpp_available() -> bool:
    """True when `llama_cpp` (llama-cpp-python) can be imported here."""
    return importlib.util.find_spec("llama_cpp") is not None


def dequantised_gguf(src: Path | str, out: Path | str, precision: Precision = "f32") -> Path:
    """Write `src` with every quantised tensor dequantised to `precision` (F16: matrices
    only; 1-D tensors stay F32). Metadata and tokenizer are copied; `general.file_type` is
    updated. Returns `out` (skipped when it already exists and is newer than `src`)."""
    import gguf
    import numpy as np

    src, out = Path(src), Path(out)
    if out.is_file() and out.stat().st_mtime >= src.stat().st_mtime:
        return out
    reader = gguf.GGUFReader(src)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    tmp = out.with_suffix(out.suffix + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(tmp, arch)
    file_type = (gguf.LlamaFileType.ALL_F32 if precision == "f32"
                 else gguf.LlamaFileType.MOSTLY_F16)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_key_value(field.name, int(file_type), gguf.GGUFValueType.UINT32)
            continue
        val_type = field.types[0]
        sub_type = field.types[-1] if val_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), val_type, sub_type=sub_type)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if precision == "f16" and data.ndim >= 2:
            data = data.astype(np.float16)
        writer.add_tensor(tensor.name, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return out


def random_llama_gguf(spec: Any, out: Path | str, seed: int = 0,
                      progress: Any = None) -> Path:
    """Write an F16 GGUF of `spec`'s LLaMA shape (`ModelSpec`: layers, widths, heads,
    vocabulary) with seeded random weights, one tensor at a time (never the model in
    memory): a 13B-shaped file (26 GB) needs ~300 MB of RAM. llama.cpp runs every gated
    FFN as SwiGLU, so a ReGLU spec is written as LLaMA: the same shapes and bytes. The
    values: one seeded block of 16M standard-normal values x 0.02, tiled with a per-tensor
    offset (only speed and traffic mean anything for such a model); norms are ones (F32).
    The LM head is tied to the token embedding (no `output.weight`: llama.cpp reuses
    `token_embd`), as our synthetic decoder ties them. The vocabulary is a stand-in
    (byte tokens, <unk>/<s>/</s>, placeholders). Written to `<out>.tmp`, then renamed;
    an existing `out` is kept. Returns `out`."""
    import gguf
    import numpy as np

    out = Path(out)
    if out.is_file():
        return out
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    d, f, hd = spec.d_model, spec.d_ffn, spec.head_dim
    q_out, kv_out = spec.n_heads * hd, spec.n_kv_heads * hd
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (spec.vocab_size, d)),
                                                 ("output_norm.weight", (d,))]
    for i in range(spec.n_layers):
        b = f"blk.{i}."
        shapes += [(b + "attn_norm.weight", (d,)), (b + "attn_q.weight", (q_out, d)),
                   (b + "attn_k.weight", (kv_out, d)), (b + "attn_v.weight", (kv_out, d)),
                   (b + "attn_output.weight", (d, q_out)), (b + "ffn_norm.weight", (d,)),
                   (b + "ffn_gate.weight", (f, d)), (b + "ffn_up.weight", (f, d)),
                   (b + "ffn_down.weight", (d, f))]
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name(f"powerbench synthetic {spec.name}")
    w.add_context_length(spec.max_positions)
    w.add_embedding_length(d)
    w.add_block_count(spec.n_layers)
    w.add_feed_forward_length(f)
    w.add_head_count(spec.n_heads)
    w.add_head_count_kv(spec.n_kv_heads)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    rest = [f"t{i}" for i in range(spec.vocab_size - len(specials) - len(byte_tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(specials + byte_tokens + rest)
    w.add_token_scores([0.0] * spec.vocab_size)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(rest))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for name, shape in shapes:
        dt = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    block = (np.random.default_rng(seed).standard_normal(1 << 24, dtype=np.float32) * 0.02
             ).astype(np.float16)
    for k, (_, shape) in enumerate(shapes):
        n = int(np.prod(shape))
        if len(shape) == 1:
            data = np.ones(n, dtype=np.float32)
        else:
            start = (k * 7_919_003) % block.size
            data = np.resize(np.roll(block, -start), n)
        w.write_tensor_data(data.reshape(shape))
        del data
        if progress is not None:
            progress(k + 1, len(shapes))
    w.close()
    with open(tmp, "rb") as fh:  # the file is for llama.cpp's mmap, not the page cache now
        os.fsync(fh.fileno())
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    tmp.replace(out)
    return out


def _read_bytes() -> int:
    """Bytes this process caused to be read from storage (/proc/self/io; -1 off Linux)."""
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


@dataclass
class LlamaCppTiming:
    prefill_s: float
    step_s: list[float]
    # storage bytes read by the process (the kernel's count) during the prefill and each step
    prefill_read_bytes: int = -1
    step_read_bytes: list[int] | None = None

    @property
    def decode_tokens_per_s(self) -> float:
        return len(self.step_s) / sum(self.step_s) if self.step_s else 0.0


class LlamaCppRunner:
    """One GGUF loaded in llama.cpp, ready to time greedy generations."""

    def __init__(self, gguf_path: Path | str, threads: int, n_ctx: int = 512) -> None:
        if not llamacpp_available():
            raise ImportError("llama.cpp comparisons need llama-cpp-python: "
                              "`pip install '.[llamacpp]'` (or `make llamacpp`)")
        import llama_cpp
        import llama_cpp.llama as llama_module

        # llama.cpp's extra buffer types (AMX / weight repacking) segfault in llama_decode for
        # the shipped Q4_1 file on this project's AMX Xeon (llama-cpp-python 0.3.36): load
        # without them (F32/F16 weights do not use them anyway).
        default_params = llama_cpp.llama_model_default_params

        def params() -> Any:
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_module.llama_cpp.llama_model_default_params = params
        Llama = llama_module.Llama
        self.path = Path(gguf_path)
        self.threads = threads
        self.llm: Any = Llama(model_path=str(self.path), n_ctx=n_ctx, n_threads=threads,
                              n_threads_batch=threads, n_batch=512, logits_all=False,
                              verbose=False)

    def _next(self) -> int:
        """Greedy choice from the last evaluated token's logits (read from the context)."""
        import llama_cpp
        import numpy as np

        ptr = llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),))))

    def generate(self, prompt: Sequence[int], new_tokens: int) -> tuple[list[int],
                                                                         LlamaCppTiming]:
        """Greedy: prefill `prompt`, then exactly `new_tokens` tokens; timed per step."""
        if new_tokens < 1:
            raise ValueError("new_tokens must be >= 1")
        llm = self.llm
        llm.reset()
        reads = [_read_bytes()]
        start = time.perf_counter()
        llm.eval(list(prompt))
        tokens = [self._next()]
        stamps = [time.perf_counter()]
        reads.append(_read_bytes())
        for _ in range(new_tokens - 1):
            llm.eval([tokens[-1]])
            tokens.append(self._next())
            stamps.append(time.perf_counter())
            reads.append(_read_bytes())
        steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        deltas = [b - a for a, b in zip(reads, reads[1:], strict=False)]
        return tokens, LlamaCppTiming(prefill_s=stamps[0] - start, step_s=steps,
                                      prefill_read_bytes=deltas[0], step_read_bytes=deltas[1:])

    def close(self) -> None:
        close = getattr(self.llm, "close", None)
        if callable(close):
            close()


# ---- the torch-free child process ------------------------------------------------------

_MARK = "@@powerbench-llamacpp "
# the child's program: `source` loaded alone as a module, then `function(args)`
CHILD = ("import importlib.util as u, sys; s = u.spec_from_file_location('powerbench_worker', "
         "sys.argv[1]); m = sys.modules[s.name] = u.module_from_spec(s); "
         "s.loader.exec_module(m); sys.exit(getattr(m, sys.argv[2])(sys.argv[3:]))")


class WorkerProcess:
    """A child Python serving `generate` over JSON lines: `python -c` loads `source` (a
    module file whose module-level imports its package must not make: here the standard
    library only) and exits with `function(args)`, which builds a runner and `serve`s it.
    The same `generate` API as `LlamaCppRunner`."""

    def __init__(self, source: Path | str, function: str, args: Sequence[object],
                 name: str = "worker", preexec_fn: Callable[[], None] | None = None) -> None:
        """`preexec_fn`: run in the child before it starts Python (e.g. joining a memory
        cgroup, so that everything the child maps is charged there)."""
        if not function.isidentifier():
            raise ValueError(f"worker function {function!r}: expected a function name")
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(Path(source).resolve()), function,
             *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1, preexec_fn=preexec_fn)
        self._call({"cmd": "ping"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _call(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(_MARK):
                reply = json.loads(line[len(_MARK):])
                if "error" in reply:
                    raise RuntimeError(f"{self.name}: {reply['error']}")
                return reply
        raise RuntimeError(f"{self.name} exited with code {self.proc.wait()}")

    def generate(self, prompt: Sequence[int], new_tokens: int) -> tuple[list[int],
                                                                         LlamaCppTiming]:
        reply = self._call({"cmd": "generate", "prompt": [int(t) for t in prompt],
                            "new_tokens": int(new_tokens)})
        return reply["tokens"], LlamaCppTiming(reply["prefill_s"], reply["step_s"],
                                               reply.get("prefill_read_bytes", -1),
                                               reply.get("step_read_bytes"))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._call({"cmd": "quit"})
            except (RuntimeError, BrokenPipeError, OSError):
                pass
            self.proc.wait(timeout=10)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LlamaCppProcess(WorkerProcess):
    """`LlamaCppRunner` in a torch-free child process (see the module doc)."""

    def __init__(self, gguf_path: Path | str, threads: int, n_ctx: int = 512,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        if not llamacpp_available():
            raise ImportError("llama.cpp comparisons need llama-cpp-python: "
                              "`pip install '.[llamacpp]'` (or `make llamacpp`)")
        self.path = Path(gguf_path)
        self.threads = threads
        super().__init__(__file__, "llamacpp_worker", [self.path, threads, n_ctx],
                         f"llama.cpp worker for {self.path.name}", preexec_fn)


def serve(make_runner: Callable[[], Any], requests: Iterable[str] | None = None,
          reply_to: TextIO | None = None) -> int:
    """The child's loop: build the runner (a failure is the reply to every request), then
    answer each JSON request line (`ping`, `generate`, `quit`) with one marked JSON line."""
    requests = sys.stdin if requests is None else requests
    out = sys.stdout if reply_to is None else reply_to
    try:
        runner, failed = make_runner(), None
    except Exception as err:  # reported to the parent, which raises
        runner, failed = None, f"{type(err).__name__}: {err}"
    for line in requests:
        request = json.loads(line)
        if request["cmd"] == "quit":
            print(_MARK + json.dumps({"ok": True}), file=out, flush=True)
            return 0
        try:
            if failed:
                reply: dict = {"error": failed}
            elif request["cmd"] == "ping":
                reply = {"ok": True}
            else:
                tokens, timing = runner.generate(request["prompt"], request["new_tokens"])
                reply = {"tokens": tokens, "prefill_s": timing.prefill_s,
                         "step_s": timing.step_s,
                         "prefill_read_bytes": timing.prefill_read_bytes,
                         "step_read_bytes": timing.step_read_bytes}
        except Exception as err:  # reported to the parent, which raises
            reply = {"error": f"{type(err).__name__}: {err}"}
        print(_MARK + json.dumps(reply), file=out, flush=True)
    return 0


def llamacpp_worker(argv: Sequence[str]) -> int:
    """The llama.cpp child: `LlamaCppRunner(gguf path, threads, n_ctx)` served."""
    path, threads, n_ctx = argv[0], int(argv[1]), int(argv[2])
    return serve(lambda: LlamaCppRunner(path, threads, n_ctx))
