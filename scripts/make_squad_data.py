# coding=utf-8
"""Writes small SQuAD-format reading-comprehension sets, a vocab and a tiny BERT config.

The tests and the SQuAD example of docs/READING_COMPREHENSION.md need reading-comprehension
data that ship with the project: no downloads, no third-party text. This script composes short contexts
out of "fact" sentences that each say where one product comes from, e.g.

  zh: 茶叶产自普洱。苹果产自烟台。        question: 苹果产自哪里？  answer: 烟台
  en: The tea comes from Assam. Gdańsk produces the amber.
                                          question: Where is the amber from?
                                          answer: Gdańsk

Each product has its own three places (tea: Pu'er, Anxi, Xinyang; amber: Kaliningrad,
Gdańsk, Vilnius; ...), and the products of one context are all different. The answer is
the place in the context that belongs to the question's product: the model has to match
the question against the context, and a tiny BERT learns that association quickly.
Measured with this script's config (2 layers, hidden 64), 2 towers x batch 8, learning
rate 1e-3, 2,000 training questions x 4 epochs = 500 steps (about 10 s of training on 2
CPU cores): dev F1 92-99 (zh v1.1) and 99-100 (en v2.0) over --random_seed 1-3, on
TF 2.21 and 1.15.5, against 1-6 (zh) and 20-30 (en v2) untrained.

What did NOT learn in a budget like that, measured on this machine with the same model
(500-800 steps unless said):
  * any product coming from any place (the model then has to read the fact's structure,
    attending from the place to the product a few tokens before it): dev F1 47 after
    3,000 steps (initializer_range 0.02), start accuracy at chance (0.1);
  * three question patterns, one of them with the product last ("哪里出产苹果？"): en
    stayed at chance;
  * dropout 0.1: dev F1 91 (zh) and 56 (en), where no dropout gave 98 and 99;
  * Google's initializer_range 0.02: at chance after 600 steps.
Hence one question shape per language (two wordings), no dropout and
initializer_range 0.1 in the config below.

The data exercise the answer-offset pitfalls of Chinese and accented text:
  * zh: facts that put the place first ("烟台出产苹果。"), so some answers start at the
    very first character of a context; last facts without a final "。", so some end at
    its very last character; full-width punctuation (，。；：“”（）《》); and a Latin place
    (Bordeaux) inside Chinese text, left out of the vocab so WordPiece spells it.
  * en: capitalised and accented places (Bogotá, Medellín, Gruyères, Côte d'Ivoire,
    São Paulo, Gdańsk), which the uncased tokenizer lower-cases and strips; Medellín,
    Gruyères and Kaliningrad are left out of the vocab, so WordPiece spells them in
    pieces; accented filler words (Café, naïve, Crème, Élise).
  * About one context in six gets many filler sentences: up to 90-130 word pieces, which
    span three to four windows at --max_seq_length=64 and --doc_stride=24 (most contexts
    have 15-40).
With --version 2.0, about a third of the questions ask about a product the context does
not mention: "is_impossible": true and "answers": [], as in SQuAD 2.0.

Files written into --output_dir (names as the public sets use them):
  zh: cmrc2018_train.json, cmrc2018_dev.json (2.0: cmrc2018_train-v2.0.json, ...dev...)
  en: train-v1.1.json, dev-v1.1.json (2.0: train-v2.0.json, dev-v2.0.json)
  vocab.txt          [PAD] [UNK] [CLS] [SEP] [MASK], then every token the uncased BERT
                     tokenizer makes from the texts (except the spelled-out words), and
                     every ASCII letter and digit, plain and as a "##" continuation.
  bert_config.json   a tiny BERT whose vocab_size is the number of lines of vocab.txt.
Training questions have one answer. Dev questions have one to three (the place; then,
as different annotators mark it, sometimes also the place with the word before it,
e.g. "from Assam" or "产自普洱", and sometimes the place again).

Output depends only on the arguments: the same bytes on every run and Python version.
Uses the standard library and the project's tokenization.py (which has no TensorFlow).

Usage:
  python scripts/make_squad_data.py --output_dir /tmp/squad_zh --language zh
  python scripts/make_squad_data.py --output_dir /tmp/squad_en --language en --version 2.0
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_demo_data  # pylint: disable=wrong-import-position
from bert_mgpu.data.output_files import atomic_write_text  # pylint: disable=wrong-import-position
import tokenization  # pylint: disable=wrong-import-position

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# Facts (products) per context.
MIN_FACTS = 2
MAX_FACTS = 3

# Share of contexts made long with extra filler sentences, and how many they get.
LONG_CONTEXT_SHARE = 0.15
LONG_CONTEXT_FILLERS = (6, 8)

# v2.0: share of questions about a product the context does not mention.
IMPOSSIBLE_SHARE = 1.0 / 3


class Language(object):
  """The word lists and sentence patterns of one language.

  Attributes:
    places: dict product -> list of its places (the answers).
    after_facts: patterns with {product} before {place}: (pattern, alternative answer
      prefix or None). The alternative answer is the prefix + the place, e.g. "from Assam".
    before_facts: patterns with {place} first (the answer can open the context).
    questions: question patterns with {product}.
    fillers: sentences with no fact in them.
    fact_ends: punctuation after a fact (one is drawn; the last fact of a context
      always gets the first); separator: between sentences.
    spelled_out: lower-cased words left out of the vocab, so WordPiece spells them.
  """

  def __init__(self, **fields):
    self.__dict__.update(fields)


CHINESE = Language(
    places={"苹果": ["烟台", "洛川", "阿克苏"], "茶叶": ["普洱", "安溪", "信阳"],
            "丝绸": ["苏州", "湖州", "南充"], "瓷器": ["景德镇", "德化", "醴陵"],
            "大米": ["五常", "盘锦", "万年"], "红枣": ["和田", "沧州", "稷山"],
            "香蕉": ["海南", "西双版纳", "漳州"], "葡萄酒": ["Bordeaux", "宁夏", "通化"],
            "咖啡": ["保山", "德宏", "万宁"], "羊毛": ["内蒙古", "青海", "甘南"]},
    after_facts=[("{product}产自{place}", "产自"), ("{product}的产地是{place}", None)],
    before_facts=["{place}出产{product}"],
    questions=["{product}产自哪里？", "{product}的产地在哪里？"],
    fillers=["这里气候温和，雨水充足。", "据《地方志》记载：当地人世代务农。",
             "每年秋天都有很多游客来参观。", "（以上内容仅供参考）", "当地人常说：“好山好水出好物。”",
             "市场里的Wi-Fi信号很好。", "价格今年又上涨了。", "运输主要靠铁路和公路；",
             "这个镇子不大，但很热闹。", "老人们喜欢在树下聊天。"],
    fact_ends=["。", "。", "；"],
    separator="",
    spelled_out=["bordeaux"])

ENGLISH = Language(
    places={"coffee": ["Bogotá", "Medellín", "Kona"], "tea": ["Darjeeling", "Assam", "Kenya"],
            "silk": ["Suzhou", "Lyon", "Como"], "cheese": ["Gruyères", "Roquefort", "Parma"],
            "wine": ["Bordeaux", "Napa Valley", "Rioja"],
            "cocoa": ["Ghana", "Côte d'Ivoire", "Ecuador"],
            "wool": ["New Zealand", "Patagonia", "Shetland"],
            "rice": ["Niigata", "Vercelli", "São Paulo"],
            "saffron": ["Kashmir", "La Mancha", "Khorasan"],
            "amber": ["Kaliningrad", "Gdańsk", "Vilnius"]},
    after_facts=[("The {product} comes from {place}", "from "),
                 ("Most of the {product} is shipped from {place}", "from ")],
    before_facts=["{place} produces the {product}"],
    questions=["Where does the {product} come from?", "Where is the {product} from?"],
    fillers=["The Café on the main square opens early.", "Some visitors call the market naïve.",
             "Prices rose again this year.", "The Old Harbour is busy in summer.",
             "Crème pastries are sold at the station.", "Trains and trucks carry most goods.",
             "Nobody remembers when the fair began.", "Élise runs the little museum.",
             "It rained for most of April; the roads were closed.", "Locals like long walks."],
    fact_ends=["."],
    separator=" ",
    spelled_out=["medellin", "gruyeres", "kaliningrad"])

LANGUAGES = {"zh": CHINESE, "en": ENGLISH}


def compose_context(language, rng, force_start=False, force_end=False):
  """Composes one context and the char span of each of its facts' answers.

  Args:
    language: a Language.
    rng: random.Random.
    force_start: open the context with a place-first fact (answer at character 0).
    force_end: close it with a product-first fact and no final punctuation (answer
      ending at the last character).

  Returns:
    (context, facts, alternatives): facts maps each product of the context to the
    (start, end) char span of its place; alternatives maps it to the span of the
    alternative (longer) answer, or is missing the product when there is none.
  """
  num_facts = rng.randint(MIN_FACTS, MAX_FACTS)
  products = rng.sample(sorted(language.places), num_facts)
  places = [rng.choice(language.places[product]) for product in products]
  # Each sentence: (text, product or None, char offset of the place in text, alt prefix).
  sentences = []
  for index, (product, place) in enumerate(zip(products, places)):
    place_first = rng.random() < 0.3
    if force_start and index == 0:
      place_first = True
    if force_end and index == num_facts - 1:
      place_first = False
    if place_first:
      pattern, alt_prefix = rng.choice(language.before_facts), None
    else:
      pattern, alt_prefix = rng.choice(language.after_facts)
    text = pattern.format(product=product, place="\x00")
    place_offset = text.index("\x00")
    text = text.replace("\x00", place)
    last = index == num_facts - 1
    if not (last and force_end):
      text += rng.choice(language.fact_ends if not last else language.fact_ends[:1])
    sentences.append((text, product, place, place_offset, alt_prefix))
  num_fillers = rng.randint(0, 2)
  if rng.random() < LONG_CONTEXT_SHARE:
    num_fillers = rng.randint(*LONG_CONTEXT_FILLERS)
  for filler in rng.sample(language.fillers, num_fillers):
    # Fillers go between the facts, never before the first or after the last one, so
    # forced start and end answers stay where they are.
    position = rng.randint(1, len(sentences) - 1) if len(sentences) > 1 else 1
    sentences.insert(position, (filler, None, None, None, None))
  context = ""
  facts, alternatives = {}, {}
  for text, product, place, place_offset, alt_prefix in sentences:
    if context:
      context += language.separator
    if product is not None:
      start = len(context) + place_offset
      facts[product] = (start, start + len(place))
      if alt_prefix:  # the pattern has alt_prefix right before {place}
        alternatives[product] = (start - len(alt_prefix), start + len(place))
    context += text
  return context, facts, alternatives


def make_questions(language, rng, context, facts, alternatives, num_questions, version,
                   is_training):
  """The qas of one context.

  Args:
    language: a Language.
    rng: random.Random.
    context, facts, alternatives: from compose_context.
    num_questions: how many questions to ask.
    version: "1.1" or "2.0".
    is_training: one answer per question (dev sets may have more).

  Returns:
    list of (question, is_impossible, answers) with answers a list of
    {"text", "answer_start"} dicts.
  """
  asked = rng.sample(sorted(facts), min(num_questions, len(facts)))
  absent = [p for p in sorted(language.places) if p not in facts]
  qas = []
  for product in asked:
    if version == "2.0" and rng.random() < IMPOSSIBLE_SHARE:
      product = rng.choice(absent)
      absent.remove(product)
    question = rng.choice(language.questions).format(product=product)
    if product not in facts:
      qas.append((question, True, []))
      continue
    start, end = facts[product]
    answers = [{"text": context[start:end], "answer_start": start}]
    if not is_training:
      if product in alternatives and rng.random() < 0.5:
        alt_start, alt_end = alternatives[product]
        answers.append({"text": context[alt_start:alt_end], "answer_start": alt_start})
      if rng.random() < 0.5:
        answers.append(dict(answers[0]))  # a second annotator who agrees
    qas.append((question, False, answers))
  return qas


def make_split(language, version, split, num_questions, rng):
  """One SQuAD-format dataset dict with exactly `num_questions` questions.

  Every fifth context opens with an answer, and every fifth (offset) ends with one.
  """
  paragraphs = []
  total = 0
  index = 0
  while total < num_questions:
    context, facts, alternatives = compose_context(
        language, rng, force_start=index % 5 == 0, force_end=index % 5 == 2)
    wanted = min(rng.randint(1, 2), num_questions - total)
    qas = make_questions(language, rng, context, facts, alternatives, wanted, version,
                         split == "train")
    entries = []
    for number, (question, is_impossible, answers) in enumerate(qas):
      if language is CHINESE:
        qas_id = "%s_%d_QUERY_%d" % (split.upper(), index, number)
      else:
        qas_id = "%s-%05d-%d" % (split, index, number)
      entry = {"id": qas_id, "question": question, "answers": answers}
      if version == "2.0":
        entry["is_impossible"] = is_impossible
      entries.append(entry)
    paragraphs.append({"context": context, "qas": entries})
    total += len(entries)
    index += 1
  title = "产地" if language is CHINESE else "Origins"
  return {"version": "v" + version, "data": [{"title": title, "paragraphs": paragraphs}]}


def split_file_names(language_code, version):
  """(train file name, dev file name), as the public sets name them."""
  if language_code == "zh":
    suffix = "" if version == "1.1" else "-v2.0"
    return "cmrc2018_train%s.json" % suffix, "cmrc2018_dev%s.json" % suffix
  return "train-v%s.json" % version, "dev-v%s.json" % version


def dataset_texts(dataset):
  """Every context and question of a dataset dict."""
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      yield paragraph["context"]
      for qa in paragraph["qas"]:
        yield qa["question"]


def build_vocab(texts, spelled_out):
  """The vocab lines: the special tokens, then the sorted distinct tokens.

  Args:
    texts: every text of the data.
    spelled_out: basic tokens to leave out, so that WordPiece spells them in pieces.

  Returns:
    A list of tokens; the id of a token is its index.
  """
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  tokens = set()
  for text in texts:
    tokens.update(basic.tokenize(text))
  tokens -= set(spelled_out)
  for char in "abcdefghijklmnopqrstuvwxyz0123456789":
    tokens.add(char)
    tokens.add("##" + char)
  return SPECIAL_TOKENS + sorted(tokens - set(SPECIAL_TOKENS))


def tiny_bert_config(vocab_size):
  """A BERT small enough to learn the task in seconds on a CPU: the demo's config without
  dropout and with initializer_range 0.1 instead of 0.02. Both made learning from scratch
  fast and reliable (see the module docstring)."""
  return dict(make_demo_data.tiny_bert_config(vocab_size), attention_probs_dropout_prob=0.0,
              hidden_dropout_prob=0.0, initializer_range=0.1)


def count_questions(dataset):
  """(questions, unanswerable questions, contexts) of a dataset dict."""
  questions = impossible = contexts = 0
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      contexts += 1
      for qa in paragraph["qas"]:
        questions += 1
        impossible += int(bool(qa.get("is_impossible")))
  return questions, impossible, contexts


def parse_args(argv):
  """Parses the command line (argv without the program name)."""
  parser = argparse.ArgumentParser(
      description="Write small SQuAD-format train/dev sets (Chinese like CMRC 2018, or "
                  "English), their vocab.txt and a tiny bert_config.json.")
  parser.add_argument("--output_dir", required=True,
                      help="directory to write into (created if missing; files are overwritten)")
  parser.add_argument("--language", choices=sorted(LANGUAGES), default="zh",
                      help="zh (Chinese, CMRC 2018 style) or en (English); default zh")
  parser.add_argument("--version", choices=["1.1", "2.0"], default="1.1",
                      help="SQuAD version; 2.0 adds unanswerable questions (default 1.1)")
  parser.add_argument("--train_questions", type=int, default=2000,
                      help="questions in the training set (default 2000)")
  parser.add_argument("--dev_questions", type=int, default=101,
                      help="questions in the dev set (default 101)")
  parser.add_argument("--seed", type=int, default=12345,
                      help="random seed; the same arguments always give the same files")
  return parser.parse_args(argv)


def main(argv=None):
  """Writes the files. Returns 0 on success, 1 on bad arguments."""
  args = parse_args(argv)
  for name in ("train_questions", "dev_questions"):
    if getattr(args, name) < 1:
      sys.stderr.write("make_squad_data.py: --%s=%d: it must be at least 1.\n" %
                       (name, getattr(args, name)))
      return 1
  output_dir = args.output_dir
  if not make_demo_data.make_output_dir(output_dir, "make_squad_data.py"):
    return 1

  language = LANGUAGES[args.language]
  # Separate generators, so the dev set does not change with --train_questions.
  splits = [("train", args.train_questions, random.Random(args.seed)),
            ("dev", args.dev_questions, random.Random(args.seed + 1))]
  texts = []
  for (split, num_questions, rng), file_name in zip(
      splits, split_file_names(args.language, args.version)):
    dataset = make_split(language, args.version, split, num_questions, rng)
    path = os.path.join(output_dir, file_name)
    atomic_write_text(path, json.dumps(dataset, ensure_ascii=False, indent=1) + "\n")
    questions, impossible, contexts = count_questions(dataset)
    print("wrote %s: %d questions (%d unanswerable) about %d contexts" %
          (path, questions, impossible, contexts))
    texts.extend(dataset_texts(dataset))

  vocab = build_vocab(texts, language.spelled_out)
  make_demo_data.write_model_files(output_dir, vocab, tiny_bert_config(len(vocab)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
