"""Reports in the canonical form and the sections the parser must read from them."""

from __future__ import annotations

from biocheck.agent.report.schema import EvidenceItem, Report, Summary
from biocheck.labels import Label

CANONICAL = """## Supporting evidence
- PMID: 31234567
  Quote: "Vitamin D supplementation reduced hip fractures by 20% (95% CI 0.70-0.91)."
  Context: A large RCT in adults over 65, the claim's population.
- PMID: 29876543
  Quote: "Fracture risk fell in the "high-dose" group."
  Context: Dose-response.
## Refuting evidence
- PMID: 30111222
  Quote: "No effect on fractures was observed."
  Context: Null result in community-dwelling adults.
## Summary
Support reasons: Two trials show fewer fractures.
Refutation reasons: One trial found no effect.
Consensus and context check: Mostly agree; doses differ.
Justification: The larger trials support the claim.
## Conclusion
SUPPORTED
"""


SUPPORTING = [
    EvidenceItem(
        pmid="31234567",
        quote="Vitamin D supplementation reduced hip fractures by 20% (95% CI 0.70-0.91).",
        context="A large RCT in adults over 65, the claim's population.",
    ),
    EvidenceItem(pmid="29876543", quote='Fracture risk fell in the "high-dose" group.', context="Dose-response."),
]


REFUTING = [
    EvidenceItem(
        pmid="30111222",
        quote="No effect on fractures was observed.",
        context="Null result in community-dwelling adults.",
    )
]


SUMMARY = Summary(
    support_reasons="Two trials show fewer fractures.",
    refutation_reasons="One trial found no effect.",
    consensus_context_check="Mostly agree; doses differ.",
    justification="The larger trials support the claim.",
)


EXPECTED = Report(supporting=SUPPORTING, refuting=REFUTING, summary=SUMMARY, conclusion=Label.SUPPORTED)
