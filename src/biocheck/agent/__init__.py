"""The BioCheck agent: a LangGraph search-and-report loop over one tool, `search_pubmed`."""
