"""Sphinx configuration of kuryr-supervisor's release notes (reno)."""
project = "kuryr-supervisor release notes"
copyright = "kuryr-supervisor developers"  # noqa: A001 - Sphinx's name
author = "kuryr-supervisor developers"
extensions = ["reno.sphinxext"]
root_doc = "index"
html_theme = "alabaster"
