"""The package version: a leaf module, importable by any layer without the package face."""

__version__ = "0.1.0"
