"""The one error type a bad request produces: every problem at once, each with where and how to fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a request: the field path, what is wrong, and what to do about it."""

    path: str
    message: str
    fix: str

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message}" + (f" — fix: {self.fix}" if self.fix else "")


class RequestInvalid(ValueError):
    """Raised for any unusable request; ``problems`` lists all of them, never just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.problems)
        lines = [f"request rejected: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)

    def as_records(self) -> list[dict[str, str]]:
        return [asdict(p) for p in self.problems]
