"""Members whose data segments differ in size cannot share a log: a follower writes each
entry at the leader's position, and the blank at a segment's end moves every position
after it. Every push now carries the leader's segment size; a follower of another size
answers SEGMENT_SIZE_MISMATCH, changes nothing, says so once and neither follows nor
votes for that leader for a while; the leader says so once and asks again only every
DIVERGED_RETRY_MS.

Before, nothing was said until the leader's first segment roll; from then on the two
looped (APPEND refused at the position, COMPARE matched, APPEND again): with real
processes, 1 MiB members beside a 2 MiB leader burned ~0.4 of a core each and no write
committed again."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from dledger.codes import ResponseCode
from dledger.raft.dispatcher import DIVERGED_RETRY_MS, DispatchState
from dledger.raft.log import LogStore
from dledger.raft.messages import PushEntryRequest, PushEntryResponse, PushType
from dledger.store.mmap_store import MmapLogStore
from tests.raft.cluster import MMAP_TEST_CONFIG, Cluster, MmapStores, count_sends
from tests.raft.test_diverged import OLD, append, leader_dispatcher
from tests.raft.test_safety import follower, process, push

pytestmark = pytest.mark.interaction

MIB = 1 << 20


def sized(req: PushEntryRequest, size: int) -> PushEntryRequest:
    req.data_file_size = size
    return req


@pytest.mark.parametrize(
    "request_of",
    [
        lambda: append(4, 2, [5]),
        lambda: push(PushType.COMPARE, 4, 2, commit=4),
        lambda: push(PushType.TRUNCATE, 4, 2, commit=4, first=5),
        lambda: push(PushType.COMMIT, 4, 2, commit=4),
    ],
)
def test_a_follower_of_another_segment_size_refuses_every_push(request_of: object) -> None:
    ms, handler = follower(OLD, committed=2)
    handler.segment_size = MIB
    assert process(handler, sized(request_of(), 2 * MIB)) == ResponseCode.SEGMENT_SIZE_MISMATCH  # type: ignore[operator]
    assert [ms.store.term_at(i) for i in range(5)] == OLD and ms.store.end_index == 4  # nothing changed
    assert ms.committed_index == 2  # not even the commit index moved
    assert ms.is_diverged("n0", 0)  # neither followed nor voted for, for a while


@pytest.mark.parametrize(("mine", "leaders"), [(MIB, MIB), (MIB, 0), (0, MIB)])
def test_the_same_size_or_an_unknown_one_is_served_as_before(mine: int, leaders: int) -> None:
    """0: a store without segments (in memory), or a leader of an older version."""
    ms, handler = follower(OLD, committed=2)
    handler.segment_size = mine
    assert process(handler, sized(append(4, 2, [5]), leaders)) == ResponseCode.SUCCESS
    assert ms.store.end_index == 5 and not ms.is_diverged("n0", 0)


def test_the_follower_says_so_once_per_leader_term(caplog: pytest.LogCaptureFixture) -> None:
    _, handler = follower(OLD, committed=4)
    handler.segment_size = MIB
    with caplog.at_level(logging.ERROR, logger="dledger.raft.entry_handler"):
        codes = [process(handler, sized(push(PushType.COMPARE, 4, 2, commit=-1), 2 * MIB)) for _ in range(5)]
    assert codes == [ResponseCode.SEGMENT_SIZE_MISMATCH] + 4 * [ResponseCode.LOG_DIVERGED]  # marked: refused at once
    [record] = caplog.records
    assert "n1: leader n0 (term 5) writes data segments of 2097152 bytes, this member's are 1048576" in record.message
    assert "--segment-size" in record.message  # the way out


def test_the_leader_sends_its_size_says_so_once_and_pauses(caplog: pytest.LogCaptureFixture) -> None:
    dispatcher = leader_dispatcher()
    dispatcher.segment_size = 2 * MIB
    now, sent = 1000, []
    with caplog.at_level(logging.ERROR, logger="dledger.raft.match_search"):
        while now < 1000 + 3 * DIVERGED_RETRY_MS:
            for req in dispatcher.tick(now):
                assert isinstance(req, PushEntryRequest) and req.data_file_size == 2 * MIB
                sent.append(now)
                answer = PushEntryResponse(
                    group="g", remote_id="n0", local_id="n1", leader_id="n0", term=3,
                    code=ResponseCode.SEGMENT_SIZE_MISMATCH, index=req.prev_index, end_index=4,
                )  # fmt: skip
                dispatcher.on_response(req, answer, now)
            now += 10
    assert sent == [1000 + k * DIVERGED_RETRY_MS for k in range(3)]  # one push per pause, not a loop
    assert dispatcher.state is DispatchState.COMPARE
    [record] = caplog.records
    assert "n0: follower n1 refuses this leader: its data segments are not of this leader's size (2097152" in (
        record.message
    )


class SizedStores(MmapStores):
    """File stores, n2's with data segments half the others' size."""

    def open(self, node_id: str) -> LogStore:
        config = MMAP_TEST_CONFIG
        if node_id == "n2":
            config = replace(config, data_file_size=config.data_file_size // 2)
        store = MmapLogStore(self._dir(node_id), config)
        self.opened.append(store)
        return store


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_group_with_one_member_of_another_size_goes_on_without_it(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Whoever is elected first (n2 too, then abandoned), n0 and n1 commit every write
    past several segment ends; n2 is asked once per pause, and each side says so once per
    leader."""
    cluster = Cluster(3, seed=seed, stores=SizedStores(tmp_path))
    try:
        sent = count_sends(cluster)
        with caplog.at_level(logging.ERROR):
            bodies = [b"%05d" % k + b"x" * 100_000 for k in range(30)]  # 3 MB: rolls 1 MiB segments
            for k, body in enumerate(bodies):
                cluster.run_until(lambda: cluster.leader() in ("n0", "n1"), max_ms=120_000)
                cluster.append(body)
                cluster.run_for(1000)
                if k == 9:
                    before = sent["n2 PushEntryRequest"]
            cluster.run_until(lambda: cluster.bodies("n0")[-1:] == cluster.bodies("n1")[-1:] == bodies[-1:])
        assert cluster.bodies("n0") == cluster.bodies("n1") == bodies  # every write, once, in order
        assert cluster.bodies("n2") == []
        pushes = sent["n2 PushEntryRequest"] - before
        assert 0 < pushes <= 2 * (20_000 // DIVERGED_RETRY_MS + 1), sent  # without the check: ~2,100
        said = Counter(r.name for r in caplog.records if r.levelno == logging.ERROR)
        assert set(said) == {"dledger.raft.entry_handler", "dledger.raft.match_search"}, said
        assert max(said.values()) <= 3, said  # once per leader (and term), not per push
    finally:
        cluster.close()
