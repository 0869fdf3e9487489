"""Mutation check of the simulation: remove each Raft safety rule in turn and make sure
the random simulation (`tests/sim/test_sim.py`, CI seed budget) catches it.

Run it with `make mutants` (or `python -m tests.mutants [--only ID ...]`). For every
mutant the tree (`dledger/`, `tests/`, `pyproject.toml`, with the built extension) is
copied to a temporary directory, the mutant's one textual edit is applied to the copy
(never to the working tree), and `pytest tests/sim/test_sim.py -x` runs there with
`DLEDGER_SIM_STOP_FIRST=1` (each scenario stops at its first failing seed). A mutant is
*caught* when that run fails; the check fails unless every mutant is caught. A table
(mutant, caught?, first failing scenario/seed, seconds) is printed at the end.

Adding a mutant is one entry in `MUTANTS`: a unique id, the file (relative to the
repository root), the exact original text (it must occur exactly once in that file;
`tests/unit/test_mutants.py` checks this, and the runner refuses a mutant whose text is
gone, so a refactor cannot silently drop one), the replacement, and why the rule it
removes is a safety rule. Keep the original text short but unique (one line or two).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    """One removed safety rule.

    Attributes:
        id: short unique name (shown in the table, selectable with --only).
        file: the file to edit, relative to the repository root.
        original: text that occurs exactly once in `file`.
        replacement: what replaces it in the mutated copy.
        why: what the rule protects (why removing it must be caught).
        also: further (file, original, replacement) edits of the same mutant, for a
            rule the code checks in more than one place (each original exactly once too).
        unreachable: why the simulation cannot catch this mutant (empty: it must). Such
            a mutant is listed but only run with --all, and then it must NOT be caught
            (if it is, the note is stale: make it a normal mutant).
    """

    id: str
    file: str
    original: str
    replacement: str
    why: str
    also: tuple[tuple[str, str, str], ...] = ()
    unreachable: str = ""

    def edits(self) -> list[tuple[str, str, str]]:
        """Every (file, original, replacement) edit of this mutant."""
        return [(self.file, self.original, self.replacement), *self.also]


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "figure8-commit",
        "dledger/raft/quorum_ack.py",
        "if quorum_index > member.committed_index and member.store.term_at(quorum_index) == term:",
        "if quorum_index > member.committed_index:",
        "Raft §5.4.2 (Figure 8): an entry of an older term held by a majority can still be "
        "replaced by a leader whose log ends in a newer term; only current-term entries commit by counting",
    ),
    Mutant(
        "append-prev-check",
        "dledger/raft/entry_handler.py",
        "        if not self._matches(req.prev_index, req.prev_term):\n"
        "            return self._mismatch(req, req.prev_index, req.prev_term)\n"
        "        if self._appended_in_term[0]",
        "        if self._appended_in_term[0]",
        "log matching: an APPEND may only extend a log that holds the leader's previous entry, "
        "else two leaders' logs are mixed and equal (index, term) no longer means equal prefixes",
        unreachable="within one leader term a follower's log never changes behind its leader's back in "
        "the simulated fault model: a new leader always COMPAREs first (and TRUNCATEs durably), a term "
        "change rejects older leaders' pushes, a process crash keeps the log and a power loss only "
        "shortens it (the APPEND then lands past the end: INCONSISTENT_STATE by the first test). "
        "Instrumented, 24 biased seeds (sync-3, async-5, async-single-3) reached the prev check with "
        "first_index == end + 1 and a mismatching previous entry 0 times. It guards against a disk that "
        "reverts (a restored copy) or a dispatcher bug; tests/raft/test_safety.py checks it directly",
    ),
    Mutant(
        "vote-expired-ledger-term",
        "dledger/raft/elector.py",
        "if req.ledger_end_term < end_term:\n            return reply(VoteResult.REJECT_EXPIRED_LEDGER_TERM)",
        "if req.ledger_end_term < end_term:\n            pass  # mutant: granted",
        "election restriction (§5.4.1): a voter whose last entry has a newer term than the "
        "candidate's may hold a committed entry the candidate lacks (removed from the vote and "
        "from the pre-vote, which checks it again in prevote.py and would mask it)",
        also=(("dledger/raft/prevote.py", "return VoteResult.REJECT_EXPIRED_LEDGER_TERM", "pass  # mutant"),),
    ),
    Mutant(
        "vote-small-ledger-end",
        "dledger/raft/elector.py",
        "return reply(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)",
        "pass  # mutant: granted",
        "election restriction (§5.4.1): with equal last terms the longer log may hold committed "
        "entries the shorter candidate lacks (vote and pre-vote, as above)",
        also=(("dledger/raft/prevote.py", "return VoteResult.REJECT_SMALL_LEDGER_END_INDEX", "pass  # mutant"),),
    ),
    Mutant(
        "vote-term-small-than-ledger",
        "dledger/raft/elector.py",
        "return reply(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, term=member.ledger_end_term)",
        "pass  # mutant: granted",
        "a candidate whose term is below the voter's last entry term is stale (DLedger's check)",
        also=(
            (
                "dledger/raft/prevote.py",
                "return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER",
                "pass  # mutant",
            ),
        ),
        unreachable="it only fires after REJECT_EXPIRED_LEDGER_TERM let the request pass, i.e. when "
        "req.term < voter's last term <= req.ledger_end_term: a candidate whose term is below its own "
        "last entry's term. No correct member sends that (a member enters a term before it appends an "
        "entry of it, and the term is persisted first); it guards against forged or buggy requests "
        "(tests/security), not against any fault the simulation makes",
    ),
    Mutant(
        "vote-hold",
        "dledger/raft/vote_hold.py",
        "return cls(active=unclean and group and max_ms > 0, max_ms=max_ms)",
        "return cls(active=False, max_ms=max_ms)",
        "R1: an async member that lost acknowledged entries to a power loss must not vote until "
        "it caught up, or it elects a leader without them",
    ),
    Mutant(
        "floor-every-member",
        "dledger/raft/elector.py",
        "if len(rnd.ends) == len(member.peer_map):",
        "if member.is_quorum(len(rnd.ends)):",
        "an unclean hold gives way to a floor only with every member's log end: the member that lost "
        "an entry and one that never had it are a quorum, and the one that holds it may be silent",
    ),
    Mutant(
        "floor-vote",
        "dledger/raft/elector.py",
        "end_term, end_index = max(self.own_log_end(), self.vote_hold.floor or (-1, -1))",
        "end_term, end_index = self.own_log_end()",
        "a member whose hold gave way to a floor votes only for logs reaching it (else R1 again)",
        unreachable="since the founding hold (2026-11-27) the random simulation no longer reaches it: not "
        "in the CI seeds, nor in seeds 31-130 of every scenario (caught before: async-single-3 seed 20); "
        "tests/raft/test_hold_release.py::test_every_member_s_log_end_replaces_the_hold_by_a_floor "
        "fails with it",
    ),
    Mutant(
        "floor-stand",
        "dledger/raft/elector.py",
        "if (hold.active or not hold.admits(self.own_log_end())) and not self.need_increase_term_immediately:",
        "if hold.active and not self.need_increase_term_immediately:",
        "a member below its floor must not stand: the clean members would vote for it by their own "
        "logs, and it may lack what it lost",
        unreachable="redundant with floor-vote: a member below its floor refuses its own vote too "
        "(handle_vote compares its own request with the floor), so it cannot win; the check only "
        "saves the rounds it would lose. Run with --all: 240 seeds pass (135 s)",
    ),
    Mutant(
        "rejoin-hold",
        "dledger/raft/vote_hold.py",
        "if rejoin_index is not None and group:",
        "if False:",
        "L1: a member that lost its disk (no term, no vote, no log) must not vote until a leader "
        "brought it up to date, or it elects a stale member",
    ),
    Mutant(
        "founding-hold",
        "dledger/node_store.py",
        "if empty and len(config.peer_map) > 1:",
        "if False:",
        "a member that lost its whole directory and is started with `new` must ask the others "
        "before it votes (the founding hold), or it founds again and elects a stale member",
    ),
    Mutant(
        "group-id-check",
        "dledger/raft/member_state.py",
        "return not group_id or not self.group_id or group_id == self.group_id",
        "return True",
        "requests of another group id are refused",
        unreachable="every simulated member belongs to the one group; a foreign group's requests are "
        "refused in tests/raft/test_hold_release.py and tests/unit/test_validate.py",
    ),
    Mutant(
        "read-index-no-quorum",
        "dledger/raft/read_index.py",
        "if member.is_quorum(rnd.acks):  # a group of one",
        "if True:  # mutant: no round",
        "ReadIndex: a read index is confirmed only by a heartbeat round a quorum answered in the "
        "leader's term; without it a deposed leader answers stale reads (tests/sim/reads.py)",
    ),
    Mutant(
        "read-index-own-term",
        "dledger/raft/read_index.py",
        "return self._leading() and self.member_state.committed_index >= self.ready_index",
        "return self._leading()",
        "ReadIndex: a new leader's commit index may lag the group's until it committed the log it "
        "was elected with (etcd: an entry of its own term); a read index before that can be stale",
    ),
    Mutant(
        "producer-tail-ignored",
        "dledger/raft/producer_log.py",
        "            while _fold_range(self.store, tail, self.store.end_index, FOLD_BATCH_ENTRIES):",
        "            while False:  # mutant: the leader's table ignores its uncommitted tail",
        "idempotent producers: a new leader's table must include the stamped requests its log holds "
        "uncommitted (its predecessor appended them); without them a resent request is appended twice "
        "(tests/sim/producers.py)",
    ),
)


def find_once(mutant: Mutant, root: Path = ROOT) -> dict[str, str]:
    """The mutated text of every file `mutant` edits under `root` (path -> text); raises
    ValueError unless each original text occurs exactly once in its file."""
    texts: dict[str, str] = {}
    for file, original, replacement in mutant.edits():
        path = root / file
        if not path.is_file():
            raise ValueError(f"mutant {mutant.id}: {file} does not exist")
        text = texts.get(file, path.read_text(encoding="utf-8"))
        count = text.count(original)
        if count != 1:
            raise ValueError(
                f"mutant {mutant.id}: its original text occurs {count} times in {file} (must be exactly once); "
                "update the mutant in tests/mutants.py to the current code"
            )
        texts[file] = text.replace(original, replacement, 1)
    return texts


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for name in ("dledger", "tests"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)  # the built extension (*.so) comes along
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")


@dataclass
class Outcome:
    mutant: Mutant
    caught: bool
    first: str
    seconds: float
    error: str = ""


FAILED_SEED = re.compile(r"^(\S+) seed (\d+) failed at (\d+) ms: (\w+): (.*)$", re.M)


def run_mutant(mutant: Mutant, extra_args: list[str]) -> Outcome:
    """Apply `mutant` to a temporary copy of the tree and run the random simulation."""
    texts = find_once(mutant)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"dledger-mutant-{mutant.id}-") as tmp:
        copy = Path(tmp)
        _copy_tree(copy)
        for file, text in texts.items():
            (copy / file).write_text(text, encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(copy), "DLEDGER_SIM_STOP_FIRST": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        for var in ("DLEDGER_SIM_SEED", "DLEDGER_SIM_SEEDS", "DLEDGER_SIM_STEPS", "DLEDGER_SIM_FIRST_SEED"):
            env.pop(var, None)  # the CI seed budget, whatever the caller's shell says
        where = subprocess.run(
            [sys.executable, "-c", "import dledger; print(dledger.__file__)"],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if not where.startswith(str(copy)):  # an installed dledger would shadow the mutated copy
            return Outcome(mutant, False, "", time.monotonic() - start, error=f"dledger imported from {where!r}")
        cmd = [sys.executable, "-m", "pytest", "tests/sim/test_sim.py", "-x", "-q", "-p", "no:cacheprovider"]
        proc = subprocess.run(cmd + extra_args, cwd=copy, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return Outcome(mutant, False, "", seconds)
    match = FAILED_SEED.search(out)
    if proc.returncode != 1 or match is None:
        tail = "\n".join(out.splitlines()[-30:])
        return Outcome(
            mutant, False, "", seconds, error=f"pytest exit {proc.returncode} without a failing seed:\n{tail}"
        )
    name, seed, ms, _kind, what = match.groups()
    return Outcome(mutant, True, f"{name} seed {seed} at {ms} ms: {what[:110]}", seconds)


def _table(outcomes: list[Outcome], skipped: list[Mutant]) -> str:
    lines = ["| mutant | caught | first failing scenario / seed | seconds |", "|---|---|---|---|"]
    for o in outcomes:
        caught = "yes" if o.caught else ("ERROR" if o.error else "**no**")
        if o.mutant.unreachable and not o.error:
            caught += " (unreachable: must not be)"
        first = o.first.replace("|", "/") or "-"
        lines.append(f"| {o.mutant.id} | {caught} | {first} | {o.seconds:.0f} |")
    lines += [f"| {m.id} | not run (unreachable, see tests/mutants.py) | - | - |" for m in skipped]
    return "\n".join(lines)


def _wrong(outcome: Outcome) -> bool:
    """Whether `outcome` fails the check: a reachable mutant not caught, an unreachable
    one caught (its note is stale), or a run that broke."""
    return bool(outcome.error) or outcome.caught == bool(outcome.mutant.unreachable)


def main(argv: list[str] | None = None) -> int:
    """Run the mutants; exit 0 only when every one was caught."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", nargs="*", default=[], help="run only these mutant ids")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--all", action="store_true", help="run the unreachable mutants too")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    ids = [m.id for m in MUTANTS]
    if len(set(ids)) != len(ids):
        print("duplicate mutant ids", file=sys.stderr)
        return 2
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:28} {m.file}: {m.why}" + (f" [unreachable: {m.unreachable}]" if m.unreachable else ""))
        return 0
    unknown = set(args.only) - set(ids)
    if unknown:
        print(f"unknown mutant ids: {sorted(unknown)}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if not args.only or m.id in args.only]
    skipped = [m for m in chosen if m.unreachable and not args.all and m.id not in args.only]
    chosen = [m for m in chosen if m not in skipped]
    for m in chosen:
        find_once(m)  # every mutant still applies before anything runs
    outcomes = []
    for m in chosen:
        print(f"mutant {m.id}: {m.file} ...", flush=True)
        outcome = run_mutant(m, args.pytest_args)
        print(
            f"  {'caught' if outcome.caught else 'NOT caught'} in {outcome.seconds:.0f} s {outcome.first}", flush=True
        )
        if outcome.error:
            print(outcome.error, flush=True)
        outcomes.append(outcome)
    print()
    print(_table(outcomes, skipped))
    wrong = [o.mutant.id for o in outcomes if _wrong(o)]
    if wrong:
        print(f"\nFAILED: {', '.join(wrong)} (a reachable mutant not caught, an unreachable one caught, or an error)")
        return 1
    print(f"\nall {sum(not o.mutant.unreachable for o in outcomes)} reachable mutants caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
