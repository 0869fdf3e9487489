"""The committed generated code in dledger/proto matches dledger.proto (run `make genproto`
after changing the .proto)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("dledger/proto/dledger.proto")
GENERATED = ("dledger_pb2.py", "dledger_pb2.pyi", "dledger_pb2_grpc.py")
PINNED_TOOLS = "1.85.1"  # grpcio-tools in pyproject.toml's dev extra


def test_grpcio_tools_is_the_pinned_version() -> None:
    assert metadata.version("grpcio-tools") == PINNED_TOOLS, "regenerate with the pinned grpcio-tools"


def test_generated_code_is_current(tmp_path: Path) -> None:
    (tmp_path / PROTO.parent).mkdir(parents=True)
    shutil.copy(ROOT / PROTO, tmp_path / PROTO)
    command = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I",
        ".",
        "--python_out=.",
        "--pyi_out=.",
        "--grpc_python_out=.",
        str(PROTO),
    ]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    for name in GENERATED:
        fresh = (tmp_path / PROTO.parent / name).read_text()
        committed = (ROOT / PROTO.parent / name).read_text()
        assert committed == fresh, f"{PROTO.parent / name} is stale: run `make genproto`"


def test_services_are_registered() -> None:
    from dledger.transport.convert import pb

    services = pb.DESCRIPTOR.services_by_name
    assert services["Ledger"].full_name == "dledger.v1.Ledger"
    assert set(services["Peer"].methods_by_name) == {
        "Vote",
        "HeartBeat",
        "Push",
        "LeadershipTransfer",
        "InstallSnapshot",
        "ReadIndex",
    }
    assert "Query" in services["Ledger"].methods_by_name
