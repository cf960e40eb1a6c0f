"""Label names: the one place they are defined.

Every module (data, agent, rewards, evaluation) imports the label set from here, so a label
is spelt the same way in a prepared record, a parsed report and a metrics table.
"""

from __future__ import annotations

from enum import Enum


class Label(str, Enum):
    SUPPORTED = "SUPPORTED"
    REFUTED = "REFUTED"
    NEI = "NEI"

    @property
    def display(self) -> str:
        """The wording a report uses (the paper's 'NOT ENOUGH INFORMATION')."""
        return DISPLAY[self]


DISPLAY: dict[Label, str] = {
    Label.SUPPORTED: "SUPPORTED",
    Label.REFUTED: "REFUTED",
    Label.NEI: "NOT ENOUGH INFORMATION",
}

LABELS: tuple[str, ...] = tuple(label.value for label in Label)
