"""Offline HTML pages, figures and viewers."""
