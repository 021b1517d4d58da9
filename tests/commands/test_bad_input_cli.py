# coding=utf-8
"""Bad input that used to end in a Python traceback, or to be read silently wrong, at
the command line: each case must now stop with one `error: ...` line, before training.

Every case runs a script as a subprocess (tests/helpers/cli.py) on a few hand-written
rows and a BERT with hidden size 16, so the whole file takes seconds; the runs go in
parallel. Where the old code did not fail at all (rows merged, a question trained without
its answer), its run trained and exited 0, which fails these tests too.

The loader unit tests at the end (bert_config.json, vocab.txt) have no CLI of their own
to go through cheaply: modeling.py and tokenization.py have their own test files, which
this audit does not touch.
"""

import collections
import concurrent.futures
import json
import os

import pytest
import tensorflow.compat.v1 as tf

import cli  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
from tiny_task_files import (  # pylint: disable=g-import-not-at-top,g-multiple-import
    TINY_CONFIG, tsv, write_model_files, write_text)
import tokenization  # pylint: disable=g-import-not-at-top

# Labelled rows of the tiny classification task: (label, text).
ROWS = [(u"体育", u"球队赢了比赛。"), (u"财经", u"股市今天上涨。"), (u"体育", u"他跑完了马拉松。"),
        (u"财经", u"银行下调利率。"), (u"体育", u"比赛在周日举行。"), (u"财经", u"公司利润增长。"),
        (u"体育", u"球迷为球队加油。"), (u"财经", u"基金收益回落。")]
CONTEXT = u"北京是中国的首都。上海是一座大城市。"

# Below the training features of 400 examples, above labels.txt and the lock file.
FILE_SIZE_LIMIT = 16384

def classifier_case(root, case_id, files, fragments=(), file_size_limit=None, **flags):
  """A run_classifier_mgpu.py --do_train case on data_dir files {name: text}."""
  data_dir = os.path.join(root, case_id, "data")
  texts = [u"".join(row) for row in ROWS] + list(files.values())
  vocab_file, config_file = write_model_files(data_dir, texts)
  for name, text in files.items():
    write_text(os.path.join(data_dir, name), text)
  all_flags = collections.OrderedDict([
      ("task_name", "tsv"), ("data_dir", data_dir), ("vocab_file", vocab_file),
      ("bert_config_file", config_file), ("output_dir", os.path.join(root, case_id, "out")),
      ("do_train", True), ("max_seq_length", 32), ("train_batch_size", 4),
      ("num_train_epochs", 1), ("save_checkpoints_steps", 1000)])
  all_flags.update(flags)
  return cli.Case("run_classifier_mgpu.py", all_flags, list(fragments), file_size_limit)


def squad_json(questions):
  """A SQuAD file of one paragraph (CONTEXT); questions: (id, question, answer, start)."""
  return json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{
      "context": CONTEXT,
      "qas": [{"id": qid, "question": question,
               "answers": [{"text": answer, "answer_start": start}]}
              for qid, question, answer, start in questions]}]}]}, ensure_ascii=False)


GOOD_QUESTIONS = [("q1", u"中国的首都是哪里？", u"北京", 0), ("q2", u"哪里是大城市？", u"上海", 9),
                  ("q3", u"北京是哪里的首都？", u"中国", 3), ("q4", u"上海是什么？", u"大城市", 14)]


def squad_case(root, case_id, questions, fragments=(), drop_tokens=(), **flags):
  data_dir = os.path.join(root, case_id, "data")
  texts = [CONTEXT] + [q[1] for q in GOOD_QUESTIONS + list(questions)]
  vocab_file, config_file = write_model_files(data_dir, texts, drop_tokens)
  train_file = write_text(os.path.join(data_dir, "train.json"), squad_json(questions))
  all_flags = collections.OrderedDict([
      ("train_file", train_file), ("vocab_file", vocab_file), ("bert_config_file", config_file),
      ("output_dir", os.path.join(root, case_id, "out")), ("do_train", True),
      ("max_seq_length", 48), ("max_query_length", 16), ("doc_stride", 16),
      ("train_batch_size", 2), ("num_train_epochs", 1), ("save_checkpoints_steps", 1000)])
  all_flags.update(flags)
  return cli.Case("run_squad_mgpu.py", all_flags, list(fragments), None)


def make_cases(root):
  """case id -> cli.Case: every class of bad input found by the audit that a CLI run shows."""
  cases = collections.OrderedDict()

  # A bert_config.json whose heads do not divide hidden_size: a ValueError traceback
  # from the model builder, after output_dir was claimed.
  case = classifier_case(root, "config_heads", {"train.tsv": tsv(ROWS)})
  config_file = case.flags["bert_config_file"]
  with open(config_file) as f:
    config = json.load(f)
  write_text(config_file, json.dumps(dict(config, hidden_size=15)))
  cases["config_heads"] = case._replace(fragments=[config_file, "hidden_size", "15",
                                                   "num_attention_heads"])

  # A CSV quote that is never closed swallowed the following rows into one field: the
  # run trained on 3 examples instead of 8 (batch size 1, so that it did train).
  csv_rows = [u"%s,%s" % row for row in ROWS]
  csv_rows[2] = csv_rows[2].replace(u",", u',"', 1)
  case_id = "csv_unclosed_quote"
  cases[case_id] = classifier_case(
      root, case_id, {"train.csv": u"label,text_a\n" + u"\n".join(csv_rows) + u"\n"},
      task_name="csv", train_batch_size=1,
      fragments=[os.path.join(root, case_id, "data", "train.csv"), "line 4", "never closed"])

  # THUCNews lines with CR (old Mac) line ends: the run trained on all 8 rows merged
  # into one example.
  case_id = "cr_line_ends"
  cases[case_id] = classifier_case(
      root, case_id, {"train.txt": u"".join(u"%s\t%s\r" % row for row in ROWS)},
      task_name="thucnews", train_batch_size=1,
      fragments=[os.path.join(root, case_id, "data", "train.txt"), "line 1", "carriage return"])

  # An unpaired surrogate (a broken \u escape) in a JSONL text: read fine, then a
  # UnicodeEncodeError traceback when predict_detail.tsv was written after training.
  jsonl = u"".join(json.dumps({"label": label, "text": text}, ensure_ascii=False) + u"\n"
                   for label, text in ROWS)
  broken = u'{"label": "体育", "text": "球队\\ud800赢了"}\n'
  case_id = "jsonl_unpaired_surrogate"
  cases[case_id] = classifier_case(
      root, case_id, {"train.jsonl": jsonl, "test.jsonl": jsonl + broken},
      task_name="jsonl", do_predict=True,
      fragments=[os.path.join(root, case_id, "data", "test.jsonl"), "line 9", "surrogate"])

  # output_dir/labels.txt is a directory: an IsADirectoryError traceback.
  case_id = "labels_txt_is_a_directory"
  cases[case_id] = classifier_case(
      root, case_id, {"train.tsv": tsv(ROWS)},
      fragments=[os.path.join(root, case_id, "out", "labels.txt"),
                 "a directory is in the way"])
  os.makedirs(os.path.join(root, case_id, "out", "labels.txt"))

  # The disk fills up while the features are written (a file size limit stands in for
  # it, which root cannot bypass): a TensorFlow OpError traceback.
  case_id = "disk_full_while_featurizing"
  cases[case_id] = classifier_case(
      root, case_id, {"train.tsv": tsv(ROWS * 50)}, file_size_limit=FILE_SIZE_LIMIT,
      fragments=[os.path.join(root, case_id, "out", "train-"), "cannot write", "File too large"])

  # A vocab without [CLS]: a VocabLookupError traceback while featurizing.
  case = squad_case(root, "squad_vocab_without_cls", GOOD_QUESTIONS, drop_tokens=["[CLS]"],
                    fragments=["no [CLS] token"])
  cases["squad_vocab_without_cls"] = case

  # A negative answer_start matched the text counted from the end of the context
  # (Python slicing): the question silently trained as "no answer".
  negative = GOOD_QUESTIONS + [("q5", u"什么是大城市？", u"城市", -3)]
  train_file = os.path.join(root, "squad_negative_answer_start", "data", "train.json")
  cases["squad_negative_answer_start"] = squad_case(
      root, "squad_negative_answer_start", negative,
      fragments=[train_file, "qas[4].answers[0].answer_start", "-3"])

  # A question with no text trained silently.
  empty = GOOD_QUESTIONS + [("q5", u"  ", u"北京", 0)]
  train_file = os.path.join(root, "squad_empty_question", "data", "train.json")
  cases["squad_empty_question"] = squad_case(root, "squad_empty_question", empty,
                                             fragments=[train_file, "'q5'", "empty question"])

  # A token listed twice: ids are line numbers, so the last id is past vocab_size. The
  # unique-token count passed the size check and training died with an index error.
  case = classifier_case(root, "vocab_token_twice", {"train.tsv": tsv(ROWS)})
  vocab_file = case.flags["vocab_file"]
  with open(vocab_file, encoding="utf-8") as f:
    num_lines = len(f.read().splitlines())
  with open(vocab_file, "a", encoding="utf-8") as f:
    f.write(u"[CLS]\n")
  cases["vocab_token_twice"] = case._replace(fragments=[
      vocab_file, "has %d tokens" % (num_lines + 1), "vocab_size is %d" % num_lines])

  # 1e30 epochs: 1e30 steps, a run that never ends with a learning rate of 1e-28.
  cases["absurd_epochs"] = classifier_case(root, "absurd_epochs", {"train.tsv": tsv(ROWS)},
                                           num_train_epochs="1e30",
                                           fragments=["--num_train_epochs=1e+30"])

  # A NaN threshold would never predict "no answer".
  cases["squad_nan_threshold"] = squad_case(
      root, "squad_nan_threshold", GOOD_QUESTIONS, null_score_diff_threshold="nan",
      fragments=["--null_score_diff_threshold=nan"])

  # --max_seq_length=2 was refused only after output_dir was claimed (and left behind).
  cases["max_seq_length_2"] = classifier_case(root, "max_seq_length_2", {"train.tsv": tsv(ROWS)},
                                              max_seq_length=2, fragments=["--max_seq_length=2"])

  # Bias correction asked of an optimizer that corrects already.
  cases["bias_correction_with_lamb"] = classifier_case(
      root, "bias_correction_with_lamb", {"train.tsv": tsv(ROWS)}, optimizer="lamb",
      adam_bias_correction=True, fragments=["--adam_bias_correction", "--optimizer=lamb"])

  # Predict-only with no trained model: refused, but only after the lock and the features
  # had been written to a new output_dir.
  cases["predict_without_a_model"] = classifier_case(
      root, "predict_without_a_model", {"train.tsv": tsv(ROWS), "test.tsv": tsv(ROWS)},
      do_train=None, do_predict=True,
      fragments=["No checkpoint in --output_dir=%s" % os.path.join(root,
                                                                   "predict_without_a_model",
                                                                   "out")])

  # A URL output_dir: half-written local files named after the URL, then a traceback.
  cases["url_output_dir"] = classifier_case(root, "url_output_dir", {"train.tsv": tsv(ROWS)},
                                            output_dir="file:///tmp/x",
                                            fragments=["--output_dir=file:///tmp/x",
                                                       "local directory"])

  # --input_file through a regular file: TF 1.15's Glob raised FailedPreconditionError.
  vocab_file, config_file = write_model_files(os.path.join(root, "pretraining_input"), [CONTEXT])
  input_file = os.path.join(vocab_file, "*.tfrecord")
  pretraining_flags = collections.OrderedDict([
      ("input_file", input_file), ("bert_config_file", config_file),
      ("output_dir", os.path.join(root, "pretraining_input", "out")), ("do_train", True),
      ("max_seq_length", 32), ("max_predictions_per_seq", 5), ("num_train_steps", 2),
      ("num_warmup_steps", 0)])
  cases["pretraining_input_under_a_file"] = cli.Case(
      "run_pretraining_mgpu.py", pretraining_flags, ["--input_file", input_file], None)
  return cases


CASE_IDS = ["config_heads", "csv_unclosed_quote", "cr_line_ends", "jsonl_unpaired_surrogate",
            "labels_txt_is_a_directory", "disk_full_while_featurizing",
            "squad_vocab_without_cls", "squad_negative_answer_start", "squad_empty_question",
            "vocab_token_twice", "absurd_epochs", "squad_nan_threshold", "max_seq_length_2",
            "bias_correction_with_lamb", "predict_without_a_model", "url_output_dir",
            "pretraining_input_under_a_file"]

# Cases stopped before output_dir is claimed: they must not create it.
NO_OUTPUT_DIR = ("vocab_token_twice", "absurd_epochs", "squad_nan_threshold",
                 "max_seq_length_2", "config_heads", "squad_vocab_without_cls",
                 "bias_correction_with_lamb", "predict_without_a_model")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  cases = make_cases(str(tmp_path_factory.mktemp("bad_input_cli")))
  assert list(cases) == CASE_IDS
  with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
    futures = collections.OrderedDict((case_id, pool.submit(cli.run_case, case))
                                      for case_id, case in cases.items())
    return dict((case_id, (cases[case_id], future.result()))
                for case_id, future in futures.items())


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_bad_input_stops_with_one_error_line_before_training(runs, case_id):
  case, result = runs[case_id]
  cli.assert_one_line_error(result, *case.fragments)
  # Stopped before training: no checkpoint, no events file.
  output_dir = case.flags["output_dir"]
  if case_id in NO_OUTPUT_DIR:
    assert not os.path.exists(output_dir)
  if os.path.isdir(output_dir):
    leftovers = [name for name in os.listdir(output_dir)
                 if name.startswith(("model.ckpt", "events.out", "checkpoint"))]
    assert leftovers == [], leftovers


# --precision values refused on this CPU-only machine: fp16 (no GPU) everywhere, and bf16
# on TF 1.x (no bfloat16 kernels).
REFUSED_PRECISIONS = ["fp16"] + (["bf16"] if tf.__version__.startswith("1.") else [])


@pytest.mark.parametrize("precision", REFUSED_PRECISIONS)
@pytest.mark.parametrize("script", ["classifier", "squad"])
def test_a_refused_precision_creates_no_output_dir(tmp_path, script, precision):
  # The device check used to run after output_dir was claimed (the classifier had written
  # its labels, model files and features by then).
  if script == "classifier":
    case = classifier_case(str(tmp_path), "c", {"train.tsv": tsv(ROWS), "dev.tsv": tsv(ROWS)},
                           do_eval=True, precision=precision)
  else:
    case = squad_case(str(tmp_path), "s", GOOD_QUESTIONS, precision=precision)
  result = cli.run_script(case.script, cli.flag_list(case.flags))
  cli.assert_one_line_error(result, "--precision=%s needs" % precision)
  assert not os.path.exists(case.flags["output_dir"])


# ---------------------------------------------------------------------------
# Loaders without a cheap CLI path: bert_config.json and vocab.txt
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    ("hidden_dropout_prob", "NaN"), ("attention_probs_dropout_prob", "NaN"),
    ("initializer_range", "NaN"), ("initializer_range", "Infinity")])
def test_config_refuses_non_finite_numbers(tmp_path, key, value):
  # json.loads accepts NaN; NaN < 0 is False, so it passed and the first step's
  # gradient was NaN ("Lower --learning_rate", the wrong advice).
  config = dict(TINY_CONFIG, vocab_size=10)
  text = json.dumps(config).replace('"%s": %s' % (key, json.dumps(config[key])),
                                    '"%s": %s' % (key, value))
  assert value in text
  path = write_text(str(tmp_path / "bert_config.json"), text)
  with pytest.raises(ValueError) as info:
    modeling.BertConfig.from_json_file(path)
  assert path in str(info.value) and key in str(info.value)


def test_config_refuses_heads_that_do_not_divide_hidden_size(tmp_path):
  path = write_text(str(tmp_path / "bert_config.json"),
                    json.dumps(dict(TINY_CONFIG, vocab_size=10, hidden_size=30,
                                    num_attention_heads=4)))
  with pytest.raises(ValueError) as info:
    modeling.BertConfig.from_json_file(path)
  message = str(info.value)
  assert path in message and "30" in message and "num_attention_heads" in message
  # The defaults count too: 12 heads do not divide 100.
  with pytest.raises(ValueError):
    modeling.BertConfig.from_dict({"vocab_size": 10, "hidden_size": 100})


def write_bytes(path, data):
  with open(path, "wb") as f:
    f.write(data)
  return path


def test_vocab_byte_order_mark_is_not_part_of_the_first_token(tmp_path):
  path = write_bytes(str(tmp_path / "vocab.txt"), b"\xef\xbb\xbf[CLS]\n[SEP]\n[UNK]\n")
  assert list(tokenization.load_vocab(path).items()) == [
      (u"[CLS]", 0), (u"[SEP]", 1), (u"[UNK]", 2)]


@pytest.mark.parametrize("data,fragments", [
    # CR-only line ends: the whole file was one token.
    (b"[PAD]\r[UNK]\r[CLS]\r[SEP]\r", ["line 1", "carriage return"]),
    # (Without a byte order mark its tokens are garbage; the [CLS]/[SEP]/[UNK] checks
    # of the scripts refuse it.)
    (u"[PAD]\n[UNK]\n".encode("utf-16"), ["UTF-16"]),
    (u"[PAD]\n[UNK]\n".encode("utf-32"), ["UTF-32"]),
])
def test_vocab_that_would_load_as_garbage_is_refused(tmp_path, data, fragments):
  path = write_bytes(str(tmp_path / "vocab.txt"), data)
  with pytest.raises(ValueError) as info:
    tokenization.load_vocab(path)
  message = str(info.value)
  assert path in message and "\n" not in message
  for fragment in fragments:
    assert fragment in message, (fragment, message)


def test_help_flags_print_the_flags_and_are_not_typos():
  result = cli.run_script("run_classifier_mgpu.py", ["--helpfull"])
  assert "unknown flag" not in result.stderr + result.stdout
  assert "--n_gpus" in result.stdout and "--task_name" in result.stdout
