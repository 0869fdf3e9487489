"""The summary bench/test_service.py prints after its figures: every figure next to its
target (issue 4, 16 and 19 targets in brackets), with the PySyncObj, echo and etcd ratios.

`figures` maps a key to a rate (entries/s, float), a `dledger.cli.loadgen.BenchResult`, a
`bench._load.LoadResult` or an idle p50 in milliseconds; absent keys (a skipped comparison)
leave their line out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench._load import LoadResult
from dledger.cli.loadgen import BenchResult

UNARY_64 = "service-unary-64threads"
UNARY_16X4 = "service-unary-16x4"
DLEDGER_SINGLE = "dledger-async-single"
DLEDGER_SINGLE_RPC = "dledger-async-single-rpc"
"""The same appends from a client with multiplex=False (one RPC per call)."""
ETCD_PUT = "etcd-put"
ETCD_TXN = "etcd-txn128"
ECHO = "grpc-echo"


def rate(figures: Mapping[str, Any], key: str) -> float | None:
    """The entries/s of `key` (a rate or a load result), or None."""
    value = figures.get(key)
    if isinstance(value, LoadResult | BenchResult):
        return value.entries_per_s
    return float(value) if value is not None else None


def summary_lines(figures: Mapping[str, Any], latency_rate: int) -> list[str]:
    """The summary of `figures`, one line per figure (issue 4 and 16), then the etcd
    comparison (issue 19)."""
    lines = ["service figures (issue 4 targets in brackets):"]
    for label, target, pso_target in (("128B", 300_000, 15), ("1KiB", 80_000, 5)):
        single, batch = (rate(figures, f"service-{label}/pysyncobj-{mode}") for mode in ("single", "batch"))
        for impl in ("dledger-async-batch", "dledger-async-stream", "dledger-sync-batch"):
            value = rate(figures, f"service-{label}/{impl}")
            if value is None:
                continue
            ratios = ", ".join(
                f"{value / base:.1f}x pysyncobj-{name}" for name, base in (("single", single), ("batch", batch)) if base
            )
            lines.append(f"  {label} {impl}: {value:,.0f} entries/s [>= {target:,}; >= {pso_target}x]  ({ratios})")
    for label, target in (("128B", 250_000), ("1KiB", 110_000)):
        value = rate(figures, f"service-{label}/dledger-tls-batch")
        plain = rate(figures, f"service-{label}/dledger-async-batch-beside-tls")
        if value is not None:
            ratio = f" = {value / plain:.2f}x plaintext ({plain:,.0f}/s, rounds alternating)" if plain else ""
            lines.append(f"  {label} dledger-tls-batch: {value:,.0f} entries/s{ratio} [>= {target:,}; >= 0.8x]")
    latency = figures.get("latency-50k")
    if isinstance(latency, BenchResult):
        lines.append(
            f"  p50 commit latency at {latency_rate:,} x 1 KiB/s offered: {latency.latency_ms.get('p50', 0):.1f} ms "
            f"[<= 15 ms] (p99 {latency.latency_ms.get('p99', 0):.1f} ms, achieved {latency.entries_per_s:,.0f}/s)"
        )
    single64, echo = figures.get(f"{UNARY_64}/{DLEDGER_SINGLE}"), rate(figures, f"{UNARY_64}/{ECHO}")
    if isinstance(single64, LoadResult) and echo:
        lines.append(
            f"  64-thread single appends: {single64.entries_per_s:,.0f}/s = {single64.entries_per_s / echo:.0%} of "
            f"the raw unary echo ({echo:,.0f} calls/s) [>= 80%; issue 19: >= 200%]; "
            f"p50 {single64.latency_ms.get('p50', 0):.1f} ms"
        )
        unshared = rate(figures, f"{UNARY_64}/{DLEDGER_SINGLE_RPC}")
        if unshared:
            lines.append(
                f"    the same with one RPC per call (multiplex=False): {unshared:,.0f}/s = {unshared / echo:.0%} "
                f"of the echo; multiplexing gives {single64.entries_per_s / unshared:.1f}x"
            )
    for mode, name in (("async", "async flush"), ("sync", "sync flush"), ("tls", "mutual TLS, async flush")):
        p50 = figures.get(f"idle-{mode}-p50-ms")
        if p50 is not None:
            lines.append(f"  idle single append p50 ({name}): {p50:.2f} ms" + (" [<= 3 ms]" * (mode != "sync")))
    return lines + etcd_lines(figures)


def _ratio(value: float | None, base: float | None, target: str) -> str:
    """`0.52x etcd [>= 1.0x]`-style text, or '' when either side is missing."""
    return f"{value / base:.2f}x {target}" if value and base else ""


def _latency(result: object) -> str:
    """` (p50 1.2 / p99 3.4 ms)` for a load result, else ''."""
    if not isinstance(result, LoadResult) or "p50" not in result.latency_ms:
        return ""
    return f" (p50 {result.latency_ms['p50']:.1f} / p99 {result.latency_ms.get('p99', 0):.1f} ms)"


def etcd_lines(figures: Mapping[str, Any]) -> list[str]:
    """The issue-19 comparison with etcd (and the echo) of the same run; one line saying why
    it was skipped (`figures["etcd-skipped"]`) when etcd did not run."""
    if figures.get("etcd-version") is None:
        return [f"etcd comparison (issue 19): skipped: {figures.get('etcd-skipped', 'etcd did not run')}"]
    lines = [f"etcd comparison (issue 19 targets in brackets; etcd {figures['etcd-version']}, 3 members on loopback):"]
    for group, shape, echo_target, etcd_target in (
        (UNARY_64, "64 threads in 1 process", ">= 2x", "no target"),
        (UNARY_16X4, "16 processes x 4 threads", ">= 0.6x", ">= 1.0x"),
    ):
        ours, etcd, echo = (rate(figures, f"{group}/{impl}") for impl in (DLEDGER_SINGLE, ETCD_PUT, ECHO))
        if ours is None and etcd is None:
            continue
        cells = [
            f"{name} {value:,.0f}/s{_latency(figures.get(f'{group}/{impl}'))}"
            for name, impl, value in (
                ("dledger", DLEDGER_SINGLE, ours),
                ("etcd put", ETCD_PUT, etcd),
                ("echo", ECHO, echo),
            )
            if value
        ]
        ratios = [
            r for r in (_ratio(ours, echo, f"echo [{echo_target}]"), _ratio(ours, etcd, f"etcd [{etcd_target}]")) if r
        ]
        lines.append(f"  {shape}, single 128 B: {', '.join(cells)}" + f"; dledger = {', '.join(ratios)}" * bool(ratios))
    etcd_p50 = figures.get("idle-etcd-p50-ms")
    if etcd_p50:
        texts = [
            f"{name} {p50:.2f} ms = {p50 / etcd_p50:.2f}x etcd [<= {target}x]"
            for name, target in (("async", "0.5"), ("sync", "1.0"))
            if (p50 := figures.get(f"idle-{name}-p50-ms")) is not None
        ]
        lines.append(f"  idle p50, one writer: etcd put {etcd_p50:.2f} ms; dledger {', '.join(texts)}")
    for label in ("128B", "1KiB"):
        etcd = rate(figures, f"service-{label}/{ETCD_TXN}")
        if etcd is None:
            continue
        texts = [
            f"{impl} {value:,.0f}/s = {value / etcd:.1f}x etcd" + " [>= 20x]" * (impl == "dledger-async-batch")
            for impl in ("dledger-async-batch", "dledger-sync-batch")
            if (value := rate(figures, f"service-{label}/{impl}")) is not None
        ]
        tail = f"; {'; '.join(texts)}" if texts else ""
        lines.append(f"  {label} batched: etcd Txn of 128 puts {etcd:,.0f} entries/s{tail}")
    return lines
