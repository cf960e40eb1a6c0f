"""The record schema every stage after `prepare` reads: one claim, one corpus document.

Both datasets are normalised into `ClaimRecord`; the SciFact corpus into `CorpusDoc`. Ids are
strings everywhere (SciFact uses integers, PubMed PMIDs are strings) so that a doc id compares
equal whether it came from a dataset, the corpus or a search result.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from biocheck.labels import Label

Dataset = Literal["scifact", "healthfc"]
Split = Literal["train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")
# The working splits `prepare` writes (one file each) and `validate` requires: SciFact train becomes
# train + val and SciFact dev becomes test; HealthFC has only a test split.
DATASET_SPLITS: dict[str, tuple[str, ...]] = {"scifact": ("train", "val", "test"), "healthfc": ("test",)}
DATASETS: tuple[str, ...] = tuple(DATASET_SPLITS)


class GoldEvidence(BaseModel):
    """A rationale: which sentences of which corpus document support or refute the claim."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    sentences: list[int]
    label: Label


class ClaimRecord(BaseModel):
    """One claim with its gold label, normalised across datasets."""

    id: str  # the dataset's own id (SciFact claim id; HealthFC row number), unique per dataset
    dataset: Dataset
    split: Split
    claim: str
    label: Label
    evidence: list[GoldEvidence] = Field(default_factory=list)  # SciFact only
    cited_doc_ids: list[str] = Field(default_factory=list)  # SciFact only
    meta: dict[str, str] = Field(default_factory=dict)  # dataset extras (HealthFC explanation, url)

    @property
    def key(self) -> str:
        """Globally unique id ("scifact:13")."""
        return f"{self.dataset}:{self.id}"


class CorpusDoc(BaseModel):
    """One abstract of the local corpus (SciFact: S2ORC id, title, abstract sentences)."""

    id: str
    title: str
    abstract: list[str]
    structured: bool = False

    @property
    def text(self) -> str:
        return " ".join(self.abstract)
