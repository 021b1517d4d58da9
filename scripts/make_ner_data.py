# coding=utf-8
"""Writes a generated Chinese NER data set in both of run_ner_mgpu.py's formats.

The tests and the example of docs/NER.md need data that ships with the project. This
script composes Chinese sentences from hand-written templates with person (PER),
place (LOC) and organisation (ORG) slots, filled from word lists, and writes into
--output_dir:

  conll/{train,dev,test}.txt    one character per line with its BIO tag (the MSRA and
                                People's Daily layout), a blank line between sentences.
  cluener/{train,dev,test}.json CLUENER2020's JSON lines: {"id", "text", "label":
                                {type: {entity: [[start, end]]}}}, ends inclusive.
  vocab.txt, bert_config.json   the vocab of every character (make_demo_data's rules)
                                and a tiny BERT, as make_demo_data.py writes them.

--long_every N makes every Nth test sentence several sentences long (the windows test).
--train_sentences N writes N training sentences instead of 400 (a larger set for
benchmarks/run_ner_peers.py); dev and test keep 80 each. Output depends only on the flags
(the default flags write what they always wrote).

Usage:
  python scripts/make_ner_data.py --output_dir /tmp/ner_data [--seed 12345]
      [--train_sentences 400]
"""

import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_demo_data  # pylint: disable=wrong-import-position
from bert_mgpu.data.output_files import atomic_write_text  # pylint: disable=wrong-import-position

ENTITIES = {
    "PER": ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄强", "周杰", "吴婷",
            "徐明", "孙丽", "马超", "朱琳", "胡军", "郭涛", "何欣", "高峰", "林晓", "罗斌"],
    "LOC": ["北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "西安", "南京", "重庆",
            "天津", "苏州", "长沙", "青岛", "厦门", "昆明", "大连", "沈阳", "郑州", "哈尔滨"],
    "ORG": ["清华大学", "北京大学", "中国银行", "华为公司", "国家统计局", "人民日报社",
            "中央电视台", "复旦大学", "招商银行", "阿里巴巴集团", "中国科学院", "浙江大学",
            "腾讯公司", "小米公司", "新华社", "南方航空"],
}

# Templates: {PER}, {LOC}, {ORG} slots; the rest is O.
TEMPLATES = [
    "{PER}昨天去了{LOC}。", "{PER}在{ORG}工作了三年。", "{ORG}今天在{LOC}召开发布会。",
    "记者{PER}报道，{LOC}的气温持续升高。", "{PER}和{PER}一起参观了{ORG}。",
    "{ORG}宣布将在{LOC}设立新的办公室。", "来自{LOC}的{PER}获得了比赛冠军。",
    "{PER}表示，{ORG}的改革已经取得成效。", "这个周末{PER}打算从{LOC}出发去{LOC}旅行。",
    "据{ORG}消息，{LOC}地铁新线路将于明年开通。", "今年的会议由{ORG}主办。",
    "天气很好，大家都出去散步了。", "{LOC}是一座历史悠久的城市。",
]

SPLIT_SIZES = (("train", 400), ("dev", 80), ("test", 80))


def make_sentence(rng):
  """A sentence as (characters, BIO tags, entities [(type, text, start, end inclusive)])."""
  template = rng.choice(TEMPLATES)
  chars, tags, entities = [], [], []
  position = 0
  while position < len(template):
    if template[position] == "{":
      end = template.index("}", position)
      entity_type = template[position + 1:end]
      name = rng.choice(ENTITIES[entity_type])
      entities.append((entity_type, name, len(chars), len(chars) + len(name) - 1))
      tags += ["B-" + entity_type] + ["I-" + entity_type] * (len(name) - 1)
      chars += list(name)
      position = end + 1
    else:
      chars.append(template[position])
      tags.append("O")
      position += 1
  return chars, tags, entities


def join_sentences(parts):
  """One long sentence made of several: characters, tags and shifted entities."""
  chars, tags, entities = [], [], []
  for part_chars, part_tags, part_entities in parts:
    entities += [(t, text, s + len(chars), e + len(chars)) for t, text, s, e in part_entities]
    chars += part_chars
    tags += part_tags
  return chars, tags, entities


def make_splits(seed, long_every, train_sentences=None):
  rng = random.Random(seed)
  splits = collections.OrderedDict()
  for name, size in SPLIT_SIZES:
    if name == "train" and train_sentences is not None:
      size = train_sentences
    sentences = []
    for index in range(size):
      if name == "test" and long_every and index % long_every == 0:
        sentences.append(join_sentences([make_sentence(rng) for _ in range(8)]))
      else:
        sentences.append(make_sentence(rng))
    splits[name] = sentences
  return splits


def conll_text(sentences):
  return "".join("".join("%s\t%s\n" % pair for pair in zip(chars, tags)) + "\n"
                 for chars, tags, _ in sentences)


def cluener_text(sentences):
  lines = []
  for index, (chars, _, entities) in enumerate(sentences):
    label = collections.OrderedDict()
    for entity_type, text, start, end in entities:
      label.setdefault(entity_type, collections.OrderedDict()).setdefault(text, []).append(
          [start, end])
    lines.append(json.dumps(collections.OrderedDict([
        ("id", index), ("text", "".join(chars)), ("label", label)]), ensure_ascii=False))
  return "".join(line + "\n" for line in lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description="Write a generated Chinese NER data set.")
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--long_every", type=int, default=0,
                      help="make every Nth test sentence 8 sentences long (0: none)")
  parser.add_argument("--train_sentences", type=int, default=SPLIT_SIZES[0][1],
                      help="number of training sentences (dev and test keep 80 each)")
  args = parser.parse_args(argv)
  if args.train_sentences < 1:
    parser.error("--train_sentences must be at least 1")
  if not make_demo_data.make_output_dir(args.output_dir, "make_ner_data.py"):
    return 1
  splits = make_splits(args.seed, args.long_every, args.train_sentences)
  for data_format, render, suffix in (("conll", conll_text, ".txt"),
                                      ("cluener", cluener_text, ".json")):
    directory = os.path.join(args.output_dir, data_format)
    os.makedirs(directory, exist_ok=True)
    for name, sentences in splits.items():
      atomic_write_text(os.path.join(directory, name + suffix), render(sentences))
  texts = ["".join(chars) for sentences in splits.values() for chars, _, _ in sentences]
  vocab = make_demo_data.build_vocab(texts)
  make_demo_data.write_model_files(args.output_dir, vocab,
                                   make_demo_data.tiny_bert_config(len(vocab)))
  print("wrote %s: %s sentences" % (args.output_dir, ", ".join(
      "%s %d" % (name, len(sentences)) for name, sentences in splits.items())))
  return 0


if __name__ == "__main__":
  sys.exit(main())
