"""The fact-checking report: canonical schema (the parser and renderers live beside it)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from biocheck.labels import Label


class EvidenceItem(BaseModel):
    pmid: str
    quote: str  # verbatim from the paper's title/abstract
    context: str = ""  # why this passage supports / refutes the claim


class Summary(BaseModel):
    support_reasons: str = ""
    refutation_reasons: str = ""
    consensus_context_check: str = ""
    justification: str = ""


class Report(BaseModel):
    supporting: list[EvidenceItem] = Field(default_factory=list)
    refuting: list[EvidenceItem] = Field(default_factory=list)
    summary: Summary = Field(default_factory=Summary)
    conclusion: Label | None = None  # None: no conclusion could be read from the model's text


class ParsedReport(BaseModel):
    """The parser's result: the report plus what it could not parse (never an exception)."""

    report: Report
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.conclusion is not None and not self.problems
