# coding=utf-8
"""Every relative link in the README and docs/ reaches a file, and every #anchor a heading
of it (GitHub's heading slugs), so that moving a section cannot leave a dead link. The same
for the docs that the code and the scripts' comments name (`docs/X.md`, with a quoted
section, a section number or an #anchor)."""

import os
import re

import pytest

from cli import REPO_DIR

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"```.*?```", re.S)


def markdown_files():
  paths = ["README.md", os.path.join("benchmarks", "README.md")]
  for root, _, files in os.walk(os.path.join(REPO_DIR, "docs")):
    paths.extend(os.path.relpath(os.path.join(root, name), REPO_DIR)
                 for name in sorted(files) if name.endswith(".md"))
  return paths


def heading_slugs(text):
  """The anchors GitHub gives a document's headings (a repeated one gets -1, -2, ...)."""
  slugs, seen = set(), {}
  for line in FENCE.sub("", text).split("\n"):
    match = HEADING.match(line)
    if not match:
      continue
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))  # a link's text only
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    slugs.add(slug if count == 0 else "%s-%d" % (slug, count))
  return slugs


def read(path):
  with open(os.path.join(REPO_DIR, path), encoding="utf-8") as f:
    return f.read()


def dead_links(path):
  text = read(path)
  dead = []
  for target in LINK.findall(FENCE.sub("", text)):
    if re.match(r"^[a-z]+:", target):  # http:, mailto:
      continue
    file_part, _, anchor = target.partition("#")
    destination = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                   if file_part else path)
    if not os.path.exists(os.path.join(REPO_DIR, destination)):
      dead.append("%s (no such file)" % target)
    elif anchor and (not destination.endswith(".md") or
                     anchor not in heading_slugs(read(destination))):
      dead.append("%s (no such heading)" % target)
  return dead


@pytest.mark.parametrize("path", markdown_files())
def test_links_reach_their_file_and_heading(path):
  assert not dead_links(path), "%s: %s" % (path, ", ".join(dead_links(path)))


def test_the_check_sees_a_dead_link(tmp_path, monkeypatch):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "A.md").write_text(
      u"# Title\n## Two words\n[ok](#two-words) [bad](#three) [gone](B.md) [web](https://x)\n",
      encoding="utf-8")
  monkeypatch.setattr(__import__(__name__), "REPO_DIR", str(tmp_path))
  assert dead_links(os.path.join("docs", "A.md")) == ["#three (no such heading)",
                                                       "B.md (no such file)"]


# A doc named in code or a comment: the path, then an #anchor, a quoted section ("Links") or a
# section number (docs/FORMATS.md 6).
DOC_MENTION = re.compile(
    r"((?:docs/[\w/.\-]+|benchmarks/README|README)\.md)(?:#([\w\-]+))?"
    r"(?:[:,]?\s*\(?\"([^\"]+)\"| (\d+)\b)?")


def source_files():
  """The repo's Python and shell sources (not tests, which quote docs as data)."""
  paths = []
  for folder in ("", "scripts", "benchmarks", "bert_mgpu"):
    for root, dirs, files in os.walk(os.path.join(REPO_DIR, folder)):
      if not folder:
        dirs[:] = []  # the top level alone
      paths.extend(os.path.relpath(os.path.join(root, name), REPO_DIR)
                   for name in sorted(files) if name.endswith((".py", ".sh")))
  return paths


def heading_titles(text):
  return [HEADING.match(line).group(2) for line in FENCE.sub("", text).split("\n")
          if HEADING.match(line)]


def dead_mentions(path):
  dead = []
  for doc, anchor, section, number in DOC_MENTION.findall(read(path)):
    if not os.path.exists(os.path.join(REPO_DIR, doc)):
      dead.append("%s (no such file)" % doc)
      continue
    text = read(doc)
    if anchor and anchor not in heading_slugs(text):
      dead.append("%s#%s (no such heading)" % (doc, anchor))
    # A section name may run over comment lines: "Several\n# machines".
    section = " ".join(re.sub(r"\n\s*#?", " ", section).split())
    if section and not any(section.lower() in title.lower() for title in heading_titles(text)):
      dead.append('%s "%s" (no such section)' % (doc, section))
    if number and not any(title.startswith(number + ".") for title in heading_titles(text)):
      dead.append("%s %s (no such numbered section)" % (doc, number))
  return dead


@pytest.mark.parametrize("path", source_files())
def test_docs_named_in_code_and_comments_exist(path):
  assert not dead_mentions(path), "%s: %s" % (path, ", ".join(dead_mentions(path)))


def test_the_check_sees_a_dead_mention(tmp_path, monkeypatch):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "A.md").write_text(u"# Title\n## 6. Records\n## Several machines\n",
                                          encoding="utf-8")
  (tmp_path / "run.sh").write_text(
      u'# docs/A.md 6, docs/A.md: "Several\n# machines", docs/A.md 7, docs/A.md, "Gone",\n'
      u"# docs/A.md#title, docs/A.md#gone, docs/B.md, README.md\n", encoding="utf-8")
  monkeypatch.setattr(__import__(__name__), "REPO_DIR", str(tmp_path))
  assert dead_mentions("run.sh") == [
      "docs/A.md 7 (no such numbered section)", 'docs/A.md "Gone" (no such section)',
      "docs/A.md#gone (no such heading)", "docs/B.md (no such file)",
      "README.md (no such file)"]
