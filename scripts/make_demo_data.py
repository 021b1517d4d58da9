# coding=utf-8
"""Writes the built-in Chinese text classification demo: data, vocab and a tiny config.

The demo (README command 1) trains a tiny BERT on a fresh CPU-only machine,
so it needs data that ships with the project: no downloads, no third-party text.
This script composes short Chinese sentences from hand-written templates and word
lists in five classes (体育 sports, 财经 finance, 科技 tech, 娱乐 entertainment,
美食 food) and writes, into --output_dir:

  train.tsv, dev.tsv, test.tsv  header `label<TAB>text_a`, one example per line,
                                rows shuffled; no text appears in two splits.
  labels.txt                    the class names, one per line, in label-id order.
  vocab.txt                     [PAD] [UNK] [CLS] [SEP] [MASK], then every token the
                                BERT tokenizer (lower-cased) makes from the texts,
                                plus every ASCII letter and digit, plain and as a
                                `##` continuation piece, sorted.
  bert_config.json              a tiny BERT (hidden 64, 2 layers, 2 heads) whose
                                vocab_size is the number of lines of vocab.txt.

Output depends only on --seed: the same bytes on every run (checked identical on
Python 3.7 and 3.11).
Uses the standard library and the project's atomic file writer (bert_mgpu/data/output_files.py).

Usage:
  python scripts/make_demo_data.py --output_dir /tmp/demo_data [--seed 12345]
"""

import argparse
import json
import os
import random
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.data.output_files import atomic_write_text  # pylint: disable=wrong-import-position

# Class names, in label-id order (labels.txt is written in this order).
LABELS = ["体育", "财经", "科技", "娱乐", "美食"]

# Examples per class in each split; 5 classes give 400 / 100 / 100.
EXAMPLES_PER_CLASS = (("train", 80), ("dev", 20), ("test", 20))

MIN_TEXT_CHARS = 8
MAX_TEXT_CHARS = 30

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Sentence templates per class. `{slot}` names a word list below: a class-specific
# list first (SLOTS[label]), then the shared ones (SHARED_SLOTS). Templates that
# end in a full-width question mark keep it; the others get a random ending.
TEMPLATES = {
    "体育": [
        "{team}以{score}战胜了对手",
        "{athlete}在{event}中夺得冠军",
        "NBA季后赛{nba_team}主场获胜",
        "CBA联赛{cba_team}在客场以{small}分之差惜败",
        "{team}主教练宣布{small}名球员首发",
        "{city}马拉松吸引了{big}名跑者参赛",
        "{athlete}打破了{event}的纪录",
        "球迷在体育场为{team}加油助威",
        "{team}能否闯进{event}的决赛？",
        "{athlete}每天训练{small}个小时备战{event}",
    ],
    "财经": [
        "股市大盘{when}上涨{pct}%",
        "{company}第{quarter}季度营收增长{pct}%",
        "央行宣布下调存款准备金率0.{small}个百分点",
        "{company}计划在{exchange}证券交易所IPO上市",
        "基金经理看好{sector}板块的投资机会",
        "人民币汇率{when}小幅波动",
        "银行理财产品收益率回落到{pct}%",
        "{company}的CEO表示利润将稳步增长",
        "{sector}股票还会继续涨吗？",
        "{company}发行了{big}万元债券",
    ],
    "科技": [
        "{maker}发布新款手机，搭载{small}纳米芯片",
        "研究团队用 AI 算法提升了{thing}的准确率",
        "这款App新增了{feature}功能",
        "{city}建成了{big}个5G基站",
        "工程师用GPU训练{thing}模型",
        "新一代芯片的算力提升了{small}倍",
        "软件更新修复了{small}个安全漏洞",
        "{maker}推出了云计算和{feature}服务",
        "这款App的{feature}好用吗？",
        "机器人在{city}的工厂完成了自动装配",
    ],
    "娱乐": [
        "{star}主演的电影{when}上映",
        "这部电视剧播放量突破{small}亿次",
        "{star}在{city}举办个人演唱会",
        "综艺节目邀请{star}担任嘉宾",
        "新专辑登上音乐排行榜第{small}名",
        "电影票房累计超过{small}亿元",
        "导演透露{genre}续集将在明年开拍",
        "新歌MV上线{small}小时点击量破百万",
        "这部{genre}值得去电影院看吗？",
        "粉丝在{city}机场为{star}应援",
    ],
    "美食": [
        "这家餐厅的{dish}味道很好",
        "{city}小吃街的{dish}很受欢迎",
        "厨师教大家用{small}分钟做{dish}",
        "{dish}要用小火慢炖{small}个小时",
        "这款奶茶甜度适中，口感顺滑",
        "网红店推出了{flavor}口味的蛋糕",
        "早餐吃一碗热干面配豆浆",
        "这家店的Pizza饼底又薄又脆",
        "{dish}怎么做才好吃？",
        "和朋友去{city}吃{flavor}火锅",
    ],
}

# Word lists that only one class uses.
SLOTS = {
    "体育": {
        "team": ["主队", "客队", "中国女排", "国家男篮", "足球队", "省队", "青年队"],
        "nba_team": ["湖人队", "火箭队", "勇士队", "凯尔特人队"],
        "cba_team": ["广东队", "辽宁队", "北京队", "新疆队"],
        "athlete": ["老将", "新秀", "游泳名将", "乒乓球选手", "短跑运动员", "小将"],
        "event": ["世锦赛", "奥运会", "全运会", "亚运会", "公开赛", "锦标赛", "联赛"],
    },
    "财经": {
        "company": ["这家券商", "某银行", "一家保险公司", "该上市公司", "某地产企业", "一家基金公司"],
        "sector": ["新能源", "消费", "医药", "银行", "半导体", "地产"],
        "quarter": ["一", "二", "三", "四"],
        "exchange": ["上海", "深圳", "北京", "香港"],
    },
    "科技": {
        "maker": ["一家科技公司", "国产厂商", "某互联网公司", "这家初创企业", "芯片厂商"],
        "thing": ["语音识别", "图像识别", "机器翻译", "自动驾驶", "推荐算法"],
        "feature": ["语音助手", "人脸解锁", "离线翻译", "智能推荐", "云端备份"],
    },
    "娱乐": {
        "star": ["这位歌手", "知名演员", "偶像组合", "青年演员", "流行歌手", "喜剧演员"],
        "genre": ["喜剧片", "动画片", "科幻片", "爱情片", "武侠片"],
    },
    "美食": {
        "dish": ["红烧肉", "小笼包", "麻婆豆腐", "烤鸭", "饺子", "牛肉面", "酸菜鱼", "糖醋排骨"],
        "flavor": ["麻辣", "抹茶", "草莓", "芒果", "番茄", "酸甜"],
    },
}

# Word lists every class shares: they carry no class signal, so the model has to
# find the class-specific words.
SHARED_SLOTS = {
    "city": ["北京", "上海", "广州", "深圳", "成都", "杭州", "武汉", "西安"],
    "when": ["今天", "昨天", "本周", "上午", "下午", "近日"],
}

# Optional neutral openings, shared by all classes ("" = none). Templates that
# already name a time ({when}) take only the openings without one.
OPENINGS = ["", "", "", "", "据报道，", "记者了解到，", "网友说，"]
TIME_OPENINGS = ["今天", "昨天", "本周", "近日"]
ENDINGS = ["。", "。", "。", "！", ""]


def number_slot(name, rng):
  """Returns a random number string for the numeric slots, or None for other names.

  Args:
    name: slot name from a template.
    rng: random.Random.

  Returns:
    The text of a number ("3", "1250", "2.5", "3比1"), or None if `name` is not numeric.
  """
  if name == "small":
    return str(rng.randint(2, 9))
  if name == "big":
    return str(rng.randint(10, 5000))
  if name == "pct":
    # Sometimes a decimal, so "." (ASCII punctuation) shows up as a token too.
    if rng.randint(0, 2) == 0:
      return "%d.%d" % (rng.randint(0, 9), rng.randint(1, 9))
    return str(rng.randint(1, 30))
  if name == "score":
    # A match result "3比1": the first number is the larger one.
    winner = rng.randint(1, 5)
    return "%d比%d" % (winner, rng.randint(0, winner - 1))
  return None


def fill_template(template, label, rng):
  """Replaces each `{slot}` of a template with a random word or number.

  Args:
    template: a string from TEMPLATES.
    label: class name, selects the class-specific word lists.
    rng: random.Random.

  Returns:
    The filled sentence (no opening or ending added).
  """
  pieces = []
  position = 0
  while True:
    start = template.find("{", position)
    if start < 0:
      pieces.append(template[position:])
      break
    end = template.index("}", start)
    pieces.append(template[position:start])
    name = template[start + 1:end]
    value = number_slot(name, rng)
    if value is None:
      words = SLOTS[label].get(name) or SHARED_SLOTS.get(name)
      if not words:
        raise ValueError("template %r of class %s names unknown slot {%s}" % (template, label, name))
      value = rng.choice(words)
    pieces.append(value)
    position = end + 1
  return "".join(pieces)


def make_sentence(label, rng):
  """Composes one random sentence of class `label`.

  Args:
    label: class name from LABELS.
    rng: random.Random.

  Returns:
    A pair (body, sentence): the filled template, and the sentence made of an
    optional neutral opening, the body and an optional ending.
  """
  template = rng.choice(TEMPLATES[label])
  body = fill_template(template, label, rng)
  if "{when}" in template:
    opening = rng.choice(OPENINGS)
  else:
    opening = rng.choice(OPENINGS + TIME_OPENINGS)
  if body.endswith("？"):
    ending = ""
  else:
    ending = rng.choice(ENDINGS)
  return body, opening + body + ending


def make_class_texts(label, count, rng, taken):
  """Draws `count` sentences of one class, no two with the same body.

  Keying on the body, not the whole sentence, keeps out pairs that differ only
  in the neutral opening or the final punctuation.

  Args:
    label: class name.
    count: how many sentences to return.
    rng: random.Random.
    taken: set of bodies already used (by any class); updated in place.

  Returns:
    A list of `count` new texts, in the order they were drawn.

  Raises:
    RuntimeError: the templates cannot give that many distinct sentences.
  """
  texts = []
  max_attempts = 200 * count
  for _ in range(max_attempts):
    if len(texts) == count:
      break
    body, text = make_sentence(label, rng)
    if body in taken or not MIN_TEXT_CHARS <= len(text) <= MAX_TEXT_CHARS:
      continue
    taken.add(body)
    texts.append(text)
  if len(texts) < count:
    raise RuntimeError(
        "Only %d distinct sentences of class %s after %d attempts (wanted %d): "
        "add templates or words to scripts/make_demo_data.py." % (len(texts), label, max_attempts, count))
  return texts


def make_splits(seed):
  """Builds the three shuffled splits.

  Each class draws all its sentences at once and deals them out to the splits,
  so no text is in two splits.

  Args:
    seed: integer random seed.

  Returns:
    A dict split name -> list of (label, text), rows shuffled.
  """
  rng = random.Random(seed)
  taken = set()
  splits = dict((name, []) for name, _ in EXAMPLES_PER_CLASS)
  for label in LABELS:
    total = sum(count for _, count in EXAMPLES_PER_CLASS)
    texts = make_class_texts(label, total, rng, taken)
    start = 0
    for name, count in EXAMPLES_PER_CLASS:
      splits[name].extend((label, text) for text in texts[start:start + count])
      start += count
  for name, _ in EXAMPLES_PER_CLASS:
    rng.shuffle(splits[name])
  return splits


def is_cjk_ideograph(char):
  """True for the CJK ideograph ranges the BERT tokenizer splits one by one."""
  code = ord(char)
  return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or
          0x20000 <= code <= 0x2A6DF or 0x2A700 <= code <= 0x2B73F or
          0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF or
          0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)


def is_punctuation(char):
  """True for characters the BERT tokenizer splits off as punctuation."""
  code = ord(char)
  if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def text_vocab_tokens(text):
  """The vocab entries one lower-cased text needs, other than ASCII letters/digits.

  Only the characters these templates use are handled: CJK ideographs (one token
  each), runs of ASCII letters and digits (a word; letter-only runs are kept whole,
  the rest is covered by the single-character pieces), spaces, and punctuation
  (one token each).

  Args:
    text: a generated sentence.

  Returns:
    A list of tokens.
  """
  tokens = []
  word = []
  for char in text.lower() + " ":
    if char.isascii() and char.isalnum():
      word.append(char)
      continue
    if word:
      run = "".join(word)
      if run.isalpha():
        tokens.append(run)
      word = []
    if char.isspace():
      continue
    if not (is_cjk_ideograph(char) or is_punctuation(char)):
      # The tokenizer would glue such a character to its neighbours into a word
      # this function does not model; keep the templates free of them.
      raise ValueError("text %r has character %r (U+%04X), which is neither a CJK ideograph, "
                       "punctuation, space nor ASCII letter/digit: change the template or "
                       "word list in scripts/make_demo_data.py" % (text, char, ord(char)))
    tokens.append(char)
  return tokens


def build_vocab(texts):
  """Builds the vocab lines: the special tokens, then sorted distinct tokens.

  Args:
    texts: every generated text.

  Returns:
    A list of tokens; the id of a token is its index.
  """
  tokens = set()
  for text in texts:
    tokens.update(text_vocab_tokens(text))
  # Every ASCII letter and digit as a word start and as a continuation, so
  # WordPiece can spell any number or English word greedily.
  for char in "abcdefghijklmnopqrstuvwxyz0123456789":
    tokens.add(char)
    tokens.add("##" + char)
  return SPECIAL_TOKENS + sorted(tokens - set(SPECIAL_TOKENS))


def tiny_bert_config(vocab_size):
  """The config of a BERT small enough to train in minutes on a CPU.

  Args:
    vocab_size: number of lines of vocab.txt.

  Returns:
    A dict with the fields of Google's bert_config.json.
  """
  return {
      "attention_probs_dropout_prob": 0.1,
      "hidden_act": "gelu",
      "hidden_dropout_prob": 0.1,
      "hidden_size": 64,
      "initializer_range": 0.02,
      "intermediate_size": 128,
      "max_position_embeddings": 128,
      "num_attention_heads": 2,
      "num_hidden_layers": 2,
      "type_vocab_size": 2,
      "vocab_size": vocab_size,
  }


def tsv_text(rows):
  """Renders (label, text) rows as a TSV with the `label<TAB>text_a` header."""
  lines = ["label\ttext_a"]
  for label, text in rows:
    if "\t" in text or "\n" in text or "\r" in text:
      raise ValueError("generated text %r contains a tab or line break" % text)
    lines.append(label + "\t" + text)
  return "\n".join(lines) + "\n"


def parse_args(argv):
  """Parses the command line (argv without the program name)."""
  parser = argparse.ArgumentParser(
      description="Write the built-in Chinese classification demo data (train/dev/test.tsv, "
                  "labels.txt), its vocab.txt and a tiny bert_config.json.")
  parser.add_argument("--output_dir", required=True,
                      help="directory to write into (created if missing; files are overwritten)")
  parser.add_argument("--seed", type=int, default=12345,
                      help="random seed; the same seed always gives the same files (default 12345)")
  return parser.parse_args(argv)


def make_output_dir(output_dir, script_name):
  """Creates output_dir if needed; on failure says why on stderr and returns False."""
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    sys.stderr.write("%s: --output_dir %s exists and is not a directory; pass a directory "
                     "path.\n" % (script_name, output_dir))
    return False
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    sys.stderr.write("%s: cannot create --output_dir %s: %s\n" % (script_name, output_dir, e))
    return False
  return True


def write_model_files(output_dir, vocab, config):
  """Writes vocab.txt and bert_config.json for a generated data set, and says so."""
  path = os.path.join(output_dir, "vocab.txt")
  atomic_write_text(path, "".join(token + "\n" for token in vocab))
  print("wrote %s: %d tokens" % (path, len(vocab)))
  path = os.path.join(output_dir, "bert_config.json")
  atomic_write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
  print("wrote %s: vocab_size %d, hidden_size %d, %d layers" % (
      path, config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]))


def main(argv=None):
  """Writes the demo files. Returns 0 on success, 1 on a bad --output_dir."""
  args = parse_args(argv)
  output_dir = args.output_dir
  if not make_output_dir(output_dir, "make_demo_data.py"):
    return 1

  splits = make_splits(args.seed)
  for name, _ in EXAMPLES_PER_CLASS:
    rows = splits[name]
    path = os.path.join(output_dir, name + ".tsv")
    atomic_write_text(path, tsv_text(rows))
    print("wrote %s: %d examples in %d classes" % (path, len(rows), len(set(l for l, _ in rows))))

  path = os.path.join(output_dir, "labels.txt")
  atomic_write_text(path, "".join(label + "\n" for label in LABELS))
  print("wrote %s: %d labels" % (path, len(LABELS)))

  all_texts = [text for name, _ in EXAMPLES_PER_CLASS for _, text in splits[name]]
  vocab = build_vocab(all_texts)
  write_model_files(output_dir, vocab, tiny_bert_config(len(vocab)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
