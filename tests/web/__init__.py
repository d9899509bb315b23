"""The dashboard tests: a package, so their conftest and helpers have names of their own."""
