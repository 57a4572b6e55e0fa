"""How well can layer l's FFN input predict layer l+1's active neurons? (lookahead recall)

`FlashFFN(lookahead=True)` reads layer l+1's predicted misses while layer l computes, from
a prediction made with layer l's input (Deja Vu's "asynchronous lookahead" idea: the
residual stream changes little from one layer to the next). This measures, on a real
model's activations, the recall of the simplest such predictor: layer l+1's own gate/up
(or fc1) applied to a stale input, top-k of |activation| with k = the true active set's
size (so precision = recall), against the true top-k of layer l+1 (for a SwiGLU model the
"active" set is the top `active_fraction` by |silu(gate) * up|; for ReLU, a trained
predictor's task is the same ranking).

Two stale inputs: `ffn_input` (layer l's normed FFN input, what `FlashFFN` receives)
and `residual` (layer l's pre-norm residual with layer l+1's norm: needs the residual
stream, which the engine's FFN call does not see). Run:

    python -m powerbench.flash.lookahead_recall [model_dir] [active_fraction ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch


def _text() -> str:
    root = Path(__file__).resolve().parents[2]
    return (root / "README.md").read_text()[:20000]


@torch.no_grad()
def lookahead_recall(model_dir: str, fractions: tuple[float, ...] = (0.03, 0.1),
                     max_tokens: int = 512) -> dict[str, list[float]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tok(_text(), return_tensors="pt").input_ids[:, :max_tokens]
    layers = model.model.layers
    resid: dict[int, torch.Tensor] = {}
    hooks = [layer.post_attention_layernorm.register_forward_hook(
        lambda m, inp, out, i=i: resid.__setitem__(i, inp[0][0].clone()))
        for i, layer in enumerate(layers)]
    model(ids)
    for h in hooks:
        h.remove()

    def act(i: int, h: torch.Tensor) -> torch.Tensor:
        mlp = layers[i].mlp
        return (torch.nn.functional.silu(mlp.gate_proj(h)) * mlp.up_proj(h)).abs()

    out: dict[str, list[float]] = {}
    d_ffn = layers[0].mlp.gate_proj.out_features
    for frac in fractions:
        k = max(1, round(frac * d_ffn))
        for name in ("ffn_input", "residual"):
            recalls = []
            for i in range(len(layers) - 1):
                true = act(i + 1, layers[i + 1].post_attention_layernorm(resid[i + 1]))
                stale = (layers[i].post_attention_layernorm(resid[i]) if name == "ffn_input"
                         else layers[i + 1].post_attention_layernorm(resid[i]))
                pred = act(i + 1, stale)
                t = torch.zeros_like(true, dtype=torch.bool).scatter_(
                    1, true.topk(k, dim=1).indices, True)
                p = torch.zeros_like(true, dtype=torch.bool).scatter_(
                    1, pred.topk(k, dim=1).indices, True)
                recalls.append(float((t & p).sum() / t.sum()))
            out[f"{name} top{frac:.0%}"] = recalls
    return out


def main(argv: list[str]) -> None:
    model_dir = argv[0] if argv else str(next(
        (Path(__file__).resolve().parents[2] / ".cache" / "models").glob("gguf-smollm2*")))
    fractions = tuple(float(a) for a in argv[1:]) or (0.03, 0.1)
    res = lookahead_recall(model_dir, fractions)
    print(f"lookahead recall (= precision), model {Path(model_dir).name}, 512 tokens of README")
    for name, rec in res.items():
        r = np.asarray(rec)
        print(f"{name:22s} mean {r.mean():.3f}  median {np.median(r):.3f}  min {r.min():.3f} "
              f" max {r.max():.3f}  per layer pair: {' '.join(f'{x:.2f}' for x in r)}")


if __name__ == "__main__":
    main(sys.argv[1:])
