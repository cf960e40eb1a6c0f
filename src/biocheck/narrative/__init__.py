"""Fact-checking a passage rather than one claim: the passage's check-worthy claims, each with the span of
text it came from (`extract`), how extracted claims are matched to gold ones (`match`), and the benchmark of
passages composed from held-out claims (`bench`). docs/narratives.md says what is built and what is not yet."""
