# coding=utf-8
"""The pretraining task of run_pretraining_mgpu.py: what its job reads, trains on and
evaluates (bert_mgpu/training/job.py runs it).

The input is create_pretraining_data.py's records, already features: nothing is featurized.
The run trains what they hold (with next_sentence_labels the masked LM and next-sentence
prediction, without them the masked LM alone). Pretraining has no dev or test split:
evaluation, during training and with --do_eval after it, reads at most max_eval_steps
global batches of the input files, and no best/ checkpoint is kept.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.pretraining import model
from bert_mgpu.pretraining import records
from bert_mgpu.training import checkpoints
from bert_mgpu.training import job
from bert_mgpu.training import runner


class PretrainingSettings(object):
  """The pretraining options of a run (run_pretraining_mgpu.settings_from_flags builds it
  from the flags).

  Attributes:
    bert_config_file: bert_config.json of the model to train.
    input_file: comma-separated globs or directories of TFRecord files (--input_file).
    max_seq_length, max_predictions_per_seq: the lengths the records must have.
    max_eval_steps: the most global eval batches.
    do_eval: whether to evaluate (at each checkpoint when training, and at the end).
  """

  def __init__(self, bert_config_file, input_file, max_seq_length=128,
               max_predictions_per_seq=20, max_eval_steps=100, do_eval=False):
    self.bert_config_file = bert_config_file
    self.input_file = input_file
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self.max_eval_steps = max_eval_steps
    self.do_eval = do_eval


def describe_init_checkpoint(init_checkpoint, next_sentence):
  """Logs which parts of the model `init_checkpoint` gives and which start fresh.

  Args:
    init_checkpoint: a checkpoint prefix.
    next_sentence: bool, whether the model has the next-sentence head.
  """
  try:
    names = tf.train.load_checkpoint(init_checkpoint).get_variable_to_shape_map()
  except (tf.errors.OpError, ValueError):
    return  # the runner reports an unreadable checkpoint
  def holds(prefix):
    return any(name.startswith(prefix) for name in names)
  parts = [("the encoder (bert/)", holds("bert/")),
           ("the masked-LM head (cls/predictions)", holds("cls/predictions/"))]
  if next_sentence:
    parts.append(("the next-sentence head (cls/seq_relationship)",
                  holds("cls/seq_relationship/")))
  for part, held in parts:
    tf.logging.info("--init_checkpoint: %s %s.", part,
                    "is loaded from it" if held else "is not in it: initialised fresh")
  if not holds("cls/predictions/"):
    tf.logging.warning("%s has no masked-LM head (cls/predictions), as HFL's large checkpoints "
                       "have none usable: the head starts from random weights, so expect a "
                       "high masked-LM loss in the first steps.", init_checkpoint)
  if not next_sentence and holds("cls/seq_relationship/"):
    tf.logging.info("--init_checkpoint: its next-sentence head (cls/seq_relationship) is not "
                    "used: the records hold no next_sentence_labels.")


class PretrainingTask(job.Task):
  """Pretraining on create_pretraining_data.py's records.

  Attributes:
    settings: PretrainingSettings.
    bert_config: the modeling.BertConfig, checked against max_seq_length (read_inputs()).
    input_files: list of the TFRecord files (read_inputs()).
    next_sentence: bool, whether they hold next_sentence_labels (read_inputs()).
  """

  def __init__(self, job_settings, settings):
    super(PretrainingTask, self).__init__(job_settings, settings)
    self.bert_config = None
    self.input_files = None
    self.next_sentence = None

  def read_inputs(self):
    """Reads bert_config.json, finds the input files and checks their first records against
    the lengths; all must agree on whether they hold next_sentence_labels. Raises
    UsageError."""
    settings = self.settings
    self.bert_config = bert_files.load_bert_config(settings.bert_config_file,
                                                   settings.max_seq_length)
    self.input_files = tfrecord_io.expand_input_files(settings.input_file, ".tfrecord")
    self.next_sentence = records.records_task(self.input_files, settings.max_seq_length,
                                              settings.max_predictions_per_seq)

  def check_start(self, config):
    """Without --do_train, the checkpoint to evaluate must exist before output_dir is
    claimed."""
    del config
    if not self.job_settings.do_train:
      checkpoints.checkpoint_for_inference(self.job_settings.output_dir,
                                           self.job_settings.init_checkpoint)

  def featurize(self, config):
    """The records are the features: only says which they are and what they train."""
    del config
    tf.logging.info("Input: %d TFRecord file(s): %s", len(self.input_files),
                    ", ".join(self.input_files))
    if self.next_sentence:
      tf.logging.info("The records hold next_sentence_labels: training the masked LM and "
                      "next-sentence prediction.")
    else:
      tf.logging.info("The records hold no next_sentence_labels (--pretraining_task=mlm): "
                      "training the masked LM alone, without a next-sentence head.")

  def make_model_fn(self):
    return model.create_model_fn(self.bert_config, self.next_sentence)

  def _feature_spec(self):
    return records.input_feature_spec(self.settings.max_seq_length,
                                      self.settings.max_predictions_per_seq,
                                      self.next_sentence)

  def make_train_dataset(self, config):
    spec = self._feature_spec()
    return lambda skip: tfrecord_io.make_dataset(
        self.input_files, spec, config.micro_batch_size, is_training=True,
        seed=config.random_seed, skip_batches=skip, length_multiple=config.length_multiple)

  def _make_eval_dataset(self, config):
    """function() -> the eval dataset: the input files, at most max_eval_steps batches."""
    spec = self._feature_spec()
    def make_eval_dataset():
      return tfrecord_io.make_dataset(
          self.input_files, spec, config.global_eval_batch_size, is_training=False,
          length_multiple=config.length_multiple).take(self.settings.max_eval_steps)
    return make_eval_dataset

  def log_before_training(self, config):
    """Says what --init_checkpoint gives, when training starts from it (not resumes)."""
    del config
    if (self.job_settings.init_checkpoint and
        checkpoints.latest_checkpoint(self.job_settings.output_dir) is None):
      describe_init_checkpoint(self.job_settings.init_checkpoint, self.next_sentence)

  def eval_spec(self, config, inference):
    del inference
    if not self.settings.do_eval:
      return None
    # No best/ copy: pretraining keeps going from the latest checkpoint, and copying the
    # weights with their optimizer slots at every improvement only costs disk and time.
    return runner.EvalSpec(self._make_eval_dataset(config), records.pretraining_metrics,
                           None, None)

  def evaluate_and_predict(self, config, model_fn, inference):
    """With --do_eval: evaluates the latest checkpoint (else --init_checkpoint) on the input
    files and writes eval_results.txt."""
    del inference
    if not self.settings.do_eval:
      return
    checkpoint, _ = checkpoints.checkpoint_for_inference(self.job_settings.output_dir,
                                                         self.job_settings.init_checkpoint)
    tf.logging.info("Evaluating %s on at most %d batches of %d.", checkpoint,
                    self.settings.max_eval_steps, config.global_eval_batch_size)
    runner.evaluate(config, model_fn, self._make_eval_dataset(config), checkpoint,
                    records.pretraining_metrics)
