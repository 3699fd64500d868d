"""``Handoff``: what validation built is built once and taken by the job, and not kept afterwards."""

from __future__ import annotations

from attnlab.cli.prepared import Handoff


def test_a_key_is_built_once_and_another_key_replaces_it() -> None:
    built: list[str] = []
    handoff: Handoff[str] = Handoff()

    def build(name: str) -> str:
        built.append(name)
        return name.upper()

    assert handoff.get("a", lambda: build("a")) == "A"
    assert handoff.get("a", lambda: build("a")) == "A"
    assert handoff.get("b", lambda: build("b")) == "B"
    assert handoff.get("a", lambda: build("a")) == "A"  # "b" replaced it: built again
    assert built == ["a", "b", "a"]


def test_taking_leaves_nothing_kept() -> None:
    handoff: Handoff[list[int]] = Handoff()
    kept = handoff.get(1, lambda: [1])
    assert handoff.take(1, lambda: [2]) is kept  # the job takes what validation built
    assert handoff.kept is None
    assert handoff.take(1, lambda: [3]) == [3]  # a job without validation builds its own
