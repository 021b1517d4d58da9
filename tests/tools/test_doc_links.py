# coding=utf-8
"""Every relative link in the README and docs/ reaches a file, and every #anchor a heading
of it (GitHub's heading slugs), so that moving a section cannot leave a dead link."""

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
