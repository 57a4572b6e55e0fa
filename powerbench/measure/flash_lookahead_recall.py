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

    powerbench bench-flash task.mode=lookahead_recall [task.recall_model_dir=...]
"""

from __future__ import annotations

from pathlib import Path

import torch


def default_model_dir() -> Path:
    """The SmolLM2-135M model directory in the project's cache."""
    from powerbench.paths import cache_dir

    found = next((cache_dir() / "models").glob("gguf-smollm2*"), None)
    if found is None:
        raise FileNotFoundError("no SmolLM2 model under <cache>/models: set "
                                "task.recall_model_dir")
    return found


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
