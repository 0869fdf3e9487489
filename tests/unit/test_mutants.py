"""The mutation check's table (`tests/mutants.py`) still applies to the current tree:
every mutant's original text occurs exactly once in its file, so a refactor cannot
silently drop a mutant (`make mutants` would then test nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutants import MUTANTS, ROOT, Mutant, find_once

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_mutant_applies_exactly_once(mutant: Mutant) -> None:
    texts = find_once(mutant)
    assert set(texts) == {file for file, _o, _r in mutant.edits()}
    for file, mutated in texts.items():
        assert mutated != (ROOT / file).read_text(encoding="utf-8")
        compile(mutated, file, "exec")  # the mutated module still parses
    assert mutant.why


def test_ids_are_unique() -> None:
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids))


def test_a_mutant_whose_text_is_gone_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    gone = Mutant("gone", "m.py", "y = 2", "y = 3", "test")
    twice = Mutant("twice", "m.py", "x = 1", "x = 2", "test")
    with pytest.raises(ValueError, match="occurs 0 times"):
        find_once(gone, tmp_path)
    with pytest.raises(ValueError, match="occurs 2 times"):
        find_once(twice, tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        find_once(Mutant("nofile", "nope.py", "x", "y", "test"), tmp_path)
    also_gone = Mutant("also", "m.py", "x = 1\nx", "x = 2\nx", "test", also=(("m.py", "z = 0", "z = 1"),))
    with pytest.raises(ValueError, match="occurs 0 times"):
        find_once(also_gone, tmp_path)
    both = Mutant("both", "m.py", "x = 1\nx", "y = 1\nx", "test", also=(("m.py", "x = 1\n", "x = 3\n"),))
    assert find_once(both, tmp_path) == {"m.py": "y = 1\nx = 3\n"}
