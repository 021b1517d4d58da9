# coding=utf-8
"""Parity of convert_checkpoint.py with transformers: our side (runs in the project's TF venv).

Its peer convert_parity_hf.py runs transformers on the same inputs in the benchmark venv
(benchmarks/README.md) and compares. Models have random weights at the shape of a real
config (e.g. chinese_L-12_H-768_A-12's, --num_layers fewer layers); the texts are real
reviews (SophonPlus/ChineseNlpCorpus: waimai_10k.csv `label,review`, and
online_shopping_10_cats.csv `cat,label,review`, the mixed Chinese/Latin/digit ones) plus a
few edge cases of the tokenizers.

  export  ours -> transformers. Writes into --work_dir: texts.json (the texts, our token ids
          of each, and of every review of both files for the tokenizer check),
          inputs.npz (padded ids, masks, segment ids, masked-LM positions), for each head an
          output_dir in our format (ours/<kind>), our model's outputs on the inputs
          (ours_outputs/<kind>.npz), and its transformers export (hf/<kind>, by
          `convert_checkpoint.py --to=transformers`, log in convert_logs/<kind>.txt).
  import  transformers -> ours, after `convert_parity_hf.py save`: converts each model of
          hf_saved/ with `convert_checkpoint.py --to=tensorflow` (the classifier with
          --keep_head) into tf/<name>, runs our BertModel and masked LM on the ids of
          hf_saved/inputs.npz (tf_outputs/<name>.npz) and predict_text.py on the classifier
          (tf_outputs/cls_predict.tsv).

  python benchmarks/convert_parity_ours.py export --work_dir=/tmp/parity/w \
      --bert_config_file=/work/shared/chinese_bert/bert_config.json \
      --vocab_file=/work/shared/chinese_bert/vocab.txt --num_layers=4 \
      --waimai_csv=waimai_10k.csv --shopping_csv=online_shopping_10_cats.csv
  python benchmarks/convert_parity_ours.py import --work_dir=/tmp/parity/w
"""

import argparse
import csv
import json
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bert_mgpu.classifier import model as classifier_model  # pylint: disable=wrong-import-position
from bert_mgpu.classifier import serving as classifier_serving  # pylint: disable=C0413
from bert_mgpu.ner import model as ner_model  # pylint: disable=wrong-import-position
from bert_mgpu.ner import serving as ner_serving  # pylint: disable=wrong-import-position
from bert_mgpu.pretraining import model as pretraining_model  # pylint: disable=C0413
from bert_mgpu.squad import model as squad_model  # pylint: disable=wrong-import-position
from bert_mgpu.training import checkpoints  # pylint: disable=wrong-import-position
from bert_mgpu.transformers_format import weight_names  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position
import tokenization  # pylint: disable=wrong-import-position

# Every head compared, by our name (heads.py's kinds; ner_crf is ner with --use_crf).
KINDS = ("classifier", "multi_label", "ner", "ner_crf", "squad", "masked_lm", "pretraining",
         "encoder")
# Heads whose output_dir holds no bert_config.json or vocab.txt (as SQuAD's and
# pretraining's): the converter gets them by flag.
WITHOUT_MODEL_FILES = ("squad", "masked_lm", "pretraining")
# Heads that read sentence pairs (segment ids 0 and 1); the others read single texts.
PAIR_KINDS = ("squad", "pretraining")
NER_TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")
MAX_SEQ_LENGTH = 128
MASKED_POSITIONS = 5  # masked-LM positions per example
BATCH_SIZE = 16
# The models transformers saves for the import direction (convert_parity_hf.py save).
SAVED_NAMES = ("bert", "bert_bin", "bert_bf16", "mlm", "cls")

# Inputs where the two tokenizers are known or suspected to differ, beside the reviews.
EDGE_TEXTS = (
    "今天天气很好，我们去[MASK]园玩吧。",
    "[CLS] 文本里写着 [SEP] 和 [UNK]",
    "链接 https://example.com/" + "a" * 110 + " 打不开",
    "超长英文单词" + "x" * 150,
    "ＡＢＣ全角字母１２３和全角标点！？",
    "Café naïve résumé 带重音的字母",
    "表情😀👍🏻很赞",
    "日本語のテキストとカタカナ",
    "한국어 텍스트도 있어요",
    "零宽\u200b空格和\u00a0不换行空格",
    "控制字符\x07和制表符\t在这里",
    "IPHONE12 Pro Max 256GB 才5999元！！",
    "圆周率约等于3.1415926，e≈2.71828",
    "繁體中文的評論：這家店的服務態度很好",
    "混合mixed文本text，with English words和中文",
    "……省略号——破折号《书名号》【方括号】",
)


def parse_args():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("command", choices=("export", "import"))
  p.add_argument("--work_dir", required=True)
  p.add_argument("--bert_config_file", help="export: the config to take the shapes from.")
  p.add_argument("--vocab_file", help="export: the vocab (e.g. Chinese BERT's, 21128 pieces).")
  p.add_argument("--num_layers", type=int, default=4, help="export: encoder layers (fewer "
                 "than the config's to save time on a small machine; 0: the config's).")
  p.add_argument("--waimai_csv", help="export: waimai_10k.csv (label,review).")
  p.add_argument("--shopping_csv", help="export: online_shopping_10_cats.csv "
                 "(cat,label,review).")
  p.add_argument("--texts_per_source", type=int, default=140)
  p.add_argument("--seed", type=int, default=1)
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--tf_python", default=sys.executable, help="The python that runs "
                 "convert_checkpoint.py and predict_text.py.")
  return p.parse_args()


# ---------------------------------------------------------------------------
# Texts and inputs
# ---------------------------------------------------------------------------

def read_reviews(path, text_column):
  """The non-empty review texts of a CSV (its header skipped), tabs and newlines as spaces."""
  with open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))[1:]
  texts = [re.sub(r"[\t\r\n]+", " ", row[text_column]).strip() for row in rows
           if len(row) > text_column]
  return [text for text in texts if text]


def choose_texts(waimai, shopping, per_source, seed):
  """The model texts: reviews of each file (shopping ones with Latin letters or digits) and
  the edge cases, as dicts {"text", "source"}."""
  rng = random.Random(seed)
  mixed = [text for text in shopping if re.search(r"[A-Za-z0-9]", text)]
  chosen = [{"text": t, "source": "waimai_10k"} for t in rng.sample(waimai, per_source)]
  chosen += [{"text": t, "source": "online_shopping_mixed"} for t in
             rng.sample(mixed, per_source)]
  chosen += [{"text": t, "source": "edge_case"} for t in EDGE_TEXTS]
  return chosen


def our_ids(tokenizer, texts):
  """[CLS] pieces [SEP] ids of every text (no truncation), as transformers' tokenizer
  gives them with add_special_tokens."""
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  return [[cls_id] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) + [sep_id]
          for text in texts]


def _pad(rows, length):
  out = np.zeros([len(rows), length], np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def pair_rows(pieces_a, pieces_b, cls_id, sep_id, max_seq_length):
  """ids and segment ids of [CLS] a [SEP] b [SEP], the longer cut first (Google's rule)."""
  a, b = list(pieces_a), list(pieces_b)
  while len(a) + len(b) > max_seq_length - 3:
    (a if len(a) > len(b) else b).pop()
  ids = [cls_id] + a + [sep_id] + b + [sep_id]
  return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)


def masked_positions(lengths, rng, count):
  """[n, count] positions to mask among each row's pieces (not [CLS]/[SEP]), 0 padded, and
  their weights."""
  positions = np.zeros([len(lengths), count], np.int32)
  weights = np.zeros([len(lengths), count], np.float32)
  for i, length in enumerate(lengths):
    chosen = sorted(rng.sample(range(1, length - 1), min(count, length - 2)))
    positions[i, :len(chosen)] = chosen
    weights[i, :len(chosen)] = 1.0
  return positions, weights


def make_inputs(tokenizer, texts, seed):
  """inputs.npz's arrays: single texts and pairs (text i with text i + 1), each also with
  MASKED_POSITIONS positions replaced by [MASK]."""
  vocab = tokenizer.vocab
  pieces = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(t)) for t in texts]
  single = [[vocab["[CLS]"]] + p[:MAX_SEQ_LENGTH - 2] + [vocab["[SEP]"]] for p in pieces]
  pairs = [pair_rows(pieces[i], pieces[(i + 1) % len(pieces)], vocab["[CLS]"],
                     vocab["[SEP]"], MAX_SEQ_LENGTH) for i in range(len(pieces))]
  rng = random.Random(seed)
  arrays = {}
  for name, rows, types in (("single", single, [[0] * len(r) for r in single]),
                            ("pair", [p[0] for p in pairs], [p[1] for p in pairs])):
    ids = _pad(rows, MAX_SEQ_LENGTH)
    positions, weights = masked_positions([len(r) for r in rows], rng, MASKED_POSITIONS)
    masked = ids.copy()
    for i in range(len(rows)):
      masked[i, positions[i][weights[i] > 0]] = vocab["[MASK]"]
    arrays.update({name + "_ids": ids, name + "_mask": _pad([[1] * len(r) for r in rows],
                                                            MAX_SEQ_LENGTH),
                   name + "_types": _pad(types, MAX_SEQ_LENGTH),
                   name + "_masked_ids": masked, name + "_positions": positions,
                   name + "_position_weights": weights})
  return arrays


# ---------------------------------------------------------------------------
# Models in our format
# ---------------------------------------------------------------------------

def model_config(bert_config_file, num_layers):
  with open(bert_config_file, encoding="utf-8") as f:
    fields = json.load(f)
  fields = {k: fields[k] for k in ("attention_probs_dropout_prob", "hidden_act",
                                   "hidden_dropout_prob", "hidden_size", "initializer_range",
                                   "intermediate_size", "max_position_embeddings",
                                   "num_attention_heads", "num_hidden_layers",
                                   "type_vocab_size", "vocab_size")}
  if num_layers:
    fields["num_hidden_layers"] = num_layers
  return fields


def _truncated_normal(rng, shape, stddev):
  """Draws as TF's truncated normal initializer: within 2 standard deviations."""
  values = rng.standard_normal(shape)
  while True:
    outside = np.abs(values) > 2
    if not outside.any():
      return (values * stddev).astype(np.float32)
    values[outside] = rng.standard_normal(int(outside.sum()))


def draw_weights(shapes, rng):
  """Weights like our initializers' (kernels and tables: truncated normal, std 0.02), except
  that biases and LayerNorm's beta are N(0, 0.02) and gamma 1 + N(0, 0.05) instead of 0 and
  1, so that a bias or LayerNorm parameter mapped wrongly cannot go unnoticed."""
  weights = {}
  for name, shape in sorted(shapes.items()):
    if name.endswith("/gamma"):
      weights[name] = (1 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
    elif name.endswith(("/beta", "bias")):
      weights[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
    else:
      weights[name] = _truncated_normal(rng, shape, 0.02)
  return weights


def head_shapes(kind, config, num_labels):
  """The head variables of `kind` and their shapes."""
  hidden, vocab = config["hidden_size"], config["vocab_size"]
  mlm = {"cls/predictions/transform/dense/kernel": [hidden, hidden],
         "cls/predictions/transform/dense/bias": [hidden],
         "cls/predictions/transform/LayerNorm/gamma": [hidden],
         "cls/predictions/transform/LayerNorm/beta": [hidden],
         "cls/predictions/output_bias": [vocab]}
  return {
      "classifier": {"output_weights": [num_labels, hidden], "output_bias": [num_labels]},
      "multi_label": {"multi_label/output_weights": [num_labels, hidden],
                      "multi_label/output_bias": [num_labels]},
      "ner": {"cls/ner/output_weights": [len(NER_TAGS), hidden],
              "cls/ner/output_bias": [len(NER_TAGS)]},
      "ner_crf": {"cls/ner/output_weights": [len(NER_TAGS), hidden],
                  "cls/ner/output_bias": [len(NER_TAGS)],
                  ner_model.CRF_TRANSITIONS: [len(NER_TAGS), len(NER_TAGS)]},
      "squad": {"cls/squad/output_weights": [2, hidden], "cls/squad/output_bias": [2]},
      "masked_lm": mlm,
      "pretraining": dict(mlm, **{"cls/seq_relationship/output_weights": [2, hidden],
                                  "cls/seq_relationship/output_bias": [2]}),
      "encoder": {},
  }[kind]


def _write_text(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def model_dir_files(kind, categories):
  """The files beside the checkpoint of a trained output_dir of `kind` (name -> text)."""
  if kind in ("classifier", "multi_label"):
    settings = classifier_serving.classifier_settings("tsv", True, MAX_SEQ_LENGTH)
    files = {"labels.txt": "".join(c + "\n" for c in categories)}
    if kind == "multi_label":
      settings["multi_label"] = True
      thresholds = [round(0.3 + 0.04 * i, 2) for i in range(len(categories))]
      files["thresholds.json"] = json.dumps({"labels": list(categories),
                                             "thresholds": thresholds, "source": "tuned"},
                                            ensure_ascii=False)
    files["model_settings.json"] = json.dumps(settings)
    return files
  if kind.startswith("ner"):
    settings = ner_serving.ner_settings(True, MAX_SEQ_LENGTH, MAX_SEQ_LENGTH // 2,
                                        kind == "ner_crf")
    return {"labels.txt": "".join(t + "\n" for t in NER_TAGS),
            "model_settings.json": json.dumps(settings)}
  return {}


def write_model_dirs(work_dir, config, vocab_file, categories, seed):
  """ours/<kind>: every head on one body; returns kind -> checkpoint prefix.

  The encoder's directory is laid out as Google's release (bert_model.ckpt, no `checkpoint`
  file); the others as a run script's output_dir (model.ckpt-1 and a `checkpoint` file,
  with an optimizer slot and global_step the converter must leave out)."""
  rng = np.random.default_rng(seed)
  # The converter's own list of BERT's variables (the pooler included).
  body = draw_weights(weight_names.body_shapes(config), rng)
  with open(vocab_file, encoding="utf-8") as f:
    vocab_text = f.read()
  prefixes = {}
  for kind in KINDS:
    directory = os.path.join(work_dir, "ours", kind)
    weights = dict(body, **draw_weights(head_shapes(kind, config, len(categories)), rng))
    if kind == "ner_crf":
      # Transitions of the logits' size (std 0.5), so that Viterbi differs from the argmax.
      weights[ner_model.CRF_TRANSITIONS] *= 25
    if kind == "encoder":
      prefix = os.path.join(directory, "bert_model.ckpt")
    else:
      prefix = os.path.join(directory, "model.ckpt-1")
      weights["global_step"] = np.array(1, np.int64)
      weights["bert/pooler/dense/bias/adam_m"] = np.zeros_like(weights["bert/pooler/dense/bias"])
    checkpoints.write_arrays(weights, prefix)
    if kind != "encoder":
      _write_text(os.path.join(directory, "checkpoint"),
                  'model_checkpoint_path: "model.ckpt-1"\n')
    files = model_dir_files(kind, categories)
    if kind not in WITHOUT_MODEL_FILES:
      files.update({"bert_config.json": json.dumps(config, indent=2), "vocab.txt": vocab_text})
    for name, text in files.items():
      _write_text(os.path.join(directory, name), text)
    prefixes[kind] = prefix
  return prefixes


# ---------------------------------------------------------------------------
# Running our models
# ---------------------------------------------------------------------------

def _placeholders():
  names = ("input_ids", "input_mask", "segment_ids", "tag_mask", "positions", "unique_ids")
  shapes = ([None, None],) * 4 + ([None, MASKED_POSITIONS], [None])
  return {n: tf.placeholder(tf.int32, s, name=n) for n, s in zip(names, shapes)}


def build_fetches(kind, bert_config, features, num_labels):
  """The tensors to fetch of `kind`'s model, built the way our task scripts build them."""
  if kind in ("classifier", "multi_label"):
    outputs = classifier_model.create_model_fn(bert_config, num_labels,
                                               kind == "multi_label")(features, False)
    probabilities = outputs["probabilities"]
    return {"probabilities": probabilities, "logits": probabilities.op.inputs[0]}
  if kind.startswith("ner"):
    outputs = ner_model.create_model_fn(bert_config, len(NER_TAGS),
                                        kind == "ner_crf")(features, False)
    return {"probabilities": outputs["probabilities"],
            "logits": outputs["probabilities"].op.inputs[0], "tag_ids": outputs["tag_ids"]}
  if kind == "squad":
    outputs = squad_model.create_model_fn(bert_config)(features, False)
    return {"start_logits": outputs["start_logits"], "end_logits": outputs["end_logits"]}
  model = modeling.BertModel(config=bert_config, is_training=False,
                             input_ids=features["input_ids"], input_mask=features["input_mask"],
                             token_type_ids=features["segment_ids"])
  if kind == "encoder":
    return {"sequence_output": model.get_sequence_output(),
            "pooled_output": model.get_pooled_output()}
  fetches = {"mlm_log_probs": pretraining_model.masked_lm_log_probs(
      bert_config, model.get_sequence_output(), model.get_embedding_table(),
      features["positions"])}
  if kind == "pretraining":
    _, label_log_probs, _ = pretraining_model.next_sentence_head(
        bert_config, model.get_pooled_output(), tf.zeros_like(features["unique_ids"]))
    # label_log_probs = sum(one_hot * log_probs): the head's log-softmax is the product's input.
    log_probs = [t for t in label_log_probs.op.inputs[0].op.inputs
                 if t.op.type == "LogSoftmax"][0]
    fetches.update(nsp_log_probs=log_probs, nsp_logits=log_probs.op.inputs[0])
  return fetches


# Outputs with one value (or vector) per position, padded back to MAX_SEQ_LENGTH.
PER_POSITION = ("sequence_output", "logits", "probabilities", "tag_ids", "start_logits",
                "end_logits")


def _pad_axis1(array, length):
  widths = [(0, 0), (0, length - array.shape[1])] + [(0, 0)] * (array.ndim - 2)
  return np.pad(array, widths)


def run_model(kind, checkpoint, bert_config, inputs, prefix, num_labels, threads):
  """Our model of `kind` on inputs[prefix + "_ids"...] in batches of BATCH_SIZE, each cut to
  its longest row; per-position outputs padded back to MAX_SEQ_LENGTH (zeros)."""
  masked_lm = kind in ("masked_lm", "pretraining")
  ids = inputs[prefix + ("_masked_ids" if masked_lm else "_ids")]
  mask, types = inputs[prefix + "_mask"], inputs[prefix + "_types"]
  tag_mask = mask.copy()
  tag_mask[:, 0] = 0
  tag_mask[np.arange(len(mask)), mask.sum(axis=1) - 1] = 0  # [CLS] and [SEP] carry no tag
  results = {}
  with tf.Graph().as_default():
    features = _placeholders()
    fetches = build_fetches(kind, bert_config, features, num_labels)
    # A converted BertForMaskedLM has no pooler, which the masked LM never reads.
    stored = {name for name, _ in tf.train.list_variables(checkpoint)}
    absent = [v.op.name for v in tf.global_variables() if v.op.name not in stored]
    if [name for name in absent if not name.startswith("bert/pooler/")]:
      sys.exit("%s lacks %s" % (checkpoint, absent))
    saver = tf.train.Saver([v for v in tf.global_variables() if v.op.name in stored])
    session_config = tf.ConfigProto(intra_op_parallelism_threads=threads,
                                    inter_op_parallelism_threads=1)
    with tf.Session(config=session_config) as sess:
      sess.run(tf.global_variables_initializer())
      saver.restore(sess, checkpoint)
      for start in range(0, len(ids), BATCH_SIZE):
        rows = slice(start, start + BATCH_SIZE)
        length = int(mask[rows].sum(axis=1).max())
        feed = {features["input_ids"]: ids[rows, :length],
                features["input_mask"]: mask[rows, :length],
                features["segment_ids"]: types[rows, :length],
                features["tag_mask"]: tag_mask[rows, :length],
                features["positions"]: inputs[prefix + "_positions"][rows],
                features["unique_ids"]: np.arange(len(ids))[rows].astype(np.int32)}
        for name, value in sess.run(fetches, feed).items():
          if masked_lm and name == "mlm_log_probs":
            value = value.reshape([-1, MASKED_POSITIONS, value.shape[-1]])
          if name in PER_POSITION and kind not in ("classifier", "multi_label"):
            value = _pad_axis1(value, MAX_SEQ_LENGTH)
          results.setdefault(name, []).append(value)
  return {name: np.concatenate(values) for name, values in results.items()}


def run_script(args, command, log_path):
  """Runs one of our commands; writes its output to log_path; exits on failure."""
  start = time.time()
  result = subprocess.run([args.tf_python] + command, cwd=ROOT, capture_output=True,
                          text=True, timeout=900,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  _write_text(log_path, "$ %s\n%s%s" % (" ".join(command), result.stdout, result.stderr))
  if result.returncode:
    sys.exit("%s failed (see %s):\n%s" % (command[0], log_path, result.stderr[-2000:]))
  return time.time() - start


def log_lines(log_path):
  """The lines of TF's logger in a command's output, but the timing lines."""
  with open(log_path, encoding="utf-8") as f:
    return [line.rstrip() for line in f if re.match(r"^(INFO|WARNING|ERROR):tensorflow:", line)
            and not re.match(r"^INFO:tensorflow:( |Where the job)", line)]


def export(args):
  """ours -> transformers (see the module docstring)."""
  work_dir = args.work_dir
  for name in ("ours_outputs", "convert_logs"):
    os.makedirs(os.path.join(work_dir, name), exist_ok=True)
  config = model_config(args.bert_config_file, args.num_layers)
  waimai = read_reviews(args.waimai_csv, 1)
  shopping = read_reviews(args.shopping_csv, 2)
  with open(args.shopping_csv, encoding="utf-8", newline="") as f:
    categories = sorted({row[0] for row in list(csv.reader(f))[1:] if row})
  chosen = choose_texts(waimai, shopping, args.texts_per_source, args.seed)
  tokenizer = tokenization.FullTokenizer(args.vocab_file, do_lower_case=True)
  start = time.time()
  all_texts = waimai + shopping
  texts_json = {"model_texts": chosen, "model_ids": our_ids(tokenizer, [c["text"] for c in
                                                                         chosen]),
                "all_texts": all_texts, "all_ids": our_ids(tokenizer, all_texts),
                "config": config, "categories": categories, "ner_tags": list(NER_TAGS)}
  print("tokenized %d texts in %.1f s" % (len(all_texts) + len(chosen), time.time() - start))
  with open(os.path.join(work_dir, "texts.json"), "w", encoding="utf-8") as f:
    json.dump(texts_json, f, ensure_ascii=False)
  inputs = make_inputs(tokenizer, [c["text"] for c in chosen], args.seed)
  np.savez(os.path.join(work_dir, "inputs.npz"), **inputs)
  prefixes = write_model_dirs(work_dir, config, args.vocab_file, categories, args.seed)
  bert_config = modeling.BertConfig.from_dict(config)
  with open(os.path.join(work_dir, "ours", "bert_config.json"), "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
  for kind in KINDS:
    start = time.time()
    outputs = run_model(kind, prefixes[kind], bert_config, inputs,
                        "pair" if kind in PAIR_KINDS else "single", len(categories),
                        args.threads)
    np.savez(os.path.join(work_dir, "ours_outputs", kind + ".npz"), **outputs)
    command = ["convert_checkpoint.py", "--to=transformers",
               "--input=" + os.path.join(work_dir, "ours", kind),
               "--output=" + os.path.join(work_dir, "hf", kind)]
    if kind in WITHOUT_MODEL_FILES:
      command += ["--bert_config_file=" + os.path.join(work_dir, "ours", "bert_config.json"),
                  "--vocab_file=" + args.vocab_file]
    log_path = os.path.join(work_dir, "convert_logs", kind + ".txt")
    seconds = run_script(args, command, log_path)
    print("%-12s ours %.1f s, convert %.1f s" % (kind, time.time() - start - seconds, seconds))
    for line in log_lines(log_path):
      print("    " + line)


def import_models(args):
  """transformers -> ours (see the module docstring)."""
  work_dir = args.work_dir
  saved = os.path.join(work_dir, "hf_saved")
  inputs = dict(np.load(os.path.join(saved, "inputs.npz")))
  os.makedirs(os.path.join(work_dir, "tf_outputs"), exist_ok=True)
  os.makedirs(os.path.join(work_dir, "convert_logs"), exist_ok=True)
  for name in SAVED_NAMES:
    output = os.path.join(work_dir, "tf", name)
    command = ["convert_checkpoint.py", "--to=tensorflow",
               "--input=" + os.path.join(saved, name), "--output=" + output]
    if name == "cls":
      command.append("--keep_head")
    log_path = os.path.join(work_dir, "convert_logs", "to_tf_%s.txt" % name)
    if os.path.isdir(output):
      print("%-10s converted before (%s)" % (name, output))
    else:
      print("%-10s convert %.1f s" % (name, run_script(args, command, log_path)))
    for line in log_lines(log_path):
      print("    " + line)
    if name == "cls":
      predict_output = os.path.join(work_dir, "tf_outputs", "cls_predict.tsv")
      seconds = run_script(args, ["predict_text.py", "--output_dir=" + output,
                                  "--input_file=" + os.path.join(saved, "cls_texts.txt"),
                                  "--output_file=" + predict_output, "--n_gpus=1"],
                           os.path.join(work_dir, "convert_logs", "predict_cls.txt"))
      print("%-10s predict_text.py %.1f s" % (name, seconds))
      continue
    with open(os.path.join(output, "bert_config.json"), encoding="utf-8") as f:
      bert_config = modeling.BertConfig.from_dict(json.load(f))
    kind = "masked_lm" if name == "mlm" else "encoder"
    start = time.time()
    outputs = run_model(kind, os.path.join(output, "bert_model.ckpt"), bert_config, inputs,
                        "single", 0, args.threads)
    np.savez(os.path.join(work_dir, "tf_outputs", name + ".npz"), **outputs)
    print("%-10s ours %.1f s" % (name, time.time() - start))


def main():
  args = parse_args()
  tf.logging.set_verbosity(tf.logging.ERROR)
  if args.command == "export":
    for flag in ("bert_config_file", "vocab_file", "waimai_csv", "shopping_csv"):
      if not getattr(args, flag):
        sys.exit("export needs --%s" % flag)
    export(args)
  else:
    import_models(args)


if __name__ == "__main__":
  main()
