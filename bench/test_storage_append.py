"""Append throughput: dledger's single `append` and `append_many` against the baselines,
128 B / 1 KiB / 4 KiB bodies, one record per commit and 1,000 records per commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench._backends import APPEND_BACKENDS, Backend, Target, run_rounds
from bench._common import SIZES, Workload, record


@pytest.mark.parametrize("impl", list(APPEND_BACKENDS))
@pytest.mark.parametrize("mode", ["single", "batch"])
@pytest.mark.parametrize("workload", SIZES, ids=lambda w: w.label)
def test_append(benchmark: Any, workdir: Path, workload: Workload, mode: str, impl: str) -> None:
    """Each round appends `workload.count` entries."""
    group = f"append-{workload.label}-{mode}"
    benchmark.group = group

    def make_target(backend: Backend) -> Target:
        return backend.single_writer(workload) if mode == "single" else backend.batch_writer(workload)

    run_rounds(benchmark, APPEND_BACKENDS[impl](), workdir, make_target)
    record(benchmark, group, impl, workload.count)
