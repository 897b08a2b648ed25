"""Findings grouped by (clause, profiler call site, note): the count, the first and last occurrence, the
runtimes, and what the catalog says of the clause (title, documentation sentence, fix). Memory is bounded by
the number of groups: each keeps :data:`~.result.OCCURRENCES_KEPT` occurrences however many it counts."""

from __future__ import annotations

from clr_model.clauses import CATALOG
from conformance.core.findings import Finding
from conformance.validator.result import OCCURRENCES_KEPT, Group, Occurrence

__all__ = ["Grouper"]


class Grouper:
    """Groups findings as they come (see the module's docstring)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, bool], Group] = {}
        #: each group's latest finding, made its ``last`` occurrence when the groups are read
        self._last: dict[tuple[str, str, bool], Finding] = {}

    def add(self, finding: Finding) -> None:
        key = Group.key_of(finding.clause, finding.site, finding.note)
        group = self._groups.get(key)
        if group is None:
            occurrence = Occurrence.of(finding)
            clause = CATALOG.get(finding.clause)
            self._groups[key] = Group(
                clause=finding.clause,
                title=finding.title,
                note=finding.note,
                quote=clause.quote if clause else "",
                document=clause.document.value if clause else "",
                reason=(clause.reason or "") if clause else "",
                fix=(clause.fix or "") if clause else "",
                site=finding.site,
                count=1,
                runtimes=[finding.runtime],
                first=occurrence,
                last=occurrence,
                occurrences=[occurrence],
            )
            return
        group.count += 1
        if finding.runtime not in group.runtimes:
            group.runtimes.append(finding.runtime)
        if len(group.occurrences) < OCCURRENCES_KEPT:
            group.last = Occurrence.of(finding)
            group.occurrences.append(group.last)
        else:  # the common case past the kept ones: only counted, its occurrence made when read
            self._last[key] = finding

    def extend(self, findings: list[Finding]) -> None:
        for f in findings:
            self.add(f)

    def _settle(self) -> None:
        for key, finding in self._last.items():
            self._groups[key].last = Occurrence.of(finding)
        self._last.clear()

    def merge(self, other: Grouper) -> None:
        """Take ``other``'s groups (one run's) after this one's: counts add up, ``last`` is other's."""
        self._settle()
        other._settle()
        for key, theirs in other._groups.items():
            group = self._groups.get(key)
            if group is None:
                self._groups[key] = theirs
                continue
            group.count += theirs.count
            group.last = theirs.last
            group.runtimes += [rt for rt in theirs.runtimes if rt not in group.runtimes]
            group.runs += [r for r in theirs.runs if r not in group.runs]
            room = OCCURRENCES_KEPT - len(group.occurrences)
            group.occurrences += theirs.occurrences[: max(room, 0)]

    def in_run(self, index: int, seed: int | None = None) -> None:
        """Every group so far appeared in run ``index`` (of the validation's runs), perturbed by ``seed``
        (its occurrences name it): one run's grouper, named before it is merged."""
        self._settle()
        for group in self._groups.values():
            if index not in group.runs:
                group.runs.append(index)
            if seed is not None:
                group.occurrences = [o.model_copy(update={"seed": seed}) for o in group.occurrences]
                group.first = group.first.model_copy(update={"seed": seed})
                group.last = group.last.model_copy(update={"seed": seed})

    def groups(self) -> list[Group]:
        """Findings first, then notes; by clause, then the largest count first."""
        self._settle()
        return sorted(self._groups.values(), key=lambda g: (g.note, g.clause, -g.count, g.key))
