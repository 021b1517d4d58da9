# coding=utf-8
"""run_classifier_mgpu.py --teacher_dir (knowledge distillation) refuses, with one `error: `
line, exit 1 and no traceback, every run it cannot distill, before the student's output_dir
is claimed: the student's output_dir must not exist afterwards, and the teacher's output_dir
is left as it was (every file's sha256).

One tiny teacher (two layers, hidden size 16, two steps on one tower) is trained once for
the module on the demo data (helpers/classifier_runs.py); every case is then a student run
on the same data, or on a copy with something changed (the labels, the vocab, an unlabelled
file), each against that teacher. The refusals come from the flags
(bert_mgpu/distillation/options.py, command_line.distillation_options), from the teacher's
files (bert_mgpu/distillation/teacher.py) and from --unlabeled_file
(bert_mgpu/classifier/unlabeled_examples.py). The runs go two at a time.
"""

import collections
import concurrent.futures
import json
import os
import shutil

import pytest

import cli
from classifier_runs import base_flags, read_lines, run_classifier, write_json, write_text

TEACHER_LAYERS = 2


@pytest.fixture(scope="module")
def teacher(demo_data, tmp_path_factory):
  """The output_dir of a teacher trained on the demo data (2 layers, 2 steps)."""
  root = str(tmp_path_factory.mktemp("distill_teacher"))
  config_file = os.path.join(root, "teacher_config.json")
  write_json(config_file, dict(demo_data.config, num_hidden_layers=TEACHER_LAYERS))
  output_dir = os.path.join(root, "teacher")
  # 50 examples x 0.32 epochs / 8 = 2 steps.
  flags = base_flags(demo_data, output_dir, bert_config_file=config_file, do_eval=False,
                     do_predict=False, n_gpus=1, train_batch_size=8, num_train_epochs=0.32)
  cli.assert_succeeded(run_classifier(flags))
  return output_dir


def copy_data(data, directory, labels=None):
  """A copy of the demo data's data_dir in `directory`, with labels.txt replaced by `labels`
  when given; returns the copy's path."""
  shutil.copytree(data.data_dir, directory)
  if labels is not None:
    write_text(os.path.join(directory, "labels.txt"), "".join(l + "\n" for l in labels))
  return directory


def teacher_copy(teacher_dir, directory, **settings):
  """A copy of the teacher's output_dir with model_settings.json fields replaced."""
  shutil.copytree(teacher_dir, directory)
  path = os.path.join(directory, "model_settings.json")
  with open(path, encoding="utf-8") as f:
    write_json(path, dict(json.load(f), **settings))
  return directory


def flag_cases(root, data, teacher_dir):
  """case id -> (flag overrides, fragments of the error line): refused by the flags alone."""
  checkpoint = os.path.join(teacher_dir, "model.ckpt-2")
  unlabeled = os.path.join(root, "unlabeled.txt")
  return collections.OrderedDict([
      # A distillation flag without a teacher (given at its default value, too).
      ("alpha_without_teacher", (dict(teacher_dir=None, distill_alpha=0.5),
                                 ["--distill_alpha is read only with --teacher_dir"])),
      ("temperature_without_teacher", (dict(teacher_dir=None, distill_temperature=2),
                                       ["--distill_temperature is read only with "
                                        "--teacher_dir"])),
      ("unlabeled_without_teacher", (dict(teacher_dir=None, unlabeled_file=unlabeled),
                                     ["--unlabeled_file is read only with --teacher_dir"])),
      ("layers_without_teacher", (dict(teacher_dir=None, init_from_teacher_layers="0"),
                                  ["--init_from_teacher_layers is read only with "
                                   "--teacher_dir"])),
      ("without_do_train", (dict(do_train=None, do_predict=True),
                            ["--teacher_dir=%s" % teacher_dir, "add --do_train"])),
      ("with_rdrop", (dict(rdrop_alpha=1.0), ["--teacher_dir=%s" % teacher_dir,
                                               "--rdrop_alpha=1.0", "use one of the two"])),
      ("temperature_0", (dict(distill_temperature=0), ["--distill_temperature=0",
                                                       "above 0"])),
      ("temperature_nan", (dict(distill_temperature="nan"), ["--distill_temperature=nan",
                                                             "above 0"])),
      ("alpha_1.5", (dict(distill_alpha=1.5), ["--distill_alpha=1.5", "from 0 to 1"])),
      ("alpha_negative", (dict(distill_alpha=-0.1), ["--distill_alpha=-0.1", "from 0 to 1"])),
      ("layers_not_numbers", (dict(init_from_teacher_layers="a,b"),
                              ["--init_from_teacher_layers=a,b", "layer numbers"])),
      ("layer_twice", (dict(init_from_teacher_layers="1,1"),
                       ["--init_from_teacher_layers=1,1", "named twice"])),
      ("layers_with_init_checkpoint", (dict(init_from_teacher_layers="1",
                                            init_checkpoint=checkpoint),
                                       ["--init_from_teacher_layers and --init_checkpoint",
                                        "give one of them"])),
      ("several_workers", (dict(worker_hosts="localhost:1,localhost:2", task_index=0),
                           ["--teacher_dir with several workers", "--worker_hosts"])),
  ])


def teacher_cases(root, data, teacher_dir):
  """case id -> (flag overrides, fragments): refused on reading the teacher or the data."""
  where = "--teacher_dir=%s" % teacher_dir
  student_config = os.path.join(root, "student_config_hidden_32.json")
  write_json(student_config, dict(data.config, hidden_size=32))
  reordered = copy_data(data, os.path.join(root, "data_reordered"), data.labels[::-1])
  more_labels = copy_data(data, os.path.join(root, "data_more_labels"),
                          data.labels + [u"其他"])
  vocab = read_lines(data.vocab_file)
  changed = len(vocab) - 1  # the last token, which no demo text uses
  vocab[changed] = vocab[changed] + u"x"
  other_vocab = write_text_file(os.path.join(root, "other_vocab.txt"), vocab)
  bad_unlabeled = write_text_file(os.path.join(root, "bad_unlabeled.txt"),
                                  [u"一个没有标签的句子。", u"第二行\t多了一列", u"第三行。"])
  # Not under root/<case id>/, where each case's student lives.
  missing = os.path.join(root, "teachers", "no_such_teacher")
  empty = os.path.join(root, "teachers", "empty_teacher")
  os.makedirs(empty)
  untrained = teacher_copy(teacher_dir, os.path.join(root, "teachers",
                                                     "teacher_without_checkpoint"))
  for name in os.listdir(untrained):
    if name.startswith(("model.ckpt", "checkpoint")):
      os.remove(os.path.join(untrained, name))
  ner = teacher_copy(teacher_dir, os.path.join(root, "ner_teacher"), model="ner")
  return collections.OrderedDict([
      ("layer_out_of_range", (dict(init_from_teacher_layers=TEACHER_LAYERS),
                              ["--init_from_teacher_layers=2", "layers 0 to 1",
                               "layer 2 is not one of them"])),
      ("layer_negative", (dict(init_from_teacher_layers=-1),
                          ["--init_from_teacher_layers=-1", "layer -1 is not one of them"])),
      ("layer_count", (dict(init_from_teacher_layers="0,1"),
                       ["--init_from_teacher_layers=0,1", "2 layers for a student of 1",
                        "num_hidden_layers"])),
      ("hidden_size", (dict(init_from_teacher_layers="1", bert_config_file=student_config),
                       ["--init_from_teacher_layers=1", "the teacher's hidden_size is 16, "
                        "the student's 32"])),
      ("no_such_teacher", (dict(teacher_dir=missing),
                           ["--teacher_dir=%s" % missing, "no such directory"])),
      ("teacher_without_model_files", (dict(teacher_dir=empty),
                                       [empty, "not a complete classifier model"])),
      ("teacher_without_checkpoint", (dict(teacher_dir=untrained),
                                      ["--teacher_dir=%s" % untrained, "no checkpoint"])),
      ("teacher_of_another_kind", (dict(teacher_dir=ner),
                                  [ner, "'ner' model, not a classifier"])),
      ("labels_reordered", (dict(data_dir=reordered),
                            [where, "the teacher's labels are [%s] (5)" % ", ".join(data.labels),
                             "this run's [%s] (5)" % ", ".join(data.labels[::-1]),
                             "labels and their order"])),
      ("labels_other_set", (dict(data_dir=more_labels),
                            [where, "the teacher's labels are", "(5)", "(6)"])),
      ("max_seq_length", (dict(max_seq_length=24),
                          [where, "the teacher's max_seq_length is 32, this run's 24"])),
      ("do_lower_case", (dict(do_lower_case="false"),
                         [where, "the teacher's do_lower_case is true, this run's false"])),
      ("multi_label", (dict(multi_label=True),
                       [where, "the teacher's multi_label is unset, this run's true"])),
      ("vocab", (dict(vocab_file=other_vocab),
                 [where, "vocab.txt differs from --vocab_file=%s" % other_vocab])),
      ("unlabeled_columns", (dict(unlabeled_file=bad_unlabeled),
                             ["%s:2:" % bad_unlabeled, "2 tab-separated fields, expected 1"])),
      ("unlabeled_missing", (dict(unlabeled_file=os.path.join(root, "missing.txt")),
                             [os.path.join(root, "missing.txt"), "file not found"])),
      ("output_dir_inside_teacher", (
          dict(output_dir=os.path.join(teacher_dir, "student")),
          ["--teacher_dir=%s and --output_dir=%s overlap" % (
              teacher_dir, os.path.join(teacher_dir, "student"))])),
      ("unlabeled_grouped_within_label", (
          dict(unlabeled_file=bad_unlabeled, group_by_length=True,
               group_by_length_within_label=True),
          ["--group_by_length_within_label with --unlabeled_file", "no label to group by"])),
  ])


def write_text_file(path, lines):
  write_text(path, "".join(line + "\n" for line in lines))
  return path


@pytest.fixture(scope="module")
def runs(demo_data, teacher, tmp_path_factory):
  """case id (and "control") -> (the student's output_dir, the error line's fragments,
  CompletedProcess); "teacher_before" and "teacher_after": the teacher's files before and
  after every run."""
  root = str(tmp_path_factory.mktemp("distill_students"))
  cases = flag_cases(root, demo_data, teacher)
  cases.update(teacher_cases(root, demo_data, teacher))
  assert list(cases) == CASE_IDS
  jobs = collections.OrderedDict()
  for case_id, (overrides, _) in cases.items():
    output_dir = os.path.join(root, case_id, "student")
    flags = base_flags(demo_data, output_dir, do_eval=False, do_predict=False, n_gpus=1,
                       train_batch_size=8, num_train_epochs=0.32, teacher_dir=teacher)
    flags.update(overrides)
    jobs[case_id] = (flags["output_dir"], flags)
  # The control: the same student flags with a good unlabelled file and the teacher's layer 1
  # train, so each refusal comes from its one change.
  good_unlabeled = write_text_file(os.path.join(root, "good_unlabeled.txt"),
                                   [u"一个没有标签的句子。", u"", u"第三行。"])
  jobs["control"] = (os.path.join(root, "control", "student"), base_flags(
      demo_data, os.path.join(root, "control", "student"), do_eval=False, do_predict=False,
      n_gpus=1, train_batch_size=8, num_train_epochs=0.32, teacher_dir=teacher,
      unlabeled_file=good_unlabeled, init_from_teacher_layers=1, distill_temperature=2,
      distill_alpha=0.7))
  before = cli.file_sizes(teacher, cli.file_sha256)
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = collections.OrderedDict(
        (case_id, pool.submit(run_classifier, flags)) for case_id, (_, flags) in jobs.items())
    results = {case_id: (jobs[case_id][0], cases.get(case_id, (None, None))[1],
                         future.result()) for case_id, future in futures.items()}
  results["teacher_before"], results["teacher_after"] = before, cli.file_sizes(teacher, cli.file_sha256)
  return results


CASE_IDS = [
    "alpha_without_teacher", "temperature_without_teacher", "unlabeled_without_teacher",
    "layers_without_teacher", "without_do_train", "with_rdrop", "temperature_0",
    "temperature_nan", "alpha_1.5", "alpha_negative", "layers_not_numbers", "layer_twice",
    "layers_with_init_checkpoint", "several_workers",
    "layer_out_of_range", "layer_negative", "layer_count", "hidden_size", "no_such_teacher",
    "teacher_without_model_files", "teacher_without_checkpoint", "teacher_of_another_kind",
    "labels_reordered", "labels_other_set", "max_seq_length", "do_lower_case", "multi_label",
    "vocab", "unlabeled_columns", "unlabeled_missing", "output_dir_inside_teacher",
    "unlabeled_grouped_within_label"]


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_a_run_that_cannot_distill_stops_with_one_error_line_and_writes_nothing(runs,
                                                                                 case_id):
  output_dir, fragments, result = runs[case_id]
  cli.assert_one_line_error(result, *fragments)
  assert not os.path.exists(output_dir), os.listdir(output_dir)


def test_the_same_student_with_a_good_teacher_trains(runs):
  output_dir, _, result = runs["control"]
  cli.assert_succeeded(result)
  assert os.path.isfile(os.path.join(output_dir, "model.ckpt-2.index"))
  assert "2 unlabelled" in result.stderr, result.stderr[-3000:]


def test_the_refused_runs_leave_the_teacher_as_it_was(runs):
  assert runs["teacher_after"] == runs["teacher_before"]
  assert any(name.startswith("model.ckpt-2") for name in runs["teacher_before"])
