"""DLedgerConfig / parse_peers, ManualClock and the in-memory network."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from dledger.clock import ManualClock, MonotonicClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import ConfigError, DLedgerConfig, parse_peers
from dledger.raft.messages import HeartBeatRequest, HeartBeatResponse, RequestOrResponse
from dledger.transport.base import Transport
from dledger.transport.inmem import InMemoryNetwork

pytestmark = pytest.mark.unit


def test_defaults_are_dledgers() -> None:
    c = DLedgerConfig()
    assert (c.group, c.self_id, c.peer_map) == ("default", "n0", {"n0": "localhost:20911"})
    assert (c.heart_beat_time_interval_ms, c.max_heart_beat_leak) == (2000, 3)
    assert (c.min_vote_interval_ms, c.max_vote_interval_ms) == (300, 1000)
    assert (c.max_pending_requests_num, c.max_push_timeout_ms) == (10000, 1000)
    assert (c.peer_push_quota, c.peer_push_throttle_point) == (20 * 1024 * 1024, 300 * 1024 * 1024)
    assert (c.max_leadership_transfer_wait_index, c.leadership_transfer_wait_timeout_ms) == (1000, 1000)
    assert c.default_path == "/tmp/dledgerstore/dledger-n0"


def test_parse_peers() -> None:
    assert parse_peers("n0-127.0.0.1:20911;n1-my-host:20912;") == {"n0": "127.0.0.1:20911", "n1": "my-host:20912"}
    for bad in ("", ";", "n0", "-h:1", "n0-", "n0-h:1;n0-h:2"):
        with pytest.raises(ConfigError):
            parse_peers(bad)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="not in peers"):
        DLedgerConfig(self_id="n5", peers="n0-h:1;n1-h:2")
    with pytest.raises(ConfigError):
        DLedgerConfig(min_vote_interval_ms=500, max_vote_interval_ms=400)
    with pytest.raises(ConfigError):
        DLedgerConfig(preferred_leader_ids="n9")
    with pytest.raises(ConfigError, match="standby_push_ms"):
        DLedgerConfig(standby_push_ms=-1)
    with pytest.raises(ConfigError, match="push_gather_ms"):
        DLedgerConfig(push_gather_ms=-1)
    assert DLedgerConfig(
        self_id="n1", peers="n0-h:1;n1-h:2", preferred_leader_ids="n0;n1"
    ).preferred_leader_id_list == [
        "n0",
        "n1",
    ]


def test_clocks() -> None:
    clock = ManualClock(5)
    clock.sleep_ms(10)
    assert clock.advance(5) == 20 == clock.now_ms()
    with pytest.raises(ValueError):
        clock.advance(-1)
    real = MonotonicClock()
    assert real.now_ms() <= real.now_ms()


def echo(req: RequestOrResponse) -> Future[RequestOrResponse]:
    fut: Future[RequestOrResponse] = Future()
    fut.set_result(HeartBeatResponse(local_id=req.remote_id, remote_id=req.local_id, term=req.term))
    return fut


def make_net(**kw: int) -> tuple[ManualClock, InMemoryNetwork]:
    clock = ManualClock()
    net = InMemoryNetwork(clock, seed=7, **kw)
    for n in ("a", "b", "c"):
        net.register(n, echo)
    return clock, net


def run(clock: ManualClock, net: InMemoryNetwork, ms: int) -> None:
    for _ in range(ms):
        clock.advance(1)
        net.step()


def test_delivery_takes_the_configured_delay() -> None:
    clock, net = make_net(min_delay_ms=5, max_delay_ms=5)
    transport = net.transport("a")
    assert isinstance(transport, Transport)
    fut = transport.send("b", HeartBeatRequest(local_id="a", remote_id="b", term=3))
    run(clock, net, 9)
    assert not fut.done()
    run(clock, net, 1)
    assert fut.result().term == 3 and fut.result().local_id == "b"


def test_partition_isolate_heal_and_crash() -> None:
    clock, net = make_net(rpc_timeout_ms=50)
    net.partition(["a"], ["b", "c"])
    lost = net.send("a", "b", HeartBeatRequest())
    ok = net.send("b", "c", HeartBeatRequest())
    run(clock, net, 60)
    assert ok.result().ok
    exc = lost.exception()
    assert isinstance(exc, DLedgerError) and exc.code == ResponseCode.NETWORK_ERROR
    net.heal()
    net.isolate("c")
    assert not net.can_talk("b", "c") and net.can_talk("a", "b")
    net.heal()
    net.unregister("c")
    refused = net.send("a", "c", HeartBeatRequest())
    run(clock, net, 5)  # refused quickly, long before the timeout
    assert isinstance(refused.exception(), DLedgerError)


def test_drop_duplicate_reorder_are_seeded() -> None:
    def trace(seed: int) -> list[int]:
        clock = ManualClock()
        net = InMemoryNetwork(clock, seed=seed, min_delay_ms=1, max_delay_ms=30, rpc_timeout_ms=100)
        net.reorder, net.drop_rate, net.duplicate_rate = True, 0.2, 0.2
        arrivals: list[int] = []

        def handler(req: RequestOrResponse) -> Future[RequestOrResponse]:
            arrivals.append(req.term)
            return echo(req)

        net.register("b", handler)
        net.register("a", echo)
        for i in range(50):
            net.send("a", "b", HeartBeatRequest(term=i))
        run(clock, net, 200)
        return arrivals

    first = trace(1)
    assert first == trace(1) and first != trace(2)
    assert len(set(first)) < 50  # some dropped
    assert len(first) > len(set(first))  # some duplicated
    assert first != sorted(first)  # reordered


def test_filter_drops_chosen_messages() -> None:
    clock, net = make_net(rpc_timeout_ms=20)
    net.filter = lambda src, dst, msg: isinstance(msg, HeartBeatRequest) and msg.term % 3 == 2
    futures = [net.send("a", "b", HeartBeatRequest(term=i)) for i in range(6)]
    run(clock, net, 30)
    assert [f.exception() is None for f in futures] == [True, True, False, True, True, False]
