"""Sphinx configuration of sarlite's documentation site (``make docs``).

Sphinx, as DGL, PyG and PyTorch use, so that the API pages read like theirs: the guide is
Markdown (MyST), the API reference is generated from the docstrings (autodoc, NumPy style
via napoleon). The theme is Sphinx's own (alabaster): no further dependency. ``make docs``
builds with warnings as errors (``-W``) and with every cross-reference checked (``-n``);
MyST checks every link between pages and to headings.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)                  # sarlite and benchmarks from this checkout
os.environ.setdefault("DGLBACKEND", "pytorch")

project = "sarlite"
author = "the sarlite developers"
copyright = "2026, the sarlite developers"
release = version = "0.1.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon",
              "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]

myst_heading_anchors = 4                  # [text](page.md#a-heading) is checked
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False

html_theme = "alabaster"
html_title = "sarlite"
html_theme_options = {"description": "Exact full-graph GNN training across torchrun workers",
                      "fixed_sidebar": True, "page_width": "1340px",
                      "sidebar_width": "240px", "body_max_width": "none"}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
html_static_path = []

# Cross-references are checked (-n). Not resolvable here, by design: other projects' names
# (no network at build time, so no intersphinx), sarlite's internal modules (the reference
# covers the public names), and bare words (prose that napoleon reads as a type).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|dgl|os|datetime|typing|collections|pathlib|logging)\..*"),
    (r"py:.*", r"sarlite\.(comm|core|partition|kv|sampling|runtime|data|train)(\..*)?"),
    (r"py:.*", r"sarlite\.(distributed|sar)\.\w+\..*"),
    (r"py:.*", r"sar\..*"),
    (r"py:.*", r"[^.]+"),
]
