"""Evidence layer: PubMed E-utilities client, evidence store and local search engine."""
