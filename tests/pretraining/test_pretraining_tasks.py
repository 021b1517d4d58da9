# coding=utf-8
"""Tests of create_pretraining_data.py --pretraining_task=mlm|pair_span and of
run_pretraining_mgpu.py on what the records hold (MLM-only training, loading init
checkpoints with and without the next-sentence head).

Records are read back and checked against the corpus the test wrote; training runs a
tiny BERT for a few steps on two towers (logical CPU devices without a GPU).
"""

import json
import logging
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from bert_mgpu.errors import UsageError
from bert_mgpu.pretraining import data_settings
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.pretraining import pipeline
from bert_mgpu.pretraining import records as pretraining_data
from bert_mgpu.pretraining import task as pretraining_task
import modeling

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = list("今天气很好我们去公园玩北京是首都的人民爱中国")
VOCAB = SPECIAL + CHARS + ["w%d" % i for i in range(12)] + ["un", "##able"]
IDS = {token: index for index, token in enumerate(VOCAB)}
MAX_SEQ_LENGTH = 24
MAX_PREDICTIONS = 5
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
    "hidden_size": 16, "initializer_range": 0.02, "intermediate_size": 32,
    "max_position_embeddings": 32, "num_attention_heads": 2, "num_hidden_layers": 1,
    "type_vocab_size": 2, "vocab_size": len(VOCAB),
}


def write(path, text):
  with open(str(path), "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


def vocab_file(tmp_path):
  return write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")


def read_features(path):
  """Each record as dict name -> list of values."""
  records = []
  for record in tf.io.tf_record_iterator(path):
    example = tf.train.Example.FromString(record)
    records.append({name: list(getattr(feature, feature.WhichOneof("kind")).value)
                    for name, feature in example.features.feature.items()})
  return records


def run_cpd(tmp_path, text, name, **settings):
  """Runs the pipeline in-process on `text`; returns (output path, CorpusStats)."""
  output = str(tmp_path / (name + ".tfrecord"))
  base_settings = data_settings.DataSettings(
      input_file=write(tmp_path / (name + ".txt"), text), output_file=output,
      vocab_file=vocab_file(tmp_path), max_seq_length=MAX_SEQ_LENGTH,
      max_predictions_per_seq=MAX_PREDICTIONS, dupe_factor=3)
  return output, pipeline.create_pretraining_data(base_settings._replace(**settings))


def unmasked(record):
  """The original ids of a record's real tokens (masked positions put back)."""
  n = sum(record["input_mask"])
  ids = list(record["input_ids"][:n])
  for position, label, weight in zip(record["masked_lm_positions"], record["masked_lm_ids"],
                                     record["masked_lm_weights"]):
    if weight:
      ids[position] = label
  return ids


# ---------------------------------------------------------------------------
# mlm
# ---------------------------------------------------------------------------

MLM_CORPUS = ("w0 w1 w2 w3\nw4 w5 w6\nw7 w8 w9 w10\nw11 w0 w1\nw2 w3 w4 w5 w6 w7\n\n"
              "w8 w9\nw10 w11 w0 w1 w2\n\n" + "\n".join(["w3 w4 w5 w6 w7 w8"] * 6) + "\n")


def test_mlm_records_are_single_segments_of_consecutive_sentences(tmp_path):
  path, stats = run_cpd(tmp_path, MLM_CORPUS, "mlm", pretraining_task="mlm",
                        short_seq_prob=0.0)
  records = read_features(path)
  assert stats.instances == len(records) > 3
  sentences = [line for line in MLM_CORPUS.splitlines() if line]
  corpus_ids = [IDS[w] for line in sentences for w in line.split()]
  for record in records:
    assert "next_sentence_labels" not in record
    assert sorted(record) == sorted(["input_ids", "input_mask", "segment_ids",
                                     "masked_lm_positions", "masked_lm_ids",
                                     "masked_lm_weights"])
    ids = unmasked(record)
    assert ids[0] == IDS["[CLS]"] and ids[-1] == IDS["[SEP]"] and len(ids) <= MAX_SEQ_LENGTH
    assert IDS["[SEP]"] not in ids[1:-1]
    assert not any(record["segment_ids"])
    body = ids[1:-1]
    # Consecutive text of the corpus: the body occurs as one run.
    assert any(corpus_ids[i:i + len(body)] == body for i in range(len(corpus_ids)))
    count = int(sum(record["masked_lm_weights"]))
    assert count == min(MAX_PREDICTIONS, max(1, int(round(len(ids) * 0.15))))
  # The long third document gives more than one instance per pass.
  assert len(records) >= 3 * 4


def test_mlm_whole_word_masking_masks_whole_words(tmp_path):
  corpus = "\n\n".join("w%d unable w%d unable w%d" % (i, i + 1, i + 2)
                       for i in range(8)) + "\n"
  path, _ = run_cpd(tmp_path, corpus, "wwm", pretraining_task="mlm", do_whole_word_mask=True,
                    masked_lm_prob=0.5, dupe_factor=6)
  checked = 0
  for record in read_features(path):
    ids = unmasked(record)
    positions = set(p for p, w in zip(record["masked_lm_positions"],
                                      record["masked_lm_weights"]) if w)
    for i, token in enumerate(ids):
      if token == IDS["un"] and i + 1 < len(ids):
        assert (i in positions) == (i + 1 in positions)  # "un ##able" together
        checked += 1
  assert checked > 10


def test_mlm_same_seed_same_bytes(tmp_path):
  first, _ = run_cpd(tmp_path, MLM_CORPUS, "a", pretraining_task="mlm")
  second, _ = run_cpd(tmp_path, MLM_CORPUS, "b", pretraining_task="mlm")
  other, _ = run_cpd(tmp_path, MLM_CORPUS, "c", pretraining_task="mlm", random_seed=1)
  with open(first, "rb") as f, open(second, "rb") as g, open(other, "rb") as h:
    a, b, c = f.read(), g.read(), h.read()
  assert a == b and a != c


# ---------------------------------------------------------------------------
# pair_span
# ---------------------------------------------------------------------------

PAIRS = [
    ("1", "p1", "很好", "今天天气\u201c\u201c我们去公园"),
    ("0", "p2", "北京", "我们[MASK]玩"),
    ("1", "p3", "中国人民", "我爱\u201c首都"),  # a longer than the blank run: 4 [MASK]
    ("0", "p4", "天气", "北京是中国的首都"),  # no blank
]


def pair_text(rows):
  return "".join("\t".join(row) + "\n" for row in rows)


def test_pair_span_layout_span_and_labels(tmp_path):
  path, stats = run_cpd(tmp_path, pair_text(PAIRS), "pairs", pretraining_task="pair_span",
                        dupe_factor=20)
  records = read_features(path)
  assert len(records) == stats.instances == 20 * len(PAIRS)
  seen = {}
  for record in records:
    ids = unmasked(record)
    first_sep = ids.index(IDS["[SEP]"])
    a = ids[1:first_sep]
    b = ids[first_sep + 1:-1]
    row = next(r for r in PAIRS if [IDS[c] for c in r[2]] == a)
    before, _, after = row[3].replace("[MASK]", "\u201c").partition("\u201c")
    after = after.lstrip("\u201c")
    expected_b = ([IDS[c] for c in before] + [IDS["[MASK]"]] * len(a) + [IDS[c] for c in after]
                  if "\u201c" in row[3] or "[MASK]" in row[3] else [IDS[c] for c in row[3]])
    assert b == expected_b
    n = len(ids)
    assert record["segment_ids"][:n] == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
    assert record["next_sentence_labels"] == [1 - int(row[0])]
    count = int(sum(record["masked_lm_weights"]))
    positions = record["masked_lm_positions"][:count]
    assert count == min(len(a), MAX_PREDICTIONS, len(b))
    assert positions == list(range(positions[0], positions[0] + count))  # contiguous
    assert first_sep < positions[0] and positions[-1] < n - 1  # inside b
    seen.setdefault(row[1], set()).add(positions[0])
  assert all(len(starts) > 1 for name, starts in seen.items())  # random starts


def test_pair_span_truncates_b_keeping_the_blank_and_skips_long_a(tmp_path):
  long_b = "今天" * 10 + "\u201c" + "我们"
  rows = [("1", "x", "很好", long_b), ("1", "y", "北京是中国的首都" * 3, "我\u201c")]
  path, stats = run_cpd(tmp_path, pair_text(rows), "trunc", pretraining_task="pair_span")
  records = read_features(path)
  assert stats.skipped_pairs == 1 and len(records) == 3
  for record in records:
    ids = unmasked(record)
    assert len(ids) == MAX_SEQ_LENGTH
    assert ids[-5:-1] == [IDS["[MASK]"]] * 2 + [IDS["我"], IDS["们"]]


def test_pair_span_same_seed_same_bytes_with_workers(tmp_path):
  text = pair_text(PAIRS * 5)
  outputs = [run_cpd(tmp_path, text, name, pretraining_task="pair_span", num_workers=2)[0]
             for name in ("a", "b")]
  with open(outputs[0], "rb") as f, open(outputs[1], "rb") as g:
    assert f.read() == g.read()


@pytest.mark.parametrize("row,fragment", [
    ("1\tx\ta", "3 tab-separated field(s), expected 4"),
    ("label\tid\ta\tb", "label 'label'"),
    ("1\tx\t \t好\u201c", "text_a is empty"),
    ("1\tx\t好\t我\u201c们\u201c", "2 blanks"),
    ("1\tx\t好\t我[MASK]们\u201c", "2 blanks"),
])
def test_pair_span_bad_rows_name_the_line(tmp_path, row, fragment):
  text = pair_text(PAIRS[:1]) + row + "\n"
  with pytest.raises(UsageError) as error:
    run_cpd(tmp_path, text, "bad", pretraining_task="pair_span")
  assert "bad.txt line 2" in str(error.value) and fragment in str(error.value)
  assert not os.path.exists(str(tmp_path / "bad.tfrecord"))


def test_pair_span_refuses_whole_word_masking_and_a_bad_marker(tmp_path):
  with pytest.raises(UsageError, match="do_whole_word_mask"):
    run_cpd(tmp_path, pair_text(PAIRS), "w", pretraining_task="pair_span",
            do_whole_word_mask=True)
  with pytest.raises(UsageError, match="blank_marker"):
    run_cpd(tmp_path, pair_text(PAIRS), "m", pretraining_task="pair_span", blank_marker=" ")


def test_other_blank_marker(tmp_path):
  rows = [("1", "x", "很好", "今天__天气")]
  path, _ = run_cpd(tmp_path, pair_text(rows), "u", pretraining_task="pair_span",
                    blank_marker="_")
  ids = unmasked(read_features(path)[0])
  assert ids[4:8] == [IDS["今"], IDS["天"], IDS["[MASK]"], IDS["[MASK]"]]


# ---------------------------------------------------------------------------
# run_pretraining_mgpu.py on MLM-only records
# ---------------------------------------------------------------------------

def save_checkpoint(path, next_sentence, masked_lm=True):
  """A random tiny checkpoint: BERT, the masked-LM head unless told, and the NSP head."""
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  with tf.Graph().as_default():
    spec = pretraining_data.input_feature_spec(MAX_SEQ_LENGTH, MAX_PREDICTIONS,
                                                   next_sentence)
    features = {name: tf.zeros([2] + s.shape, tf.float32 if s.dtype == tf.float32
                               else tf.int32) for name, s in spec.items()}
    pretraining_model.create_model_fn(config, next_sentence)(features, False)
    variables = [v for v in tf.global_variables()
                 if masked_lm or not v.op.name.startswith("cls/predictions")]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver(variables).save(sess, path)
  return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
  root = tmp_path_factory.mktemp("tasks")
  config_file = write(root / "bert_config.json", json.dumps(TINY_CONFIG))
  mlm_data, _ = run_cpd(root, MLM_CORPUS * 3, "mlm_data", pretraining_task="mlm")
  pair_data, _ = run_cpd(root, pair_text(PAIRS * 4), "pair_data", pretraining_task="pair_span")
  return {"root": root, "config_file": config_file, "mlm_data": mlm_data,
          "pair_data": pair_data,
          "nsp_init": save_checkpoint(str(root / "nsp_init" / "model.ckpt"), True)}


def run_pretraining(ws, output_dir, input_file, *args):
  return cli.run_script("run_pretraining_mgpu.py", [
      "--bert_config_file=" + ws["config_file"], "--input_file=" + input_file,
      "--output_dir=" + output_dir, "--max_seq_length=%d" % MAX_SEQ_LENGTH,
      "--max_predictions_per_seq=%d" % MAX_PREDICTIONS, "--train_batch_size=4",
      "--eval_batch_size=8", "--max_eval_steps=2", "--num_warmup_steps=1",
      "--save_checkpoints_steps=100"] + list(args))


def checkpoint_names(output_dir):
  latest = tf.train.latest_checkpoint(output_dir)
  return set(tf.train.load_checkpoint(latest).get_variable_to_shape_map())


@pytest.fixture(scope="module")
def mlm_trained(workspace):
  """MLM-only training on two towers, from a checkpoint that has the NSP head."""
  output_dir = str(workspace["root"] / "mlm_out")
  result = run_pretraining(workspace, output_dir, workspace["mlm_data"], "--do_train",
                           "--do_eval", "--n_gpus=2", "--num_train_steps=4",
                           "--init_checkpoint=" + workspace["nsp_init"])
  cli.assert_succeeded(result)
  return {"output_dir": output_dir, "log": result.stderr}


def test_mlm_only_training_has_no_nsp_head(mlm_trained):
  names = checkpoint_names(mlm_trained["output_dir"])
  assert "cls/predictions/output_bias" in names
  assert "bert/embeddings/word_embeddings" in names
  assert not any(name.startswith("cls/seq_relationship") for name in names)
  with open(os.path.join(mlm_trained["output_dir"], "eval_results.txt")) as f:
    keys = [line.split(" = ")[0] for line in f.read().splitlines()]
  assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"]
  log = mlm_trained["log"]
  assert "training the masked LM alone" in log
  assert "the masked-LM head (cls/predictions) is loaded from it" in log
  assert "next-sentence head (cls/seq_relationship) is not used" in log


def test_nsp_training_from_an_mlm_only_checkpoint(workspace, mlm_trained):
  """pair_span records train the NSP head; the MLM-only checkpoint loads, the head is new."""
  output_dir = str(workspace["root"] / "pair_out")
  init = tf.train.latest_checkpoint(mlm_trained["output_dir"])
  result = run_pretraining(workspace, output_dir, workspace["pair_data"], "--do_train",
                           "--num_train_steps=2", "--init_checkpoint=" + init)
  cli.assert_succeeded(result)
  assert ("the next-sentence head (cls/seq_relationship) is not in it: initialised fresh"
          in result.stderr)
  assert "cls/seq_relationship/output_weights" in result.stderr  # the runner's list
  assert "cls/seq_relationship/output_weights" in checkpoint_names(output_dir)


def test_mixed_input_files_are_refused(workspace):
  output_dir = str(workspace["root"] / "mixed_out")
  result = run_pretraining(workspace, output_dir,
                           workspace["mlm_data"] + "," + workspace["pair_data"], "--do_train",
                           "--num_train_steps=2")
  cli.assert_one_line_error(result, "holds next_sentence_labels but", "does not")
  assert not os.path.exists(output_dir)


def test_init_checkpoint_without_masked_lm_head_is_reported(workspace, caplog):
  path = save_checkpoint(str(workspace["root"] / "no_mlm" / "model.ckpt"), False,
                         masked_lm=False)
  logger = logging.getLogger("tensorflow")
  logger.addHandler(caplog.handler)
  try:
    with caplog.at_level(logging.INFO, logger="tensorflow"):
      pretraining_task.describe_init_checkpoint(path, next_sentence=False)
  finally:
    logger.removeHandler(caplog.handler)
  text = caplog.text
  assert "has no masked-LM head (cls/predictions)" in text
  assert "the encoder (bert/) is loaded from it" in text


def test_mlm_only_metrics_and_model_variables():
  outputs = {"masked_lm_weights": np.array([[1.0, 0.0]]),
             "masked_lm_log_probs": np.array([[-2.0, -9.0]]),
             "masked_lm_predictions": np.array([[3, 1]]), "masked_lm_ids": np.array([[3, 0]])}
  assert pretraining_data.pretraining_metrics(outputs) == {
      "masked_lm_accuracy": 1.0, "masked_lm_loss": 2.0, "loss": 2.0}
