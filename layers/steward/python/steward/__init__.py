"""Steward: approved Markdown plans in, reviewed pull requests out."""

__version__ = "0.1.0"
