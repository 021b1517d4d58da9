# coding=utf-8
"""Tests of the NER task unit without flags (bert_mgpu/ner/{splits,predictions}.py): the splits read
with their tag list, windowed, and scored by ner_metrics, whose loss is per token for the
softmax head and per window for the CRF (--use_crf, an argument here). The whole job runs in
tests/commands/test_run_ner.py."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.distillation import options as distillation_options
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import heads as ner_heads
from bert_mgpu.ner import predictions as ner_predictions
from bert_mgpu.ner import splits as ner_splits
from bert_mgpu.ner import task as ner_task
from bert_mgpu.training import run_settings
import tokenization

TRAIN = u"李 B-PER\n明 I-PER\n去 O\n北 B-LOC\n京 I-LOC\n\n你 O\n好 O\n"
DEV = u"明 B-PER\n去 O\n北 B-LOC\n京 I-LOC\n\n好 O\n"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + list(u"李明去北京你好")
MAX_SEQ_LENGTH = 5  # 3 pieces per window: the first sentence of each split has 2 windows
DOC_STRIDE = 2


def write(path, text):
  with open(str(path), "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


@pytest.fixture
def data_dir(tmp_path):
  write(tmp_path / "train.txt", TRAIN)
  write(tmp_path / "dev.txt", DEV)
  return str(tmp_path)


@pytest.fixture
def tokenizer(tmp_path):
  path = write(tmp_path / "vocab.txt", u"".join(t + u"\n" for t in VOCAB))
  return tokenization.FullTokenizer(path, do_lower_case=True)


def test_read_splits_takes_the_tags_of_the_training_data(data_dir):
  splits, data_format, label_list, scheme = ner_splits.read_splits(
      data_dir, "auto", ["train", "dev"], label_list_dir=None)
  assert (data_format, scheme) == ("conll", "BIO")
  assert label_list == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
  assert sorted(splits) == ["dev", "train"]
  assert len(splits["dev"].data.sentences) == 2


def test_without_training_the_tag_list_comes_from_the_output_dir(data_dir, tmp_path):
  output_dir = tmp_path / "out"
  output_dir.mkdir()
  with pytest.raises(UsageError, match="labels.txt not found"):
    ner_splits.read_splits(data_dir, "conll", ["dev"], str(output_dir))
  write(output_dir / "labels.txt", u"O\nB-PER\nI-PER\nB-LOC\nI-LOC\n")
  _, _, label_list, _ = ner_splits.read_splits(data_dir, "conll", ["dev"], str(output_dir))
  assert label_list == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@pytest.mark.parametrize("use_crf", [False, True])
def test_ner_metrics_scores_the_windows_and_divides_the_loss_by_the_heads_unit(
    data_dir, tokenizer, use_crf):
  splits, _, label_list, scheme = ner_splits.read_splits(data_dir, "conll", ["train", "dev"],
                                                         None)
  dev = splits["dev"]
  ner_splits.featurize_split(dev, tokenizer, label_list, MAX_SEQ_LENGTH, DOC_STRIDE)
  windows = dev.windows
  assert len(windows) == 3  # the 4-token sentence needs 2 windows
  # The gold tags as the predictions: every entity right.
  tag_ids = np.array([w.label_ids for w in windows])
  row_tokens = np.array([sum(w.label_mask) for w in windows], np.float32)
  outputs = {"tag_ids": tag_ids, "row_loss": np.array([1.0, 2.0, 3.0]),
             "row_tokens": row_tokens}
  metrics, result = ner_predictions.ner_metrics(dev, outputs, label_list, scheme, use_crf)
  assert metrics["f1"] == metrics["precision"] == metrics["recall"] == 1.0
  assert result["f1"] == 1.0
  # Per window with the CRF, else per first piece (token).
  expected_loss = 6.0 / (3 if use_crf else row_tokens.sum())
  assert metrics["loss"] == pytest.approx(expected_loss)


def test_sentence_tags_refuses_a_prediction_count_that_is_not_the_windows(data_dir,
                                                                         tokenizer):
  splits, _, label_list, scheme = ner_splits.read_splits(data_dir, "conll", ["train", "dev"],
                                                         None)
  ner_splits.featurize_split(splits["dev"], tokenizer, label_list, MAX_SEQ_LENGTH, DOC_STRIDE)
  tag_ids = np.array([w.label_ids for w in splits["dev"].windows])
  assert ner_predictions.sentence_tags(splits["dev"], tag_ids, label_list, scheme) == [
      ["B-PER", "O", "B-LOC", "I-LOC"], ["O"]]
  with pytest.raises(AssertionError, match="4 window predictions for 3 windows"):
    ner_predictions.sentence_tags(splits["dev"], np.concatenate([tag_ids, tag_ids[:1]]), label_list,
                           scheme)


def test_window_records_parse_with_the_feature_spec(data_dir, tokenizer, tmp_path):
  splits, _, label_list, _ = ner_splits.read_splits(data_dir, "conll", ["train"], None)
  ner_splits.featurize(splits, tokenizer, label_list, str(tmp_path), MAX_SEQ_LENGTH,
                       DOC_STRIDE)
  record_file = splits["train"].record_file
  assert record_file == os.path.join(str(tmp_path), "ner_train.tf_record")
  spec = ner_splits.feature_spec(MAX_SEQ_LENGTH)
  windows = splits["train"].windows
  for window, serialized in zip(windows, tf.io.tf_record_iterator(record_file)):
    parsed = tf.train.Example.FromString(serialized).features.feature
    assert set(parsed) == set(spec)
    assert list(parsed["tag_ids"].int64_list.value) == window.label_ids
    assert list(parsed["tag_mask"].int64_list.value) == window.label_mask


@pytest.mark.parametrize("ner_head, family, use_crf", [
    ("tags", ner_heads.TagHeads, False), ("crf", ner_heads.TagHeads, True),
    ("global_pointer", ner_heads.SpanHeads, False),
    ("efficient_global_pointer", ner_heads.SpanHeads, False)])
def test_each_head_has_its_family_and_its_saved_settings_give_it_back(ner_head, family,
                                                                      use_crf):
  """A model is checked and served by the family its model_settings.json names: the head
  written at training must come back from the file."""
  head = ner_heads.for_head(ner_head)
  assert isinstance(head, family) and head.ner_head == ner_head and head.use_crf == use_crf
  settings = head.model_settings(True, MAX_SEQ_LENGTH, DOC_STRIDE)
  again = ner_heads.for_model_settings(settings)
  assert type(again) is family and again.ner_head == ner_head
  assert again.spans == (family is ner_heads.SpanHeads)
  with pytest.raises(ValueError):
    ner_heads.for_head("softmax")


@pytest.mark.parametrize("ner_head, rdrop_alpha, distills, refusal", [
    ("tags", 4.0, False, None),
    ("tags", 0.0, True, None),
    ("crf", 0.0, False, None),
    ("crf", 4.0, False, "--rdrop_alpha=4.0 with --use_crf"),
    ("crf", 0.0, True, "--teacher_dir with --ner_head=crf"),
    ("global_pointer", 0.0, False, None),
    ("global_pointer", 4.0, False, "--rdrop_alpha=4.0 with --ner_head=global_pointer"),
    ("efficient_global_pointer", 0.0, True,
     "--teacher_dir with --ner_head=efficient_global_pointer")])
def test_a_head_refuses_the_options_it_cannot_compute_and_so_does_the_task(
    data_dir, tmp_path, ner_head, rdrop_alpha, distills, refusal):
  """R-Drop and distillation compare per-token tag distributions, which only the softmax tags
  give: the head family says so in one line, and the task unit refuses at construction (a
  program using the package without the command's flag checks)."""
  head = ner_heads.for_head(ner_head)
  distillation = distillation_options.DistillationOptions(
      str(tmp_path) if distills else None, 1.0, 0.5, None, None)
  settings = ner_task.NerSettings(data_dir, "vocab.txt", "bert_config.json", ner_head=ner_head,
                                  distillation=distillation)
  job_settings = run_settings.JobSettings(str(tmp_path / "out"), rdrop_alpha=rdrop_alpha)
  if refusal is None:
    head.check_options(rdrop_alpha, distills)
    ner_task.NerTask(job_settings, settings)
    return
  for refuse in (lambda: head.check_options(rdrop_alpha, distills),
                 lambda: ner_task.NerTask(job_settings, settings)):
    with pytest.raises(UsageError) as raised:
      refuse()
    message = str(raised.value)
    assert message.startswith(refusal) and "\n" not in message
    assert message.endswith("drop one.") or "distill a tags student" in message
