"""Prefill (the prompt phase), modelled separately from decode.

A prompt of P tokens x B rows is one forward pass of P x B rows. Nearly every FFN neuron
fires for some token of a long prompt, so the prompt is compute-heavy and dense.

`gpu_stream` (default, PrefillMode): llama.cpp computes long prompts densely on the GPU:
its CUDA back end computes every matrix product of a batch of at least 32 rows on the GPU,
copying host-resident weights over PCIe as it goes (llama.cpp `ggml_cuda_can_mul_mat`:
ne0, ne1, ne10 >= 32). PowerInfer's FFN runs through its own neuron-aware operators
(mul_mat_sparse / axpy: a predictor score per neuron and token), which that rule does not
touch (experiment/system=powerinfer: see below). A `gpu_stream` layer:

    t = max(FLOPs / F_gpu, gpu-resident bytes / BW_gpu + host-resident bytes / BW_h2d,
            kernels x launch_s) + (K, V of the prompt back to the host if the layer's KV
            cache lives there)

Streaming overlaps compute (max); the copy itself is the bottleneck for offloaded
weights. Prompts shorter than `gpu_min_tokens` rows, CPU-only machines and
`prefill.mode=hybrid` use the decode cost model instead (`CostModel.forward` on one pass
of P x B rows: each device reads its neurons in the union over the prompt and, with
`token_skip`, computes each token's own). `prefill.mode=powerinfer_public` is that pass with
each sparse operator reading its rows as PowerInfer's public code does (once per prompt, or
again for every token: powerbench.simulator.public_prompt); `experiment/system=powerinfer`
keeps `hybrid` (conf/experiment/system/powerinfer.yaml says why).
"""

from __future__ import annotations

import numpy as np

from powerbench.simulator.cost import LOGIT_BYTES, CostModel, PassCosts, PassShape
from powerbench.simulator.rates import CPU, GPU
from powerbench.simulator.workload import FFNWork


def stream_prefill(model: CostModel, work: FFNWork, shape: PassShape) -> PassCosts:
    """Dense prompt pass on the accelerator with host-resident weights streamed in."""
    gpu, link = model.dev[GPU], model.link
    assert link is not None
    spec, p = model.spec, model.placement
    n_pass, n_layers = work.n_passes, spec.n_layers
    stream_bw = link.to_gpu_bw if np.isfinite(link.to_gpu_bw) else gpu.bandwidth
    layer = {k: np.zeros((n_pass, n_layers)) for k in ("gpu_dense", "weight_stream",
                                                       "kv_writeback")}
    read = {GPU: np.zeros(n_pass), CPU: np.zeros(n_pass)}
    x_bytes = model.x_bytes * shape.rows
    ops = model.ops[GPU].attention + model.ops[GPU].ffn_dense
    for i in range(n_layers):
        home = p.attn_device[i]
        kv_bytes = shape.kv_tokens * model.kv_token_bytes
        flops = (2.0 * spec.attn_params_per_layer * shape.rows
                 + gpu.score_flops_equivalent(
                     4.0 * spec.n_heads * spec.head_dim * shape.score_pairs)
                 + 2.0 * spec.params_per_neuron
                 * (work.gpu_token_computed[:, i] + work.cpu_token_computed[:, i]))
        local = kv_bytes + work.gpu_computed[:, i] * model.neuron_bytes
        host = work.cpu_computed[:, i] * model.neuron_bytes
        if home == GPU:
            local = local + model.attn_bytes
        else:
            host = host + model.attn_bytes
        t_local = gpu.time(local, flops, ops)
        t_all = np.maximum(t_local, local / gpu.bandwidth + host / stream_bw)
        layer["gpu_dense"][:, i] = t_local
        layer["weight_stream"][:, i] = t_all - t_local
        if home == CPU:
            layer["kv_writeback"][:, i] = link.transfer(kv_bytes, CPU)
        read[GPU] += local
        read[CPU] += host
    embed_dev = p.embed_device
    embed_bytes = shape.rows * spec.d_model * model.weight_bytes
    read[embed_dev] += embed_bytes
    token = {
        "embedding": np.full(n_pass, float(model.dev[embed_dev].time(embed_bytes, 0.0, 1))),
        "transition": np.full(n_pass, float(model.switch(embed_dev, GPU, x_bytes))),
        "transition_out": np.full(n_pass, float(model.switch(GPU, p.lm_head_device,
                                                             model.x_bytes * shape.out_rows))),
    }
    dev, t = model.lm_head(shape)
    read[dev] += model.lm_head_bytes
    token[f"lm_head@{dev}"] = np.full(n_pass, t)
    token["logits_out"] = np.full(n_pass, float(
        model.switch(dev, CPU, spec.vocab_size * shape.out_rows * LOGIT_BYTES)))
    token["host_overhead"] = model.host_overhead(n_pass)
    return PassCosts(layer=layer, token=token, bytes_read=read)
