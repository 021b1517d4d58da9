# coding=utf-8
"""The reading-comprehension job of run_squad_mgpu.py: SquadSettings (its own options) and
SquadTask (the hooks bert_mgpu/training/job.py runs).

Steps count training questions, not windows (as Google's). The windows of every run are
written anew: the training set's into the cache dir (train.tf_record), the questions to
predict into output_dir/predict.tf_record, by the chief alone, which alone predicts. When
one process trains and predicts, it predicts in the training session (runner.Inference).

Outputs in output_dir, with do_predict: predictions.json, nbest_predictions.json,
null_odds.json (v2 only) and, when the predict file has answers, eval_results.txt.
"""

import collections
import json
import os

import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu.data import output_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.errors import UsageError
from bert_mgpu.squad import data as squad_data
from bert_mgpu.squad import model as squad_model
from bert_mgpu.squad import records as squad_records
from bert_mgpu.squad import scoring as squad_scoring
from bert_mgpu.squad import serving as squad_serving
from bert_mgpu.serving import model_files
from bert_mgpu.serving import onnx_export
from bert_mgpu.training import checkpoints
from bert_mgpu.training import job
from bert_mgpu.training import phases
from bert_mgpu.training import runner


class SquadSettings(object):
  """The options of a reading-comprehension run (run_squad_mgpu.py's own flags).

  Attributes:
    train_file, predict_file: SQuAD-format JSON (None when not training / predicting).
    bert_config_file, vocab_file, do_lower_case: the pre-trained model's files.
    do_predict: predict predict_file (and score it when it has answers).
    max_seq_length, doc_stride, max_query_length: the windows (word pieces).
    n_best_size, max_answer_length: the answers kept per question, their longest length.
    version_2_with_negative: SQuAD 2.0 (questions may have no answer; null_odds.json).
    null_score_diff_threshold: v2: predict no answer above this null odds.
    scoring: "auto", "squad" or "cmrc2018": the rules of eval_results.txt.
    export_format: what --export_dir gets (serving/onnx_export.ExportFormat).
    decoding_overrides: dict of squad/serving.DECODING_SETTINGS given on an export-only
      command line: they replace the trained model's in the export.
  """

  def __init__(self, train_file=None, predict_file=None, bert_config_file=None,
               vocab_file=None, do_lower_case=True, do_predict=False, max_seq_length=384,
               doc_stride=128, max_query_length=64, n_best_size=20, max_answer_length=30,
               version_2_with_negative=False, null_score_diff_threshold=0.0, scoring="auto",
               export_format=onnx_export.ExportFormat(), decoding_overrides=None):
    self.export_format = export_format
    self.decoding_overrides = dict(decoding_overrides or {})
    self.train_file = train_file
    self.predict_file = predict_file
    self.bert_config_file = bert_config_file
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.do_predict = do_predict
    self.max_seq_length = max_seq_length
    self.doc_stride = doc_stride
    self.max_query_length = max_query_length
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.version_2_with_negative = version_2_with_negative
    self.null_score_diff_threshold = null_score_diff_threshold
    self.scoring = scoring

  def model_settings(self):
    """The model_settings.json of a model trained with these settings (squad/serving.py)."""
    return squad_serving.squad_settings(
        self.do_lower_case, self.max_seq_length, self.doc_stride, self.max_query_length,
        self.max_answer_length, self.n_best_size, self.version_2_with_negative,
        self.null_score_diff_threshold)


def write_windows(examples, tokenizer, path, is_training, settings):
  """Writes the windows of `examples` to `path` and logs their counts.

  Args:
    settings: SquadSettings (the window sizes).

  Returns:
    (number of windows, their InputFeatures without id lists when predicting, else []).
  """
  counts = collections.Counter()
  with phases.timed("featurize"):
    num_features, features = squad_records.write_features(
        squad_data.convert_examples_to_features(
            examples, tokenizer, settings.max_seq_length, settings.doc_stride,
            settings.max_query_length, is_training, counts),
        path, is_training, keep_metadata=not is_training)
  tf.logging.info("%s: %s", path, ", ".join("%s %d" % kv for kv in sorted(counts.items())))
  return num_features, features


def _write_json(path, value):
  output_files.atomic_write_text(path, json.dumps(value, ensure_ascii=False, indent=4) + "\n")


def checkpoint_for_prediction(output_dir, init_checkpoint):
  """The checkpoint to predict with, checked to hold the span head, and why it is the one.
  Raises UsageError."""
  checkpoint, why = checkpoints.checkpoint_for_inference(output_dir, init_checkpoint)
  squad_model.check_head(checkpoint)
  return checkpoint, why


def write_prediction_files(output_dir, predictions, nbest, null_odds):
  """Writes predictions.json, nbest_predictions.json and (with null_odds, v2) null_odds.json.

  Files of an earlier run that this one does not write (eval_results.txt, null_odds.json)
  are removed once the new predictions are written, so none is left looking current, and
  a failed run leaves the old set whole.
  """
  _write_json(os.path.join(output_dir, "predictions.json"), predictions)
  _write_json(os.path.join(output_dir, "nbest_predictions.json"), nbest)
  stale = [output_files.EVAL_RESULTS_FILE]
  if null_odds is not None:
    _write_json(os.path.join(output_dir, "null_odds.json"), null_odds)
  else:
    stale.append("null_odds.json")
  for name in stale:
    path = os.path.join(output_dir, name)
    if tf.gfile.Exists(path):
      tf.gfile.Remove(path)
  tf.logging.info("Wrote %d predictions to %s", len(predictions),
                  os.path.join(output_dir, "predictions.json"))


class SquadTask(job.Task):
  """Reading comprehension (SQuAD v1.1/v2.0, CMRC 2018, DRCD) for job.run_job.

  Args:
    job_settings: run_settings.JobSettings.
    settings: SquadSettings.

  Attributes (once read_inputs() has run):
    bert_config: the modeling.BertConfig, checked against max_seq_length.
    tokenizer: the FullTokenizer, checked against bert_config.
  """

  def __init__(self, job_settings, settings):
    super(SquadTask, self).__init__(job_settings, settings)
    self.bert_config = self.tokenizer = None
    self.train_examples = []
    self.predict_examples = []
    self.train_record = None  # written by featurize() (write_windows) when there is training to do
    self.num_train_features = 0
    # The chief alone writes (and predicts) the questions to predict.
    self.predict_record = os.path.join(job_settings.output_dir, "predict.tf_record")
    self.predict_features = None  # on the chief, with do_predict

  def _checkpoint_for_prediction(self):
    return checkpoint_for_prediction(self.job_settings.output_dir,
                                     self.job_settings.init_checkpoint)

  def read_inputs(self):
    settings = self.settings
    self.bert_config = bert_files.load_bert_config(settings.bert_config_file,
                                                   settings.max_seq_length)
    self.tokenizer = bert_files.load_tokenizer(settings.vocab_file, settings.do_lower_case,
                                               self.bert_config, settings.bert_config_file)
    if self.job_settings.do_train:
      self.train_examples, _ = squad_data.read_squad_examples(
          settings.train_file, True, settings.version_2_with_negative)
      if not self.train_examples:
        raise UsageError("%s: no usable training question." % settings.train_file)
    if settings.do_predict:
      self.predict_examples, _ = squad_data.read_squad_examples(
          settings.predict_file, False, settings.version_2_with_negative)
      if not self.predict_examples:
        raise UsageError("%s: no question to predict." % settings.predict_file)

  def train_size(self):
    # Google counts steps in questions, not windows.
    return len(self.train_examples), "training questions"

  def check_start(self, config):
    """Predicting without training: the checkpoint to predict with must hold the span head.
    Training starts from a pretrained BERT, which has no head."""
    del config
    if self.settings.do_predict and not self.job_settings.do_train:
      self._checkpoint_for_prediction()

  def check_head(self, checkpoint, model_settings):
    del model_settings  # one head whatever the settings
    squad_model.check_head(checkpoint)

  def write_model_files(self):
    s = self.settings
    model_files.save_model_files(self.job_settings.output_dir, s.vocab_file,
                                 s.bert_config_file, s.model_settings())

  def model_files_to_export(self):
    """The trained model's files, with the decoding settings given on an export-only
    command line in place of the trained ones."""
    files = model_files.find_model_files(
        self.job_settings.output_dir, "train it with this version of run_squad_mgpu.py "
        "--do_train, which saves them there.", (squad_serving.SQUAD_KIND,))
    if not self.settings.decoding_overrides:
      return files
    settings = collections.OrderedDict(files.settings)
    if ("null_score_diff_threshold" in self.settings.decoding_overrides and
        not settings["version_2_with_negative"]):
      raise UsageError("--null_score_diff_threshold: the model in %s was trained without "
                       "--version_2_with_negative, so it always answers with a span; drop "
                       "--null_score_diff_threshold." % self.job_settings.output_dir)
    for name, value in sorted(self.settings.decoding_overrides.items()):
      if settings[name] != value:
        tf.logging.info("Exporting with %s=%s (trained with %s).", name, value, settings[name])
      settings[name] = value
    return files._replace(settings=settings)

  def featurize(self, config):
    """The questions to predict (the chief), then the training questions, unless a
    single-process run finds training already finished (runner.train says so)."""
    if self.settings.do_predict and config.is_chief:  # the chief predicts
      _, self.predict_features = write_windows(self.predict_examples, self.tokenizer,
                                               self.predict_record, False, self.settings)
    # Several workers all enter runner.train, which tells them when there is nothing to do.
    if not self.job_settings.do_train or (config.cluster is None and
                                          checkpoints.training_finished(config, log=False)):
      return
    self.train_record = os.path.join(config.cache_dir, "train.tf_record")
    self.num_train_features, _ = write_windows(self.train_examples, self.tokenizer,
                                               self.train_record, True, self.settings)
    tf.logging.info("%d training questions in %d windows.", len(self.train_examples),
                    self.num_train_features)

  def make_model_fn(self):
    return squad_model.create_model_fn(self.bert_config, self.settings.max_seq_length)

  def make_train_dataset(self, config):
    spec = squad_records.input_feature_spec(self.settings.max_seq_length, is_training=True)
    return lambda skip: tfrecord_io.make_dataset(
        [self.train_record], spec, config.micro_batch_size, is_training=True,
        seed=config.random_seed, shuffle_buffer=min(self.num_train_features, 100000),
        skip_batches=skip, length_multiple=config.length_multiple,
        group_by_length=config.group_by_length)

  def make_inference(self, config, model_fn):
    """The runner.Inference "predict" of output_dir/predict.tf_record (the chief, with
    do_predict), which runner.train runs in its session when this process trains."""
    if self.predict_features is None:
      return None
    spec = squad_records.input_feature_spec(self.settings.max_seq_length, is_training=False)
    make_dataset = lambda: tfrecord_io.make_dataset(
        [self.predict_record], spec, config.global_predict_batch_size, is_training=False,
        length_multiple=config.length_multiple)
    return runner.Inference(
        config, model_fn, {"predict": (make_dataset, config.global_predict_batch_size)},
        self._checkpoint_for_prediction)

  def evaluate_and_predict(self, config, model_fn, inference):
    if inference is not None:
      self.predict(inference)

  def predict(self, inference):
    """Predicts every question on every tower (or takes runner.train's predictions);
    writes the prediction files and, when the file has answers, eval_results.txt."""
    settings, examples, features = self.settings, self.predict_examples, self.predict_features
    checkpoint, _ = inference.checkpoint()
    tf.logging.info("Predicting %d questions in %d windows with %s.", len(examples),
                    len(features), checkpoint)
    outputs = inference.outputs("predict")
    expected_ids = [feature.unique_id for feature in features]
    if list(outputs["unique_ids"]) != expected_ids:
      raise AssertionError("prediction outputs are not in feature order")
    predictions, nbest, null_odds = squad_data.predict_answers(
        examples, features, outputs["start_logits"], outputs["end_logits"],
        settings.n_best_size, settings.max_answer_length, settings.version_2_with_negative,
        settings.null_score_diff_threshold)
    if not settings.version_2_with_negative:
      null_odds = None
    write_prediction_files(self.job_settings.output_dir, predictions, nbest, null_odds)
    unscored = sum(1 for e in examples if not e.gold_answers)
    if unscored == len(examples):
      tf.logging.info("%s has no answers: not scored.", settings.predict_file)
      return
    if unscored:
      tf.logging.warning("%d of %d questions have no answers and are not scored.", unscored,
                         len(examples))
    scoring = (settings.scoring if settings.scoring != "auto"
               else squad_scoring.choose_scoring(examples))
    tf.logging.info("Scoring %d questions with %s's rules.", len(examples) - unscored,
                    scoring)
    results = squad_scoring.score_predictions(examples, predictions, scoring, null_odds, nbest)
    runner.write_eval_results(self.job_settings.output_dir, results, checkpoint)
