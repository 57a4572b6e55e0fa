"""The capped-memory experiment's table: each engine run beside the disk's ceiling.

One row per engine configuration (median over the interleaved rounds): decode tokens/s,
the storage bytes the process read per token (the kernel's count, /proc/<pid>/io), the
storage bandwidth that makes (bytes/token x tokens/s), and the tokens/s the disk's best
measured random-read bandwidth allows for those bytes ("ceil"): at the engine's own read
size (the flash cluster; llama.cpp's page-cache reads: 512 KB) and at the best size
measured. `x peer`: the median over rounds of the ratio to llama.cpp's tokens/s in the
same round; `gain`: to the row before (the ablation's steps are cumulative).
"""

from __future__ import annotations

import statistics
from typing import Any

from powerbench.hardware.facts import cpu_model
from powerbench.measure.flash_capped_runs import CappedReport
from powerbench.measure.flash_ffn_report import curve_bandwidth

GB = 1e9
MB = 1e6


def batch_bandwidth(ceiling: dict[str, float], batch: float) -> float:
    """Random-read bandwidth at `batch` reads submitted together (the measured cluster-size
    curve, interpolated in log2(batch); clamped to its ends)."""
    points = sorted((int(k[5:]), v) for k, v in ceiling.items() if k.startswith("batch"))
    return curve_bandwidth(points, batch) if points else ceiling["cluster"]


def summary_rows(report: CappedReport) -> list[dict[str, Any]]:
    """One dict per engine configuration, in the runs' order (llama.cpp last)."""
    ceil = report.ceiling
    peer = {r["round"]: r["tokens_per_s"] for r in report.results if r["engine"] == "llama.cpp"}
    labels = list(dict.fromkeys(r["label"] for r in report.results))
    rows: list[dict[str, Any]] = []
    for label in labels:
        rs = [r for r in report.results if r["label"] == label]
        tok = statistics.median(r["tokens_per_s"] for r in rs)
        bpt = statistics.median(r["read_bytes_per_token"] for r in rs)
        flash = rs[0]["engine"] == "flash"
        at_size = ceil["cluster"] if flash else ceil["512K"]
        run = rs[0].get("run", {})
        row: dict[str, Any] = {
            "engine": rs[0]["engine"], "config": label, "sparsity": run.get("sparsity", ""),
            "budget_gb": run.get("budget_gb", 0.0) if run.get("cache", True) else 0.0,
            "tokens_per_s": tok, "rounds": len(rs),
            "round_tokens_per_s": " ".join(f"{r['tokens_per_s']:.4g}" for r in rs),
            "read_mb_per_token": bpt / MB,
            "storage_gb_s": bpt * tok / GB,
            "ceiling_tokens_per_s_at_size": at_size / bpt if bpt else float("inf"),
            "ceiling_tokens_per_s_best": ceil["best"] / bpt if bpt else float("inf"),
            "cache_gb": statistics.median(r["cache_gb"] for r in rs) if flash else None,
            "peak_rss_gb": max(r["peak_rss"] for r in rs) / GB if flash else None,
            "rss_limit_gb": min(r["rss_limit"] for r in rs) / GB if flash else None,
            "cgroup_peak_gb": max(r.get("cap_peak", 0) for r in rs) / GB,
            "hit_rate": statistics.median(r.get("hit_rate", 0.0) for r in rs),
        }
        if flash and bpt:  # each layer's reads are one batch: the disk at that batch size
            batch = statistics.median(r["reads_per_token"] for r in rs) / rs[0]["n_layers"]
            row["reads_per_layer"] = batch
            row["ceiling_tokens_per_s_at_batch"] = batch_bandwidth(ceil, batch) / bpt
        else:
            row["reads_per_layer"] = None
            row["ceiling_tokens_per_s_at_batch"] = at_size / bpt if bpt else float("inf")
        row["fraction_of_ceiling_at_batch"] = tok / row["ceiling_tokens_per_s_at_batch"]
        row["fraction_of_ceiling_at_size"] = tok / row["ceiling_tokens_per_s_at_size"]
        row["fraction_of_ceiling_best"] = tok / row["ceiling_tokens_per_s_best"]
        ratios = [r["tokens_per_s"] / peer[r["round"]] for r in rs
                  if peer.get(r["round"]) and r["engine"] == "flash"]
        row["x_llamacpp"] = statistics.median(ratios) if ratios else None
        row["gain_vs_previous"] = tok / rows[-1]["tokens_per_s"] if rows and flash else None
        rows.append(row)
    return rows


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def table(rows: list[dict[str, Any]], gains: bool = False, peer: bool = True) -> str:
    head = (f"{'configuration':34s} {'tok/s':>8s} " + (f"{'x peer':>7s} " if peer else "")
            + (f"{'gain':>6s} " if gains else "")
            + f"{'MB/tok':>8s} {'GB/s':>6s} {'rd/lay':>6s} {'ceil@bt':>8s} {'%':>5s} "
            f"{'ceil@sz':>8s} {'%':>5s} {'ceil':>8s} {'%':>5s} "
            f"{'peakRSS':>7s} {'limit':>6s} {'cg pk':>6s} {'hit':>5s}")
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r['config']:34s} {r['tokens_per_s']:8.4g} "
            + (f"{_f(r['x_llamacpp'], '7.2f')} " if peer else "")
            + (f"{_f(r['gain_vs_previous'], '6.2f')} " if gains else "")
            + f"{r['read_mb_per_token']:8.1f} {r['storage_gb_s']:6.3f} "
            f"{_f(r['reads_per_layer'], '6.1f')} {r['ceiling_tokens_per_s_at_batch']:8.4g} "
            f"{100 * r['fraction_of_ceiling_at_batch']:5.0f} "
            f"{r['ceiling_tokens_per_s_at_size']:8.4g} "
            f"{100 * r['fraction_of_ceiling_at_size']:5.0f} "
            f"{r['ceiling_tokens_per_s_best']:8.4g} {100 * r['fraction_of_ceiling_best']:5.0f} "
            f"{_f(r['peak_rss_gb'], '7.2f')} {_f(r['rss_limit_gb'], '6.2f')} "
            f"{r['cgroup_peak_gb']:6.2f} {r['hit_rate']:5.2f}")
    return "\n".join(out)


def render(report: CappedReport, title: str, gains: bool = False) -> str:
    exp, ceil = report.exp, report.ceiling
    s = exp.spec
    peer = exp.llamacpp
    sp = "; ".join(f"{x.name}: {x.token_sparsity:.0%} inactive per token ({x.source})"
                   for x in exp.sparsities)
    caps = ", ".join(f"{c['engine']} r{c['round']}: peak {c['max_usage_bytes'] / GB:.2f} GB"
                     + (f", OOM kills {c['oom_kills']}" if c["oom_kills"] else "")
                     for c in report.cap_stats)
    lines = [
        title,
        "SYNTHETIC WEIGHTS (seeded random): only speed and storage traffic mean anything; the "
        "tokens are not compared.",
        f"{report.load.line()}; machine: {cpu_model()}; MemAvailable at the start "
        f"{report.mem_available / GB:.1f} GB",
        f"model {s.name}: {s.n_layers} layers, d_model {s.d_model}, d_ffn {s.d_ffn}, "
        f"{s.ffn_kind.value}, {exp.dtype}, {report.model_bytes / GB:.2f} GB of weights (tied "
        "embedding / LM head); files: " + ", ".join(
            f"{n} {b / GB:.2f} GB" for n, b in report.file_bytes.items()),
        f"memory cap: cgroup v1 memory.limit_in_bytes = {exp.cap_bytes / GB:.2f} GB "
        f"({exp.cap_bytes / report.model_bytes:.0%} of the model) for each engine's process "
        "(page cache included; the flash process's limit is lowered by what it held before "
        f"joining); cgroup peaks: {caps}",
        f"decode: prompt {exp.prompt_tokens} tokens, {exp.new_tokens} new (tok/s over the "
        f"{exp.new_tokens - 1} steps after the first), {exp.threads} threads, {exp.rounds} "
        "rounds interleaved (order alternating); flash: active sets from the synthetic "
        f"profile, a seeded rank-{exp.predictor_rank} predictor MLP run per layer call "
        f"(cost charged), hot share {exp.hot_fraction}; resident guard: peak RSS <= "
        f"baseline + dense + cache budget + one layer of scratch + slack "
        f"{exp.slack_bytes / GB:.2f} GB",
        f"sparsity: {sp}",
        f"disk ceiling (same run, AIO random reads on the experiment's files, best of "
        f"before/after): {int(ceil['cluster_bytes']) // 1024} KB (flash cluster) "
        f"{ceil['cluster'] / GB:.3f} GB/s, 512 KB {ceil['512K'] / GB:.3f} GB/s, best "
        f"{ceil['best'] / GB:.3f} GB/s; cluster-size batches: " + ", ".join(
            f"{k[5:]}: {v / GB:.2f}" for k, v in ceil.items() if k.startswith("batch"))
        + " GB/s. ceil@sz = tok/s this bandwidth at the engine's read size (flash: cluster; "
        "llama.cpp: 512 KB) allows for the row's MB/tok; ceil = at the best size; ceil@bt = "
        "at the batch size the flash engine submits (rd/lay: its reads per layer call, each "
        "layer's reads one batch); % = tok/s / ceiling",
        "MB/tok: storage bytes read per decode step by the engine's process (kernel "
        "/proc/<pid>/io read_bytes); GB/s = MB/tok x tok/s; peakRSS/limit: the flash "
        "process's VmHWM per run and its guard; cg pk: the cgroup's peak usage (GB)",
        "",
        table(summary_rows(report), gains=gains, peer=peer),
    ]
    return "\n".join(lines)


def target_lines(rows: list[dict[str, Any]], ratio: float = 3.0, fraction: float = 0.8,
                 ablation: bool = False) -> list[str]:
    """The benchmark's targets, met or missed, with the arithmetic."""
    out = []
    if ablation:
        last = rows[-1]
        ok = last["fraction_of_ceiling_at_batch"] >= fraction
        out.append(
            f"target: {last['config']} >= {fraction:.0%} of the disk's ceiling for its bytes: "
            f"{'met' if ok else 'MISSED'}: {last['tokens_per_s']:.3g} tok/s vs "
            f"{last['ceiling_tokens_per_s_at_batch']:.4g} tok/s at its batch "
            f"({last['reads_per_layer'] or 0:.1f} reads/layer) = "
            f"{last['fraction_of_ceiling_at_batch']:.1%} ({last['read_mb_per_token']:.2f} "
            f"MB/token; at the best size {last['ceiling_tokens_per_s_best']:.4g} tok/s, "
            f"{last['fraction_of_ceiling_best']:.1%})")
        return out
    for r in rows:
        if r["x_llamacpp"] is None:
            continue
        ok = r["x_llamacpp"] >= ratio
        out.append(f"target: {r['config']} >= {ratio:g}x llama.cpp: "
                   f"{'met' if ok else 'MISSED'} ({r['x_llamacpp']:.2f}x; "
                   f"{r['read_mb_per_token']:.0f} vs llama.cpp "
                   f"{rows[-1]['read_mb_per_token']:.0f} MB/token read)")
    return out
