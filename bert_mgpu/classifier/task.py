# coding=utf-8
"""The classifier's job (run_classifier_mgpu.py): its settings and its job.Task.

- ClassifierSettings: the classifier's options (task, data, --multi_label, --long_text,
  --best_metric, ...), built from the flags by the run script.
- ClassifierTask: what bert_mgpu/training/job.py asks of a task: read the splits, the
  feature cache (its featurizing processes fork before the device check), the head
  (bert_mgpu/classifier/model.py), training with dev evaluation, then the eval report, the
  predictions (bert_mgpu/classifier/predictions.py) and the export.
  Its export (job.Task.export, also alone: --export_dir without --do_*) serves the
  classifier kind (classifier/serving.py).
"""

import contextlib

import tensorflow.compat.v1 as tf

from bert_mgpu.classifier import class_labels
from bert_mgpu.classifier import feature_cache
from bert_mgpu.classifier import featurizing
from bert_mgpu.classifier import input_examples
from bert_mgpu.classifier import metrics as classifier_metrics
from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.classifier import multi_label
from bert_mgpu.classifier import predictions
from bert_mgpu.classifier import records
from bert_mgpu.classifier import serving as classifier_serving
from bert_mgpu.classifier import task_registry
from bert_mgpu.classifier import unlabeled_examples
from bert_mgpu import bert_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.distillation import options as distillation_options
from bert_mgpu.distillation import teacher as teacher_lib
from bert_mgpu.distillation import teacher_outputs
from bert_mgpu.serving import onnx_export
from bert_mgpu.serving import model_files
from bert_mgpu.training import checkpoints
from bert_mgpu.training import job
from bert_mgpu.training import phases
from bert_mgpu.training import runner


class ClassifierSettings(object):
  """The classifier's options (run_classifier_mgpu.py's flags of the same names).

  Attributes:
    data_dir, task_name: the task's data and its processor (classifier/task_registry.py).
    bert_config_file, vocab_file, do_lower_case, max_seq_length: the model and its inputs.
    do_eval, do_predict: evaluate the dev set, predict the test set.
    best_metric, best_metric_given: --best_metric, and whether the command line gave it
      (with --multi_label the default is micro_f1).
    multi_label, label_separator: label sets, and the separator in the label fields.
    multi_label_threshold, multi_label_threshold_given: --multi_label_threshold, and
      whether the command line gave it (a model's thresholds.json is kept unless it did).
    literal_special_tokens: read [MASK], [SEP] and [UNK] in the texts as single tokens.
    long_text, head_tokens, doc_stride, max_windows, window_pooling: texts longer than
      max_seq_length (classifier/long_text.py).
    group_by_length_within_label: length groups within each label (single-label only).
    early_stopping_patience: evaluations without a better best_metric before stopping.
    num_workers: featurizing processes (0: all cores).
    clue_submission: also write the CLUE leaderboard's files (classifier/clue_submission.py).
    export_format: what --export_dir gets (serving/onnx_export.ExportFormat).
    distillation: distillation.options.DistillationOptions (--teacher_dir and its flags).
  """

  def __init__(self, data_dir=None, task_name=None, bert_config_file=None, vocab_file=None,
               do_lower_case=True, max_seq_length=128, do_eval=False, do_predict=False,
               best_metric="accuracy", best_metric_given=False, multi_label=False,
               label_separator=",", multi_label_threshold="0.5",
               multi_label_threshold_given=False, literal_special_tokens=False,
               long_text="truncate", head_tokens=None, doc_stride=64, max_windows=8,
               window_pooling="max", group_by_length_within_label=False,
               early_stopping_patience=0, num_workers=0, clue_submission=False,
               export_format=onnx_export.ExportFormat(),
               distillation=distillation_options.NO_DISTILLATION):
    self.export_format = export_format
    self.distillation = distillation
    self.data_dir, self.task_name = data_dir, task_name
    self.bert_config_file, self.vocab_file = bert_config_file, vocab_file
    self.do_lower_case, self.max_seq_length = do_lower_case, max_seq_length
    self.do_eval, self.do_predict = do_eval, do_predict
    self.best_metric, self.best_metric_given = best_metric, best_metric_given
    self.multi_label, self.label_separator = multi_label, label_separator
    self.multi_label_threshold = multi_label_threshold
    self.multi_label_threshold_given = multi_label_threshold_given
    self.literal_special_tokens = literal_special_tokens
    self.long_text, self.head_tokens = long_text, head_tokens
    self.doc_stride, self.max_windows = doc_stride, max_windows
    self.window_pooling = window_pooling
    self.group_by_length_within_label = group_by_length_within_label
    self.early_stopping_patience = early_stopping_patience
    self.num_workers = num_workers
    self.clue_submission = clue_submission

  def feature_options(self):
    return input_examples.FeatureOptions(
        self.literal_special_tokens, self.multi_label, self.label_separator, self.long_text,
        self.head_tokens, self.doc_stride, self.max_windows)

  def model_settings(self):
    """The model_settings.json of a model trained with these settings (predict_text.py
    reads it)."""
    return classifier_serving.classifier_settings(self.task_name, self.do_lower_case,
                                                  self.max_seq_length, self.feature_options(),
                                                  self.window_pooling)

  def best_metric_key(self):
    """The eval_results.txt key of --best_metric (multi_label.eval_results_key)."""
    return multi_label.eval_results_key(self.best_metric, self.best_metric_given,
                                        self.multi_label)

  def threshold_choice(self, do_train, output_dir):
    """The multi_label.ThresholdChoice of a run (training or not) on output_dir."""
    return multi_label.ThresholdChoice(self.multi_label_threshold,
                                       self.multi_label_threshold_given, do_train, output_dir)

  def grouping_strata(self):
    """The feature that --group_by_length batches hold in the data's proportions: the label
    of single-label classification (--group_by_length_within_label), else none."""
    if self.group_by_length_within_label and not self.multi_label:
      return "label_ids"
    return None

  def window_pooling_of_model(self):
    """--window_pooling for the head when the texts are read in windows, else None."""
    return self.window_pooling if self.long_text == "windows" else None


class ClassifierTask(job.Task):
  """The classifier's steps of job.run_job.

  Attributes (once read_inputs() has run):
    bert_config: modeling.BertConfig.
    splits: dict split ("train", "dev", "test") -> list of InputExample.
    label_list: the labels.
  """

  def __init__(self, job_settings, settings):
    super(ClassifierTask, self).__init__(job_settings, settings)
    self.bert_config = None
    self.processor = None
    self.splits, self.label_list = None, None
    self._caches, self._pool, self._record_files = None, None, None
    # Distillation (--teacher_dir): the teacher, the unlabelled examples, and the records
    # training reads (the training split's, or with the teacher's logits).
    self.teacher, self._unlabeled = None, []
    self._train_records = None

  def read_inputs(self):
    s = self.settings
    self.bert_config = bert_files.load_bert_config(s.bert_config_file, s.max_seq_length)
    bert_files.load_tokenizer(s.vocab_file, s.do_lower_case, self.bert_config,
                              s.bert_config_file, s.literal_special_tokens)
    featurizing.check_featurizing_inputs(s.max_seq_length, s.vocab_file)
    self.processor = task_registry.get_processor(
        s.task_name, s.label_separator if s.multi_label else None)
    self.splits, self.label_list = class_labels.read_splits(
        self.processor, s.data_dir, self.job_settings.output_dir,
        [split for split, wanted in (("train", self.job_settings.do_train), ("dev", s.do_eval),
                                     ("test", s.do_predict)) if wanted])
    if s.distillation.distills:
      self._read_teacher()

  def _read_teacher(self):
    """Reads and checks the teacher, the unlabelled examples, and where the student starts
    (--init_from_teacher_layers: the teacher's checkpoint, read under the layers' names)."""
    self.teacher = teacher_lib.prepare_teacher(
        (classifier_serving.CLASSIFIER_KIND,), self.settings, self.label_list,
        self.bert_config, self.job_settings)
    unlabeled_file = self.settings.distillation.unlabeled_file
    if unlabeled_file:
      self._unlabeled = unlabeled_examples.read_unlabeled_examples(
          unlabeled_file, any(example.text_b for example in self.splits["train"]))

  def _featurized_splits(self):
    """dict split -> examples of every split to featurize (the unlabelled ones too)."""
    if not self._unlabeled:
      return self.splits
    return dict(self.splits, **{unlabeled_examples.UNLABELED_SPLIT: self._unlabeled})

  def train_size(self):
    return (len(self.splits.get("train", ())) + len(self._unlabeled),
            "training examples" + (" (%d unlabelled)" % len(self._unlabeled)
                                   if self._unlabeled else ""))

  @contextlib.contextmanager
  def featurizing_processes(self, cache_dir):
    """Plans the feature cache, then forks the processes (only for a split without a valid
    cache, large enough) before the device check starts TensorFlow's GPU runtime; a refused
    check ends them and writes nothing."""
    s = self.settings
    with phases.timed("featurize"):  # hashing the inputs for the cache keys
      self._caches, self._pool = feature_cache.featurizing_plan(
          self._featurized_splits(), self.processor, s.data_dir, cache_dir, s.task_name,
          s.num_workers or None, label_list=self.label_list, max_seq_length=s.max_seq_length,
          vocab_file=s.vocab_file, do_lower_case=s.do_lower_case,
          options=s.feature_options(), input_files=(
              {unlabeled_examples.UNLABELED_SPLIT: [s.distillation.unlabeled_file]}
              if self._unlabeled else None))
    with self._pool:
      yield

  def check_start(self, config):
    # Training resumes output_dir's checkpoint, else starts from --init_checkpoint.
    job_settings = self.job_settings
    output_dir, init_checkpoint = job_settings.output_dir, job_settings.init_checkpoint
    start = (tf.train.latest_checkpoint(output_dir) or init_checkpoint if job_settings.do_train
             else checkpoints.checkpoint_for_inference(output_dir, init_checkpoint,
                                                       checkpoints.BEST_SUBDIR)[0])
    if start:
      self.check_head(start, self.settings.model_settings())

  def write_model_files(self):
    s = self.settings
    class_labels.write_label_list(self.job_settings.output_dir, self.label_list)
    model_files.save_model_files(self.job_settings.output_dir, s.vocab_file, s.bert_config_file,
                                 s.model_settings())

  def featurize(self, config):
    with phases.timed("featurize"):
      self._record_files = feature_cache.cached_split_features(
          self._featurized_splits(), self._caches, config.cache_dir, self._pool)
    self._train_records = self._record_files.get("train")
    if self.teacher is not None:
      sources = [(self._caches[split].key, self._record_files[split], labelled)
                 for split, labelled in (("train", True),
                                         (unlabeled_examples.UNLABELED_SPLIT, False))
                 if split in self._record_files]
      teacher_model_fn = classifier_model.model_fn_of(self.teacher.files,
                                                      self.teacher.bert_config)
      self._train_records = teacher_outputs.stored_teacher_outputs(
          sources, self.teacher, teacher_model_fn, config, self._feature_spec(),
          config.cache_dir)[0]

  def make_model_fn(self):
    return classifier_model.create_model_fn(self.bert_config, len(self.label_list),
                                            self.settings.multi_label,
                                            self.settings.window_pooling_of_model(),
                                            self.job_settings.rdrop_alpha,
                                            self.settings.distillation if self.teacher else None)

  def _feature_spec(self):
    s = self.settings
    return records.input_feature_spec(
        s.max_seq_length, len(self.label_list) if s.multi_label else None,
        s.long_text == "windows")

  def _shuffle_buffer(self):
    return min(len(self.splits["train"]) + len(self._unlabeled), 100000)

  def make_train_dataset(self, config):
    spec = self._feature_spec()
    if self.teacher is not None:
      spec = teacher_outputs.training_feature_spec(spec, [len(self.label_list)])
    return lambda skip: tfrecord_io.make_dataset(
        [self._train_records], spec, config.micro_batch_size, is_training=True,
        seed=self.job_settings.random_seed, shuffle_buffer=self._shuffle_buffer(),
        skip_batches=skip, length_multiple=config.length_multiple,
        group_by_length=config.group_by_length,
        stratify_by=self.settings.grouping_strata())

  def log_before_training(self, config):
    """With --group_by_length, on the chief: logs how much grouping skews the training
    batches' label mix (tfrecord_io.log_label_skew; a warning when it is marked), read from
    the training features before training starts."""
    if not (config.group_by_length and config.is_chief):
      return
    with phases.timed("featurize"):
      lengths, targets, strata = records.label_skew_inputs(
          self._record_files["train"], len(self.label_list), self.settings.multi_label,
          self.settings.grouping_strata() is not None)
      tfrecord_io.log_label_skew(lengths, targets, config.micro_batch_size,
                                 self._shuffle_buffer(), strata=strata)

  def make_inference(self, config, model_fn):
    return job.record_file_inference(config, model_fn, self._record_files,
                                     self._feature_spec(), self.settings.do_eval,
                                     self.settings.do_predict)

  def eval_spec(self, config, inference):
    if not self.settings.do_eval:
      return None
    return runner.EvalSpec(inference.datasets["eval"][0], self._dev_metrics,
                           self.settings.best_metric_key(),
                           self.settings.early_stopping_patience)

  def _threshold_choice(self):
    return self.settings.threshold_choice(self.job_settings.do_train, self.job_settings.output_dir)

  def _dev_metrics(self, outputs):
    return self._scores(outputs)[0]

  def _scores(self, outputs, thresholds=None):
    """(metrics, report) of eval outputs; multi-label ones with `thresholds`, by default
    this run's (tuned on these outputs with `tuned`)."""
    if not self.settings.multi_label:
      return classifier_metrics.classification_metrics(outputs, self.label_list)
    if thresholds is None:
      thresholds = self._threshold_choice().choose(outputs, self.label_list)[0]
    return multi_label.multi_label_metrics(outputs, self.label_list, thresholds)

  def evaluate_and_predict(self, config, model_fn, inference):
    """The dev metrics and reports, and the test predictions, with the best (else latest)
    checkpoint (computed in the training session when this process trained); without
    either, a multi-label run's thresholds."""
    s = self.settings
    if not (s.do_eval or s.do_predict):
      if s.multi_label:  # what export and predict_text.py will use
        self._threshold_choice().save(None, self.label_list)
      return
    checkpoint, why = inference.checkpoint()
    tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
    dev_outputs = None
    if s.do_eval:
      dev_outputs = inference.outputs("eval")
      metrics, report = self._scores(dev_outputs)  # with the thresholds save() keeps
      runner.write_eval_results(
          self.job_settings.output_dir, metrics, checkpoint,
          lambda results: predictions.eval_report(results, report, s.multi_label))
    thresholds = (self._threshold_choice().save(dev_outputs, self.label_list)
                  if s.multi_label else None)
    if s.do_predict:
      predictions.write_test_predictions(
          self.job_settings.output_dir, self.splits["test"], inference.outputs("predict"),
          self.label_list, thresholds, s.label_separator,
          s.task_name if s.clue_submission else None)

  def check_head(self, checkpoint, model_settings):
    classifier_model.check_head(checkpoint, bool(model_settings.get("multi_label", False)))

  def model_files_to_export(self):
    s = self.settings
    return classifier_serving.files_to_export(self.job_settings.output_dir, s.vocab_file,
                                              s.bert_config_file, s.model_settings())
