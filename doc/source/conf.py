"""Sphinx configuration of kuryr-supervisor's documentation.

The configuration reference (``.. show-options::``) and the sample file
are generated from the option definitions in ``kuryr_supervisor/conf/``
(the ``oslo.config.opts`` entry point), so they cannot drift from the code.
"""
import os

project = "kuryr-supervisor"
copyright = "kuryr-supervisor developers"  # noqa: A001 - Sphinx's name
author = "kuryr-supervisor developers"

extensions = [
    "oslo_config.sphinxext",
    "oslo_config.sphinxconfiggen",
    # The diagrams: Graphviz sources in doc/source/diagrams/*.dot, drawn by
    # `dot` (Debian's graphviz, in tools/test-packages.txt) at build time.
    "sphinx.ext.graphviz",
]
graphviz_output_format = "svg"

# oslo_config.sphinxconfiggen: the sample file, written at build time from
# the same generator configuration as `tox -e genconfig`.
_here = os.path.dirname(os.path.abspath(__file__))
config_generator_config_file = os.path.join(
    _here, "..", "..", "etc", "oslo-config-generator",
    "kuryr-supervisor.conf")
sample_config_basename = "_static/kuryr-supervisor"

root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "kuryr-supervisor"
# Every cross-reference must resolve (warnings are errors in CI).
nitpicky = False
