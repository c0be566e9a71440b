"""The package version (a leaf: the run identity and the results files read it)."""

__version__ = "0.1.0"
