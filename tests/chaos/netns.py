"""Network namespaces for the partition schedules: one namespace per member, joined by a
bridge in the run's own (unshared) network namespace, where the client and the driver
live; partitions drop packets between member namespaces.

Everything here runs inside a private sandbox made by `sandbox_command` (`unshare --net
--mount --pid --fork --kill-child`): a fresh network namespace, a private mount of
/run/netns and a PID namespace whose end kills every member, so no namespace, address
or process outlives the run, and member traffic never leaves the sandbox.

Packets are dropped with nftables (`nft`, a `drop` rule per peer address in each
member's namespace, both directions) when `nft` is installed, else with blackhole
routes (`ip route add blackhole`, iproute2 only); DLEDGER_CHAOS_DROP=nft|route chooses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

SUBNET = "10.77.0"
"""The bridge's /24 inside the sandbox; the driver is .1, member n<k> is .1<k>."""
REPO_ROOT = Path(__file__).resolve().parents[2]
SANDBOX_ENV = "DLEDGER_CHAOS_SANDBOX"
"""Set inside the sandbox (the runner then sets namespaces up instead of re-executing)."""
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy", "all_proxy", "ALL_PROXY")


def sandbox_unavailable() -> str | None:
    """Why partition schedules cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "partition schedules need root (network namespaces); skipped"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"partition schedules need `{tool}` (util-linux / iproute2); skipped"
    probe = subprocess.run(
        [
            "unshare",
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "ip",
            "link",
            "add",
            "probe0",
            "type",
            "bridge",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"partition schedules need `unshare --net` and bridges: {probe.stderr.strip()}; skipped"
    return None


def sandbox_command(argv: list[str]) -> list[str]:
    """`argv` run in a fresh network, mount and PID namespace (killed with its parent)."""
    return ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", *argv]


def sandbox_env() -> dict[str, str]:
    """The environment of the sandboxed runner: marked, and without HTTP proxies (gRPC
    would send the members' traffic to one)."""
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env[SANDBOX_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return env


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


class Network:
    """The member namespaces of one sandboxed run (call `setup` once, inside the sandbox).

    Args:
        members: member ids n0, n1, ...
    """

    def __init__(self, members: Iterable[str]) -> None:
        if os.environ.get(SANDBOX_ENV) != "1":
            raise RuntimeError("Network must be built inside the sandbox (sandbox_command)")
        self.members = list(members)
        self.method = os.environ.get("DLEDGER_CHAOS_DROP") or ("nft" if shutil.which("nft") else "route")
        if self.method not in ("nft", "route"):
            raise ValueError(f"DLEDGER_CHAOS_DROP must be nft or route, not {self.method!r}")
        self._blocked: set[tuple[str, str]] = set()

    @staticmethod
    def namespace(member: str) -> str:
        """The network namespace of a member."""
        return f"chaos-{member}"

    @staticmethod
    def address(member: str) -> str:
        """A member's address on the bridge."""
        return f"{SUBNET}.1{int(member[1:])}"

    def setup(self) -> None:
        """Mount a private /run/netns, create the bridge and one namespace per member."""
        os.makedirs("/run/netns", exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "chaos-netns", "/run/netns"], check=True, timeout=30)
        _ip("link", "set", "lo", "up")
        _ip("link", "add", "chaosbr", "type", "bridge")
        _ip("addr", "add", f"{SUBNET}.1/24", "dev", "chaosbr")
        _ip("link", "set", "chaosbr", "up")
        for k, member in enumerate(self.members):
            ns = self.namespace(member)
            _ip("netns", "add", ns)
            _ip("link", "add", f"vh{k}", "type", "veth", "peer", "name", f"vm{k}")
            _ip("link", "set", f"vm{k}", "netns", ns)
            _ip("link", "set", f"vh{k}", "master", "chaosbr")
            _ip("link", "set", f"vh{k}", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(member)}/24", "dev", f"vm{k}")
            _ip("-n", ns, "link", "set", f"vm{k}", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.method == "nft":
                script = "add table inet chaos\n"
                script += "add chain inet chaos input { type filter hook input priority 0; }\n"
                script += "add chain inet chaos output { type filter hook output priority 0; }\n"
                self._nft(member, script)

    def exec_prefix(self, member: str) -> list[str]:
        """The command prefix that runs a program in a member's namespace."""
        return ["ip", "netns", "exec", self.namespace(member)]

    def _nft(self, member: str, script: str) -> None:
        subprocess.run(
            [*self.exec_prefix(member), "nft", "-f", "-"], input=script, check=True, capture_output=True, text=True
        )

    def _drop(self, member: str, peer: str, add: bool) -> None:
        """Start or stop dropping `member`'s traffic to and from `peer` (in its namespace)."""
        other = self.address(peer)
        if self.method == "nft":
            if add:
                script = f"add rule inet chaos input ip saddr {other} drop\n"
                script += f"add rule inet chaos output ip daddr {other} drop\n"
                self._nft(member, script)
        else:
            _ip("-n", self.namespace(member), "route", "add" if add else "del", "blackhole", f"{other}/32")

    def partition(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Drop packets between each pair of members (both directions)."""
        for a, b in pairs:
            for x, y in ((a, b), (b, a)):
                if (x, y) not in self._blocked:
                    self._drop(x, y, True)
                    self._blocked.add((x, y))

    def heal(self) -> None:
        """Stop every drop."""
        for x, y in sorted(self._blocked):
            if self.method == "route":
                self._drop(x, y, False)
        if self.method == "nft":
            for member in self.members:
                self._nft(member, "flush chain inet chaos input\nflush chain inet chaos output\n")
        self._blocked.clear()
