# coding=utf-8
"""predict_text.py in file mode: raw texts in, the probabilities of run_classifier's
--do_predict out, in input order, from an export or an output_dir, on one or two towers."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from bert_mgpu.classifier import serving as classifier_serving
import modeling
import predict_text
import tokenization
import trained_classifier
from trained_classifier import MAX_SEQ_LENGTH, read_lines, write_text


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """A trained output_dir and its export (the base directory of version 1)."""
  return trained_classifier.train_and_export(str(tmp_path_factory.mktemp("predict_text")))


def run_predict(args, stdin=b""):
  """Runs predict_text.py with `stdin` bytes; returns the CompletedProcess (text)."""
  result = subprocess.run(
      [sys.executable, cli.script_path("predict_text.py")] + list(args), input=stdin,
      cwd=cli.REPO_DIR, env=cli.script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      timeout=cli.RUN_TIMEOUT_SECONDS)
  result.stdout = result.stdout.decode("utf-8", "replace")
  result.stderr = result.stderr.decode("utf-8", "replace")
  return result


def parse_output(lines, labels):
  """(labels, top probabilities, all probabilities [n, num_labels]) of the output lines."""
  rows = [line.split("\t") for line in lines]
  assert all(len(row) == 2 + len(labels) for row in rows), rows[:3]
  probabilities = np.array([[float(p) for p in row[2:]] for row in rows])
  return [row[0] for row in rows], np.array([float(row[1]) for row in rows]), probabilities


def check_predictions(lines, labels, expected):
  predicted, top, probabilities = parse_output(lines, labels)
  np.testing.assert_allclose(probabilities, expected, atol=1e-5)
  best = probabilities.argmax(axis=1)
  assert predicted == [labels[i] for i in best]
  np.testing.assert_array_equal(top, probabilities[np.arange(len(best)), best])


@pytest.mark.parametrize("source,extra_flags", [
    ("export", ["--predict_batch_size=4"]),
    ("version", ["--predict_batch_size=25"]),
    ("output_dir", ["--n_gpus=2", "--predict_batch_size=3"]),
])
def test_file_mode_gives_the_probabilities_of_do_predict(model, tmp_path, source, extra_flags):
  trained, export_dir = model
  trained_classifier.assert_rows_distinguishable(trained.probabilities, 1e-4)
  model_flag = {"export": "--export_dir=" + export_dir,
                "version": "--export_dir=" + os.path.join(export_dir, "1"),
                "output_dir": "--output_dir=" + trained.output_dir}[source]
  input_file, output_file = str(tmp_path / "in.txt"), str(tmp_path / "out.tsv")
  write_text(input_file, "".join(text + "\n" for text in trained.texts))
  result = run_predict([model_flag, "--input_file=" + input_file,
                        "--output_file=" + output_file] + extra_flags)
  cli.assert_succeeded(result)
  check_predictions(read_lines(output_file), trained.labels, trained.probabilities)
  over_long = trained_classifier.num_over_long(trained, trained.texts)
  assert trained_classifier.NUM_LONG_TEST <= over_long < len(trained.texts)
  assert "%d of %d text(s) had more than max_seq_length=%d tokens" % (
      over_long, len(trained.texts), MAX_SEQ_LENGTH) in result.stderr
  if source == "output_dir":
    assert "best/model.ckpt-" in result.stderr and "on 2 tower(s)" in result.stderr


def test_pairs_from_stdin_to_stdout(model):
  trained, export_dir = model
  stdin = "".join("%s\t%s\n" % pair for pair in trained.pairs).encode("utf-8")
  result = run_predict(["--export_dir=" + export_dir, "--text_b"], stdin=stdin)
  cli.assert_succeeded(result)
  check_predictions(result.stdout.split("\n")[:-1], trained.labels, trained.pair_probabilities)


@pytest.mark.parametrize("line,problem", [
    ("", "the line is empty"),
    # Zero-width space and a control character: not empty for str.strip(), no tokens for BERT.
    ("\u200b\u0001", "the line has no tokens"),
])
def test_an_empty_line_is_an_error_naming_the_line(model, tmp_path, line, problem):
  _, export_dir = model
  input_file = str(tmp_path / "in.txt")
  write_text(input_file, "第一个文本\n%s\n第三个\n" % line)
  result = run_predict(["--export_dir=" + export_dir, "--input_file=" + input_file])
  cli.assert_one_line_error(result, "%s line 2: %s" % (input_file, problem))
  assert result.stdout == ""


def test_a_tab_without_text_b_is_an_error(model):
  _, export_dir = model
  result = run_predict(["--export_dir=" + export_dir], stdin="一\n二\t三\n".encode("utf-8"))
  cli.assert_one_line_error(result, "<stdin> line 2", "--text_b")


@pytest.mark.parametrize("from_stdin", [False, True])
def test_undecodable_bytes_are_an_error_naming_the_line(model, tmp_path, from_stdin):
  _, export_dir = model
  data = "好的\n".encode("utf-8") + "坏的\n".encode("gb18030")
  args = ["--export_dir=" + export_dir]
  if from_stdin:
    result = run_predict(args, stdin=data)
    name = "<stdin>"
  else:
    name = str(tmp_path / "in.txt")
    with open(name, "wb") as f:
      f.write(data)
    result = run_predict(args + ["--input_file=" + name])
  cli.assert_one_line_error(result, "%s line 2" % name, "not valid UTF-8")


def test_stdin_with_a_byte_order_mark_names_the_bad_line_and_byte():
  data = b"\xef\xbb\xbf" + "好\n".encode("utf-8") + b"ok \xff\n"
  with pytest.raises(predict_text.UsageError) as raised:
    predict_text.decode_utf8("<stdin>", data)
  assert str(raised.value).startswith(
      "<stdin> line 2: byte 0xff at byte offset 3 of the line (offset 10 in the file) is not "
      "valid UTF-8"), raised.value
  assert predict_text.decode_utf8("<stdin>", b"\xef\xbb\xbfa\n") == "a\n"


@pytest.mark.parametrize("texts_a,texts_b,row,field", [
    (["好", "\u200b"], None, 1, "a"),
    (["好", "\u0001"], ["好", "坏"], 1, "a"),
    (["好", "坏"], ["\u200b", "好"], 0, "b"),
    (["\u200b", "好"], ["\u200b", "好"], 0, "a"),
])
def test_featurize_names_the_first_text_without_tokens(model, texts_a, texts_b, row, field):
  trained, _ = model
  tokenizer = tokenization.FullTokenizer(trained.vocab_file, do_lower_case=True)
  with pytest.raises(classifier_serving.model_inputs.NoTokensError) as raised:
    classifier_serving.featurize(tokenizer, MAX_SEQ_LENGTH, texts_a, texts_b)
  assert (raised.value.row, raised.value.field) == (row, field)
  # One-character texts and pairs are fine.
  classifier_serving.featurize(tokenizer, MAX_SEQ_LENGTH, ["好"], ["坏"])
  classifier_serving.featurize(tokenizer, MAX_SEQ_LENGTH, ["好"])


def copy_model_files(trained, directory):
  os.makedirs(directory)
  for name in ("vocab.txt", "bert_config.json", "labels.txt", "model_settings.json"):
    shutil.copy(os.path.join(trained.output_dir, name), directory)
  return directory


def write_pretraining_checkpoint(config_file, directory):
  """A checkpoint with BERT and the pretraining heads' variables only (no classifier head)."""
  with tf.Graph().as_default():
    model = modeling.BertModel(modeling.BertConfig.from_json_file(config_file), False,
                               tf.placeholder(tf.int32, [1, 4]))
    tf.get_variable("cls/predictions/output_bias", [model.get_embedding_table().shape[0]])
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, os.path.join(directory, "model.ckpt"), global_step=1,
                            write_meta_graph=False)


def test_a_pretraining_checkpoint_is_refused(model, tmp_path):
  trained, _ = model
  output_dir = copy_model_files(trained, str(tmp_path / "pretrained"))
  write_pretraining_checkpoint(trained.config_file, output_dir)
  result = run_predict(["--output_dir=" + output_dir], stdin="一个文本\n".encode("utf-8"))
  cli.assert_one_line_error(result, "model.ckpt-1", "output_weights", "not a classifier")


def test_a_missing_labels_file_is_refused(model, tmp_path):
  trained, _ = model
  output_dir = copy_model_files(trained, str(tmp_path / "no_labels"))
  os.remove(os.path.join(output_dir, "labels.txt"))
  result = run_predict(["--output_dir=" + output_dir], stdin="一个文本\n".encode("utf-8"))
  cli.assert_one_line_error(result, output_dir, "labels.txt")


def test_an_export_of_another_kind_of_model_is_refused(model, tmp_path):
  _, export_dir = model
  version_dir = str(tmp_path / "7")
  shutil.copytree(os.path.join(export_dir, "1"), version_dir)
  settings_file = os.path.join(version_dir, "assets.extra", "model_settings.json")
  with open(settings_file, encoding="utf-8") as f:
    settings = json.load(f)
  write_text(settings_file, json.dumps(dict(settings, model="summarizer")))
  result = run_predict(["--export_dir=" + str(tmp_path)], stdin="一个文本\n".encode("utf-8"))
  cli.assert_one_line_error(result, settings_file, "'summarizer' model, not a classifier")


def test_a_directory_without_an_export_is_refused(tmp_path):
  result = run_predict(["--export_dir=" + str(tmp_path)], stdin=b"text\n")
  cli.assert_one_line_error(result, "--export_dir=%s holds no export" % tmp_path)
