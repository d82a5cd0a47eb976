"""Sphinx configuration of the sparsegpu documentation (``sphinx-build -W -b html docs out``)."""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))

import sparsegpu  # noqa: E402

project = "sparsegpu"
author = "sparsegpu developers"
copyright = "sparsegpu developers"
release = sparsegpu.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sparsegpu_results",
]

html_theme = "pydata_sphinx_theme"
html_title = f"sparsegpu {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
exclude_patterns = ["_build", "benchmarks/asv_results", "benchmarks/results"]

autosummary_generate = True
autodoc_typehints = "none"
# The matrix classes override scipy methods; scipy's own docstrings are not ours to render.
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False
numpydoc_validation_checks = set()

intersphinx_mapping = {}
