"""InstallSnapshot throughput on loopback, beside a plain gRPC stream of the same bytes.

Two real members (in-process `DLedgerServer`s, file stores in a temporary directory):
the follower's `Peer.InstallSnapshot` takes a snapshot of `--mib` MiB streamed in 1 MiB
chunks (chunk CRC, every field validated, written to `install_tmp/`, whole-file check,
published, loaded by a state machine that reads it), timed from the first chunk to the
answer, sent two ways:

- by the leader's own sender (`NodeSnapshots`: the leader's newest snapshot file read,
  chunked, CRCs computed, the per-follower quota applied; `peerPushQuota` is raised to
  1 TiB/s here, its default of 20 MiB/s would cap the rate), from a second pair of
  members whose leader saves a snapshot of that size before each round (not timed);
- from prepared chunks in memory (the follower's side alone).

The baseline streams the same chunks to a stream-unary method that only counts them, on
its own server in the same process and run. Rounds alternate; the medians are printed.
`--mib` defaults to `DLEDGER_BENCH_INSTALL_MIB` (256; the issue's figure is 1024).

    PYTHONPATH=. .venv/bin/python bench/install_snapshot.py --mib 256 --rounds 3
    DLEDGER_BENCH_INSTALL_MIB=1024 PYTHONPATH=. .venv/bin/python bench/install_snapshot.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import grpc

from bench._snapshots import (
    NO_SNAPSHOT,
    SizedMachine,
    env_int,
    leader_of,
    snapshot_now,
    start_members,
    wait_saved,
)
from dledger.entry import Entry
from dledger.node import DLedgerNode
from dledger.raft.messages import InstallSnapshotRequest
from dledger.server import DLedgerServer
from dledger.transport.convert import pb, pb_grpc, to_pb
from dledger.transport.grpc_client import MAX_MESSAGE_BYTES, open_channel

CHUNK = 1 << 20


class ReadingMachine:
    """Reads a loaded snapshot to its end (and keeps nothing)."""

    def on_apply(self, entries: Sequence[Entry]) -> None:
        pass

    def on_snapshot_capture(self) -> None:
        pass

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        writer.write(b"{}")

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        while reader.read(CHUNK):
            pass


def install_round(leader: DLedgerNode, address: str, data: bytes, index: int) -> float:
    header = InstallSnapshotRequest(
        **leader.core.member_state.request_header("n1"),
        term=leader.term,
        last_included_index=index,
        last_included_term=leader.term,
        total_size=len(data),
        total_crc32=zlib.crc32(data),
        next_pos=-1,
    )
    view = memoryview(data)

    def chunks() -> Iterator[Any]:
        for offset in range(0, len(data), CHUNK):
            piece = bytes(view[offset : offset + CHUNK])
            header.offset, header.data, header.chunk_crc32 = offset, piece, zlib.crc32(piece)
            yield to_pb(header)

    channel = open_channel(address)
    try:
        start = time.perf_counter()
        answer = pb_grpc.PeerStub(channel).InstallSnapshot(chunks(), timeout=600)
        elapsed = time.perf_counter() - start
    finally:
        channel.close()
    assert answer.code == 200, answer
    return elapsed


def baseline_round(address: str, data: bytes) -> float:
    view = memoryview(data)

    def chunks() -> Iterator[bytes]:
        for offset in range(0, len(data), CHUNK):
            piece = bytes(view[offset : offset + CHUNK])
            yield pb.InstallSnapshotRequest(offset=offset, data=piece).SerializeToString()

    channel = open_channel(address)
    try:
        call = channel.stream_unary("/bench.Sink/Take", request_serializer=None, response_deserializer=None)
        start = time.perf_counter()
        call(chunks(), timeout=600)
        elapsed = time.perf_counter() - start
    finally:
        channel.close()
    return elapsed


def sink_server() -> tuple[grpc.Server, str]:
    def take(requests: Iterator[bytes], context: Any) -> bytes:
        total = 0
        for raw in requests:
            total += len(pb.InstallSnapshotRequest.FromString(raw).data)
        return total.to_bytes(8, "big")

    handler = grpc.method_handlers_generic_handler(
        "bench.Sink", {"Take": grpc.stream_unary_rpc_method_handler(take, None, None)}
    )
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    server = grpc.server(ThreadPoolExecutor(4), options=options)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def sender_members(base: Path, size: int) -> list[DLedgerServer]:
    """Two members whose machines save (and load) snapshots of `size` bytes, taken only
    by `snapshot_now`, with an unthrottled per-follower quota."""
    servers, _ = start_members(
        base,
        2,
        lambda: SizedMachine(size),
        enable_snapshot=True,
        snapshot_threshold=NO_SNAPSHOT,
        peer_push_quota=1 << 40,
    )
    return servers


def sender_round(leader: DLedgerNode) -> float:
    """Save a new snapshot on the leader (not timed), then stream it to n1 through the
    leader's own sender; seconds from the first chunk to the follower's answer."""
    snapshot_now(leader)
    wait_saved(leader)
    snapshots = leader.snapshots
    assert snapshots is not None
    request = InstallSnapshotRequest(**leader.core.member_state.request_header("n1"), term=leader.term)
    start = time.perf_counter()
    answer = snapshots._stream("n1", request)
    elapsed = time.perf_counter() - start
    assert answer is not None and answer.code == 200, answer
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=env_int("DLEDGER_BENCH_INSTALL_MIB", 256))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = bytes(range(256)) * (args.mib * CHUNK // 256)
    with tempfile.TemporaryDirectory() as base:
        servers, addresses = start_members(Path(base) / "prepared", 2, ReadingMachine)
        pair = sender_members(Path(base) / "sender", len(data))
        sink, sink_address = sink_server()
        try:
            leader = leader_of(servers)
            sender = leader_of(pair)
            installs, sent, plain = [], [], []
            for k in range(args.rounds):
                plain.append(baseline_round(sink_address, data))
                sent.append(sender_round(sender))
                installs.append(install_round(leader, addresses["n1"], data, index=1000 * (k + 1)))
            mb = len(data) / 1e6
            a, b, c = statistics.median(installs), statistics.median(plain), statistics.median(sent)
            print(f"{args.mib} MiB, {args.rounds} rounds alternating, medians:")
            print(f"  InstallSnapshot by the leader's sender (file read, chunked, sent):  {mb / c:8.1f} MB/s")
            print(f"  InstallSnapshot of prepared chunks (the follower's side):          {mb / a:8.1f} MB/s")
            print(f"  plain gRPC stream of the same chunks (parsed only):                 {mb / b:8.1f} MB/s")
            print(f"  leader's sender / plain stream: {b / c:.2f}; prepared / plain stream: {b / a:.2f}")
        finally:
            sink.stop(0)
            for server in [*servers, *pair]:
                server.shutdown(grace_s=0.5)


if __name__ == "__main__":
    main()
