"""The registries of verify policies and speculation controllers: one entry per extension.

Every place that lists policies or controllers reads these tables: configuration checks
(:mod:`simulator.config`), the CLI choices (``simulate``, ``uniformity``, ``tune-spec``),
``analysis.uniformity`` and the documentation test, which checks that ``docs/simulator.md``
lists every entry.  The compiled core (:mod:`simulator.core`) reads the integer codes, so a new
policy is its entry here plus its function in the core's policy dispatch; a new controller is
its entry here plus its branch in ``simulator.controllers.choose_width``.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.errors import SpecschedError

__all__ = ["Entry", "Registry", "VERIFY_POLICIES", "CONTROLLERS"]


@dataclass(frozen=True)
class Entry:
    """One registered extension: its name, the core's integer code and what it does."""

    name: str
    code: int
    description: str
    #: why SGLang cannot run it ("" when SGLang (or vLLM, for controllers) ships it)
    what_if: str = ""


class Registry:
    """An ordered table of :class:`Entry` keyed by name, with unique names and codes."""

    def __init__(self, what: str, key: str, entries: list[Entry]):
        self.what = what
        self.key = key
        self._entries = tuple(entries)
        names = [e.name for e in entries]
        codes = [e.code for e in entries]
        if len(set(names)) != len(names) or len(set(codes)) != len(codes):
            raise ValueError(f"{what} registry: duplicate name or code")
        self._by_name = {e.name: e for e in entries}

    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self._entries)

    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    def codes(self) -> dict[str, int]:
        return {e.name: e.code for e in self._entries}

    def code(self, name: str) -> int:
        return self.get(name).code

    def get(self, name: str) -> Entry:
        """The entry called ``name``; an unknown name raises a SpecschedError naming the key."""
        try:
            return self._by_name[name]
        except KeyError:
            raise SpecschedError(f"{self.key}: unknown {self.what} '{name}' (choose from "
                                 f"{', '.join(self.names())})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def markdown(self) -> str:
        """A table for the docs: name, description, what-if."""
        rows = ["| name | what it does | SGLang / vLLM ship it? |", "|---|---|---|"]
        for e in self._entries:
            rows.append(f"| `{e.name}` | {e.description} | "
                        f"{'no: ' + e.what_if if e.what_if else 'yes'} |")
        return "\n".join(rows)


VERIFY_POLICIES = Registry("policy", "engine.policy", [
    Entry("pad", 0, "one launch at the widest proposal; shorter requests padded",
          "SGLang verifies every request at num_draft_tokens"),
    Entry("split", 1, "one launch per distinct proposed width",
          "SGLang verifies every request at num_draft_tokens"),
    Entry("bucket", 2, "widths rounded up to engine.buckets, one launch per bucket",
          "SGLang verifies every request at num_draft_tokens"),
    Entry("truncate", 3, "one launch at the narrowest proposal; longer drafts cut",
          "SGLang verifies every request at num_draft_tokens"),
    Entry("fixed", 4, "one launch, every request at num_draft_tokens (or the controller's "
                      "count): SGLang's EAGLE top-k 1"),
    Entry("ragged", 5, "one launch, each request at its own width (exact ragged metadata)",
          "SGLang verifies every request at num_draft_tokens"),
    Entry("unsafe-derived", 6, "one launch, own widths, metadata derived as tokens // bs "
                               "(misattributes rows when widths mix)",
          "SGLang verifies every request at num_draft_tokens"),
])

CONTROLLERS = Registry("controller", "engine.controller", [
    Entry("static", 0, "every round drafts num_draft_tokens - 1 tokens (SGLang's default)"),
    Entry("schedule", 1, "batch-size ranges to a draft count (vLLM "
                         "num_speculative_tokens_per_batch_size)"),
    Entry("threshold", 2, "no speculation above a batch size (SGLang's n-gram fallback, "
                          "vLLM's speculative_disable_by_batch_size)"),
    Entry("sglang-adaptive", 3, "EMA of accepted drafts picks the step count among candidates, "
                                "with hysteresis, per batch-size range (SGLang "
                                "--speculative-adaptive)"),
    Entry("goodput", 4, "per round, the draft count maximising estimated goodput from the "
                        "profile's costs and the acceptance seen so far (SmartSpec)",
          "a research controller (SmartSpec), shipped by neither engine"),
    Entry("oracle", 5, "per round, the draft count that commits the most tokens per second "
                       "with hindsight of the round's acceptance: an upper bound",
          "reads the acceptance of the round it decides: no real scheduler can"),
])
