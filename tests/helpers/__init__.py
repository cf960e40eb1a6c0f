"""Code the tests share: fakes that speak real protocols, builders of small inputs, and fixtures used in several folders (registered in tests/conftest.py)."""
