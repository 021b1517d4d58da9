# coding=utf-8
"""Tests of fill_mask.py (top-k fills and candidate scores against a NumPy forward pass of
BERT and its masked-LM head on a tiny model, on two towers) and of the tokenizer's literal
special tokens."""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
import fill_mask
import modeling
import numpy_bert
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import model as pretraining_model
import tokenization

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = SPECIAL + list("今天气很好我们去公园玩北京是首都的中国") + ["hello", "world", "un", "##able"]
CONFIG = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
    "hidden_size": 16, "initializer_range": 0.5, "intermediate_size": 32,
    "max_position_embeddings": 32, "num_attention_heads": 2, "num_hidden_layers": 2,
    "type_vocab_size": 2, "vocab_size": len(VOCAB),
}
TOP_K = 3
FILL_LINES = [
    "今天天[MASK]很好",
    "[MASK]们去公园[MASK]",
    "Hello [MASK]",
    "北京[SEP]是中国的首[MASK]",
    "好",  # replaced below: every line needs a mask
]
FILL_LINES[-1] = "我们去[MASK]"
CANDIDATE_LINES = [
    "今天天气\u201c\u201c\t很好|好|首都的",
    "我们去[MASK]玩\t公园|北京|un",
    "\u201c是首都\t北京|今天",
]


def write(path, text):
  with open(str(path), "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """A random tiny BERT with its masked-LM head, saved as a pretraining output_dir."""
  root = tmp_path_factory.mktemp("fill")
  config = modeling.BertConfig.from_dict(CONFIG)
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    features = {name: tf.zeros([1, 4], tf.int32) for name in (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids")}
    features["masked_lm_weights"] = tf.zeros([1, 4])
    pretraining_model.create_model_fn(config, next_sentence=False)(features, False)
    variables = tf.global_variables()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run({v.op.name: v for v in variables})
      tf.train.Saver().save(sess, str(root / "pretrain" / "model.ckpt"), global_step=7)
      # Without the masked-LM head: BERT alone.
      tf.train.Saver([v for v in variables if v.op.name.startswith("bert/")]).save(
          sess, str(root / "encoder_only" / "model.ckpt"))
  return {"root": root, "config": config, "weights": values,
          "config_file": write(root / "bert_config.json", json.dumps(CONFIG)),
          "vocab_file": write(root / "vocab.txt", "\n".join(VOCAB) + "\n"),
          "output_dir": str(root / "pretrain")}


def numpy_log_probs(model, tokens):
  """Log-probabilities [len(tokens), vocab] of the masked-LM head at every position."""
  w = {k: np.asarray(v, np.float64) for k, v in model["weights"].items()}
  ids = [VOCAB.index(t) for t in tokens]
  first_sep = tokens.index("[SEP]")
  segments = [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
  out = numpy_bert.bert_forward(model["weights"], model["config"], np.array([ids]),
                                np.ones([1, len(ids)]), np.array([segments]))
  h = out["sequence_output"][0]
  h = numpy_bert.gelu_exact(h @ w["cls/predictions/transform/dense/kernel"] +
                            w["cls/predictions/transform/dense/bias"])
  h = numpy_bert.layer_norm(h, w["cls/predictions/transform/LayerNorm/gamma"],
                            w["cls/predictions/transform/LayerNorm/beta"])
  logits = h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  top = logits.max(axis=-1, keepdims=True)
  return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def tokens_of(text):
  """The test's own tokenization of its lines: characters, words, literal specials."""
  tokens = ["[CLS]"]
  rest = text
  while rest:
    special = next((s for s in SPECIAL if rest.startswith(s)), None)
    if special:
      tokens.append(special)
      rest = rest[len(special):]
    elif rest[0] == " ":
      rest = rest[1:]
    elif rest[0].isascii():
      word = rest.split(" ")[0].split("[")[0]
      tokens.append(word.lower())
      rest = rest[len(word):]
    else:
      tokens.append(rest[0])
      rest = rest[1:]
  return tokens + ["[SEP]"]


def run_fill_mask(model, tmp_path, lines, *args):
  input_file = write(tmp_path / "in.txt", "\n".join(lines) + "\n")
  output_file = str(tmp_path / "out" / "fills.jsonl")
  result = cli.run_script("fill_mask.py", [
      "--bert_config_file=" + model["config_file"], "--vocab_file=" + model["vocab_file"],
      "--input_file=" + input_file, "--output_file=" + output_file, "--max_seq_length=24",
      "--n_gpus=2", "--batch_size=1"] + list(args))
  return result, output_file


def test_top_k_fills_match_numpy(model, tmp_path):
  result, output_file = run_fill_mask(
      model, tmp_path, FILL_LINES, "--top_k=%d" % TOP_K,
      "--init_checkpoint=" + os.path.join(model["output_dir"], "model.ckpt-7"))
  cli.assert_succeeded(result)
  with open(output_file, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  assert [r["text"] for r in records] == FILL_LINES
  for line, record in zip(FILL_LINES, records):
    tokens = tokens_of(line)
    log_probs = numpy_log_probs(model, tokens)
    positions = [i for i, t in enumerate(tokens) if t == "[MASK]"]
    assert [m["position"] for m in record["masks"]] == positions
    for mask in record["masks"]:
      expected = np.argsort(-log_probs[mask["position"]])[:TOP_K]
      assert [f["token"] for f in mask["fills"]] == [VOCAB[i] for i in expected]
      np.testing.assert_allclose([f["probability"] for f in mask["fills"]],
                                 np.exp(log_probs[mask["position"], expected]), atol=1e-5)


def test_candidate_scores_match_numpy(model, tmp_path):
  # A pretraining output_dir: its latest checkpoint.
  result, output_file = run_fill_mask(model, tmp_path, CANDIDATE_LINES, "--candidates",
                                      "--init_checkpoint=" + model["output_dir"])
  cli.assert_succeeded(result)
  with open(output_file, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  for line, record in zip(CANDIDATE_LINES, records):
    text, candidates = line.split("\t")
    assert record["text"] == text
    expected = {}
    for candidate in candidates.split("|"):
      pieces = [candidate] if candidate == "un" else list(candidate)
      filled = text.replace("\u201c\u201c", "\u201c").replace("[MASK]", "\u201c").replace(
          "\u201c", "[MASK]" * len(pieces))
      tokens = tokens_of(filled)
      log_probs = numpy_log_probs(model, tokens)
      first = tokens.index("[MASK]")
      expected[candidate] = sum(log_probs[first + j, VOCAB.index(p)]
                                for j, p in enumerate(pieces))
    got = [(c["candidate"], c["score"]) for c in record["candidates"]]
    assert [c for c, _ in got] == sorted(expected, key=lambda c: -expected[c])
    for candidate, score in got:
      assert score == pytest.approx(expected[candidate], abs=1e-4)


def test_checkpoint_without_masked_lm_head_is_one_line_error(model, tmp_path):
  result, output_file = run_fill_mask(
      model, tmp_path, FILL_LINES,
      "--init_checkpoint=" + str(model["root"] / "encoder_only" / "model.ckpt"))
  cli.assert_one_line_error(result, "has no masked-LM head (cls/predictions)")
  assert not os.path.exists(output_file)


@pytest.fixture(scope="module")
def tokenizer(model):
  tok = tokenization.FullTokenizer(model["vocab_file"], do_lower_case=True,
                                   literal_special_tokens=True)
  return tok


def read(tokenizer, tmp_path, lines, candidates=False, raw=None):
  path = str(tmp_path / "lines.txt")
  if raw is not None:
    with open(path, "wb") as f:
      f.write(raw)
  else:
    write(path, "\n".join(lines) + "\n")
  return fill_mask.read_examples(path, tokenizer, 16, candidates, "\u201c")


@pytest.mark.parametrize("lines,candidates,fragment", [
    (["今天[MASK]", "今天很好"], False, "line 2: no [MASK]"),
    (["今天很好\t好"], True, "line 1: no blank"),
    (["今天[MASK]\t好||很"], True, "line 1: candidate 2 ('') is empty"),
    (["今天[MASK]\t好| |很"], True, "line 1: candidate 2 (' ') is empty"),
    (["今天[MASK]好"], True, "line 1: 1 tab-separated field(s), expected 2"),
    (["今\u201c天[MASK]\t好"], True, "line 1: the text holds 2 blanks"),
    (["[MASK]" + "好" * 20], False, "line 1: 23 word pieces"),
    (["好[MASK]", ""], False, "line 2 is empty"),
])
def test_bad_input_names_the_line(tokenizer, tmp_path, lines, candidates, fragment):
  with pytest.raises(UsageError) as error:
    read(tokenizer, tmp_path, lines, candidates)
  assert "lines.txt" in str(error.value) and fragment in str(error.value)


def test_undecodable_bytes_name_the_line(tokenizer, tmp_path):
  with pytest.raises(UsageError, match="line 2.*not valid UTF-8"):
    read(tokenizer, tmp_path, None, raw="好[MASK]\n".encode("utf-8") + b"\xff[MASK]\n")


def test_batches_are_padded_to_their_longest():
  examples = [fill_mask.Example(0, [2, 5, 4, 3], [0] * 4, [2], []),
              fill_mask.Example(1, [2, 5, 4, 4, 6, 3], [0] * 6, [2, 3], [])]
  batch = fill_mask.pad_examples(examples, 1, 24)
  assert batch["input_ids"].shape == (2, 6) and batch["mask_positions"].shape == (2, 2)
  assert batch["input_mask"][0].tolist() == [1] * 4 + [0] * 2
  assert fill_mask.pad_examples(examples, 8, 24)["input_ids"].shape == (2, 8)
  assert fill_mask.pad_examples(examples, None, 24)["input_ids"].shape == (2, 24)


# ---------------------------------------------------------------------------
# The tokenizer's literal special tokens
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("literal,text,pieces", [
    (True, "天[MASK]好", ["天", "[MASK]", "好"]),
    (True, "Hello [MASK] [mask] [SEP]world [UNK]", ["hello", "[MASK]", "[UNK]", "[UNK]",
                                                   "[UNK]", "[SEP]", "world", "[UNK]"]),
    (False, "天[MASK]好", ["天", "[UNK]", "[UNK]", "[UNK]", "好"]),
    (False, "hello [SEP]", ["hello", "[UNK]", "[UNK]", "[UNK]"]),
])
def test_literal_special_tokens_kept_or_split(model, literal, text, pieces):
  tok = tokenization.FullTokenizer(model["vocab_file"], do_lower_case=True,
                                   literal_special_tokens=literal)
  # This vocab has no "[", "]", "mask" or "sep": split, each becomes [UNK].
  assert tok.tokenize(text) == pieces
  got, starts, ends = tok.tokenize_with_offsets(text)
  assert got == pieces
  if literal:
    for piece, start, end in zip(got, starts, ends):
      if piece in ("[MASK]", "[SEP]"):
        assert text[start:end] == piece


def test_literal_special_tokens_default_off(model):
  assert not tokenization.FullTokenizer(model["vocab_file"]).literal_special_tokens
