"""The seeds x variants study: its units (units.py), their analysis (analysis.py) and its page (page.py)."""
