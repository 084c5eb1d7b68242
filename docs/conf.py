"""Sphinx settings of treetrm's docs site; `python docs/build.py` builds it (it executes the notebooks first)."""
import configparser, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_cfg = configparser.ConfigParser()
_cfg.read(ROOT/'settings.ini')
project, author, release = 'treetrm', _cfg['DEFAULT']['author'], _cfg['DEFAULT']['version']
copyright = _cfg['DEFAULT']['copyright']

extensions = ['myst_nb', 'sphinx.ext.autodoc', 'sphinx.ext.autosummary']
templates_path = [str(ROOT/'docs'/'_templates')]
exclude_patterns = ['_build', '**.ipynb_checkpoints', '_templates']
root_doc = 'index'

# notebooks arrive executed (docs/build.py runs them as nbdev_test does): never execute them again here
nb_execution_mode = 'off'
nb_output_stderr = 'show'
nb_render_markdown_format = 'myst'  # a `Markdown(...)` output (the benchmark pages' tables) read as MyST: tables too
myst_enable_extensions = ['colon_fence', 'dollarmath', 'deflist']
myst_heading_anchors = 3
suppress_warnings = ['mystnb.unknown_mime_type', 'myst.header']  # widget views (progress bars) have no static form

autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {'members': True, 'show-inheritance': False}
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'

html_theme = 'furo'
html_title = f'treetrm {release}'
html_static_path = []

# treetrm's docstrings are written as markdown (`code` in single backticks), Sphinx reads reStructuredText: make each
# `code` span a literal and escape the characters that reST would take for markup in the text between them
import re as _re
_CODE = _re.compile(r'(``[^`]+``|`[^`]+`)')
_MARKUP = _re.compile(r'([*|]|(?<=\w)_(?=\W|$)|`)')

def _markdown_line(line:str) -> str:
    "One docstring line with markdown code spans as reST literals and the rest escaped."
    out = []
    for i, p in enumerate(_CODE.split(line)):
        if i % 2 == 0: out.append(_MARKUP.sub(r'\\\1', p))
        else:  # a literal must touch no word character on either side in reST: an escaped space joins them
            before = '\\ ' if out and _re.search(r'[\w\\]$', out[-1]) else ''
            out.append(f'{before}``{p.strip("`").strip()}``')  # reST: a literal neither starts nor ends with a space
        if i % 2 == 0 and i and _re.match(r'\w', p): out[-1] = '\\ ' + out[-1]
    return ''.join(out)

def _rst_docstring(app, what, name, obj, options, lines):
    "autodoc hook: the docstring's markdown as reST, in place; a constant gets no docstring of its type (`str`'s)."
    if what in ('data', 'attribute') and getattr(obj, '__doc__', None) is getattr(type(obj), '__doc__', 0):
        lines[:] = []
    lines[:] = [_markdown_line(l) for l in lines]

def setup(app):
    "Sphinx hook: treetrm's markdown docstrings read as reST."
    app.connect('autodoc-process-docstring', _rst_docstring)
