# coding=utf-8
"""Builds the corpus of issue #64's serving benchmark: 100,000 distinct Chinese news titles.

Output: one title a line (UTF-8, "\\n"), the first --count distinct non-empty titles in
first-seen order over the --source files taken in the order given. A title is stripped of
surrounding whitespace and of any tab, carriage return or newline inside; nothing else is
changed (no case folding, no width folding), so the output is deterministic for given inputs.

Sources (every file read from the stored-repository mirror with
`git -C <git dir> show <commit>:<path> > file`). The Toutiao set the issue names
(aceimnorstuvwxz/toutiao-text-classfication-dataset, also skdjfla/, fate233/ and BenDerPan/
of that name) holds its 382,688 titles only in toutiao_cat_data.txt.zip (blob
f7347310f74fc71ec1b709e97b342929e246b37a), which the mirror lacks (files of 4 MiB and more
are absent; Jing-z-z/text-classfication's toutiao_cat_data.txt is a Git LFS pointer). So the
corpus is built from these news-title files instead, used in this order:

  1. thucnews  zjuneverknow/cuhk_ai_project_3 @ e5c6411eb8ccaf9dffe3b1f53929fc3b56cfaea2
               THUCNews/data/train.txt, blob 31c2323ab3c63bbf2497ce7f83ed2f9bccb6a070
               (45,000 lines "title<TAB>label": the first 45,000 of THUCNews' 180,000-title
               train split as 649453932/Chinese-Text-Classification-Pytorch ships it; Sina
               news titles, 10 classes)
  2. thucnews  649453932/Chinese-Text-Classification-Pytorch @ 6cb26819af7b646275aff8a4693676f2849e67f6
               THUCNews/data/dev.txt, blob cf7f8de6fc3e3c72284ab59e7ed850f49b7185c0 (10,000)
  3. thucnews  same commit, THUCNews/data/test.txt, blob 9c216ace7d0cf2c89fec1b4c9d49a92dc1791d0a
               (10,000)
  4. clue      tigergeng/TextCNN @ 7e97026cee7cfa7c00a0aa9e225cd67af34f81a1
               tnews_public/dev.json, blob 2992cd72fc815eb75794bce9a1f81ff4e21ee03c (4,928
               JSON lines, "sentence" = a Toutiao news title; CLUE's TNEWS)
  5. clue      same commit, tnews_public/test.json, blob 628b8fd19c07b0b88571ca859f980def43c81981
               (8,000)
  6. clue      CLUEbenchmark/FewCLUE @ 62a02c6f31cf32814cfe522f78ef088228840f8d
               datasets/tnews/unlabeled.json, blob 8fff623c383bd41d7be70ec6abd398ace701e625
               (20,000 Toutiao titles)
  7. nlpcc     FudanNLP/nlpcc2017_news_headline_categorization @ 067b54681f218e974c739d5a4f5ed7da26aed277
               test.full/test.char, blob 2de941af0aa290b08d56ca5c594dfbdeb639c48d (36,000
               lines "label<TAB>c h a r s"; the spaces between characters are removed, which
               also removes any space the title had between Latin words)

  python benchmarks/make_news_titles.py --output /work/bench64/news_titles_100k.txt \\
      --source thucnews:SRC/thucnews_train45k.txt --source thucnews:SRC/thucnews_dev.txt \\
      --source thucnews:SRC/thucnews_test.txt --source clue:SRC/tnews_dev.json \\
      --source clue:SRC/tnews_test.json --source clue:SRC/fewclue_tnews_unlabeled.json \\
      --source nlpcc:SRC/nlpcc2017_test_full.char

Formats: toutiao (the issue's toutiao_cat_data.txt: fields separated by "_!_", the title is
the 4th), thucnews (title<TAB>label), clue (JSON lines with "sentence"), nlpcc (label<TAB>
space-separated characters), lines (one title a line). The log (stderr) gives per source the
lines read, the titles taken and the duplicates and empty lines skipped; it stops with an
error when the sources hold fewer than --count distinct titles. Standard library only.
"""

import argparse
import json
import sys


def _toutiao(line):
  fields = line.split("_!_")
  return fields[3] if len(fields) > 3 else ""


def _thucnews(line):
  return line.split("\t", 1)[0]


def _clue(line):
  line = line.strip()
  return json.loads(line).get("sentence", "") if line else ""


def _nlpcc(line):
  parts = line.split("\t", 1)
  return parts[1].replace(" ", "") if len(parts) == 2 else ""


def _lines(line):
  return line


FORMATS = {"toutiao": _toutiao, "thucnews": _thucnews, "clue": _clue, "nlpcc": _nlpcc,
           "lines": _lines}


def clean(title):
  """Surrounding whitespace off; tabs, CR and LF inside become nothing."""
  for ch in "\t\r\n":
    title = title.replace(ch, "")
  return title.strip()


def build(sources, count):
  """sources: [(format, path)]. Returns the first `count` distinct titles and per-source stats."""
  seen = set()
  titles = []
  stats = []
  for fmt, path in sources:
    read = taken = dup = empty = 0
    with open(path, encoding="utf-8") as f:
      for line in f:
        if len(titles) >= count:
          break
        read += 1
        title = clean(FORMATS[fmt](line.rstrip("\n")))
        if not title:
          empty += 1
        elif title in seen:
          dup += 1
        else:
          seen.add(title)
          titles.append(title)
          taken += 1
    stats.append({"source": path, "format": fmt, "lines_read": read, "taken": taken,
                  "duplicates": dup, "empty": empty})
    if len(titles) >= count:
      break
  return titles, stats


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--source", action="append", required=True,
                 help="FORMAT:PATH, FORMAT one of " + ", ".join(sorted(FORMATS)) +
                      "; repeated, read in order")
  p.add_argument("--output", required=True)
  p.add_argument("--count", type=int, default=100000)
  args = p.parse_args(argv)
  sources = []
  for s in args.source:
    fmt, _, path = s.partition(":")
    if fmt not in FORMATS or not path:
      p.error("--source takes FORMAT:PATH with FORMAT in %s: %r" % (sorted(FORMATS), s))
    sources.append((fmt, path))
  titles, stats = build(sources, args.count)
  for s in stats:
    print(json.dumps(s, ensure_ascii=False), file=sys.stderr)
  if len(titles) < args.count:
    sys.exit("only %d distinct titles in the sources, %d asked" % (len(titles), args.count))
  with open(args.output, "w", encoding="utf-8", newline="\n") as f:
    for t in titles:
      f.write(t + "\n")
  print("wrote %d titles to %s" % (len(titles), args.output), file=sys.stderr)


if __name__ == "__main__":
  main()
