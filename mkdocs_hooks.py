"""MkDocs hooks (``hooks:`` in mkdocs.yml): pages built from other sources of truth.

- ``index.md`` is README.md and ``deploy.md`` is deploy/README.md, their links rewritten from the
  repository's layout to the site's (``docs/x.md`` → ``x.md``, ``deploy/README.md`` → ``deploy.md``),
  and so are the pages' links to the README (``../README.md`` → ``index.md``); any other relative
  link is left as it is, so the strict build fails on it.
- ``cli.md``: the marker line ``<!-- cli-reference -->`` is replaced by the reference rendered from
  the argparse definitions (:func:`streamguard.cli.reference.markdown`); a page without the marker
  fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent
MARKER = "<!-- cli-reference -->"

#: The pages' links to the README (from docs/ and deploy/), rewritten to the site's home page.
TO_README = (r"\]\(\.\./README\.md", "](index.md")
#: Site page ← repository file, and the link rewrites that file needs.
INCLUDED = {
    "index.md": ("README.md", [(r"\]\(docs/", "]("), (r"\]\(deploy/README\.md", "](deploy.md")]),
    "deploy.md": ("deploy/README.md", [(r"\]\(\.\./docs/", "](")]),
}


def on_files(files, config):
    for page, (source, rewrites) in INCLUDED.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        for pattern, replacement in rewrites:
            text = re.sub(pattern, replacement, text)
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown, page, config, files):
    markdown = re.sub(*TO_README, markdown)
    if page.file.src_uri != "cli.md":
        return markdown
    if markdown.count(MARKER) != 1:
        raise PluginError(f"docs/cli.md must hold the line {MARKER} exactly once")
    from streamguard.cli import build_parser
    from streamguard.cli.reference import markdown as reference

    return markdown.replace(MARKER, reference(build_parser()))
