"""Fixtures of the e2e tier: clusters of real server processes, always killed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import E2ECluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember each phase's report on the item (fixtures print logs on failure)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _teardown(cluster: E2ECluster, failed: bool) -> None:
    report = cluster.logs_tail(80) if failed else ""  # before the kills: shows how members ended
    for member_id in cluster.members:
        cluster.kill(member_id)
    if failed:
        print(f"\n===== server logs ({cluster.workdir}) =====\n{report}")


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., E2ECluster]]:
    """Factory of launched clusters for one test; every process is SIGKILLed afterwards."""
    clusters: list[E2ECluster] = []

    def make(nodes: int = 3, extra_args: list[str] | None = None) -> E2ECluster:
        cluster = E2ECluster(tmp_path / f"cluster{len(clusters)}", nodes, extra_args)
        clusters.append(cluster)
        return cluster.launch()

    yield make
    failed = bool(getattr(request.node, "rep_call", None) and request.node.rep_call.failed)
    for cluster in clusters:
        _teardown(cluster, failed)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[E2ECluster]:
    """One launched 3-member cluster for a whole module (tests must leave it serving)."""
    cluster = E2ECluster(tmp_path_factory.mktemp("shared"), 3).launch()
    cluster.leader()
    yield cluster
    _teardown(cluster, request.session.testsfailed > 0)
