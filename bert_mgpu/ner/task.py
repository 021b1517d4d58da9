# coding=utf-8
"""The NER task unit: run_ner_mgpu.py's job as a job.Task (bert_mgpu/training/job.py).

- NerSettings: the task's options (the command builds it from its flags).
- NerTask: reads the splits and the tag list (bert_mgpu/ner/splits.py), featurizes the
  training split first (the steps count training windows), writes the tag list and the
  model files, every split's windows (on every run, no cache), trains the head of
  bert_mgpu/ner/model.py, then scores the dev set and writes the predictions
  (bert_mgpu/ner/predictions.py).
- Its export (job.Task.export, also alone: --export_dir without --do_*) serves the NER
  kind (ner/serving.py).

Outputs in output_dir: labels.txt, eval_results.txt, eval_report.txt and .json, predict.txt
(conll) or predict.json (cluener), predict_entities.jsonl.
"""

import os

import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu.data import cached_records
from bert_mgpu.data import label_files
from bert_mgpu.data import text_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.distillation import options as distillation_options
from bert_mgpu.distillation import teacher as teacher_lib
from bert_mgpu.distillation import teacher_outputs
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import featurizing
from bert_mgpu.ner import heads as ner_heads
from bert_mgpu.ner import predictions
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.ner import splits as ner_splits
from bert_mgpu.serving import model_files
from bert_mgpu.serving import onnx_export
from bert_mgpu.training import checkpoints
from bert_mgpu.training import job
from bert_mgpu.training import phases
from bert_mgpu.training import runner


class NerSettings(object):
  """The options of an NER run (run_ner_mgpu.py's flags of the same names).

  Attributes:
    data_dir, data_format: the data ("conll", "cluener" or "auto").
    vocab_file, bert_config_file, do_lower_case: the pre-trained model's files.
    max_seq_length, doc_stride: the windows of a sentence.
    ner_head: "tags" (a softmax per token), "crf" (a linear-chain CRF), or a span head,
      "global_pointer" or "efficient_global_pointer" (ner/global_pointer.py; entities may
      nest). use_crf=True means "crf" when ner_head is not given.
    do_eval, do_predict: score the dev set, predict the test set.
    best_metric, early_stopping_patience: the dev metric whose best checkpoint is kept,
      and the evaluations without a better one after which training stops (0: never).
    export_format: what --export_dir gets (serving/onnx_export.ExportFormat).
    head: the ner_head's family (ner/heads.py: TagHeads or SpanHeads), which the task
      asks for everything that differs between tags and spans.
    distillation: distillation.options.DistillationOptions (--teacher_dir and its flags;
      the tag head only).
  """

  def __init__(self, data_dir, vocab_file, bert_config_file, data_format="auto",
               do_lower_case=True, max_seq_length=128, doc_stride=64, use_crf=False,
               do_eval=False, do_predict=False, best_metric="f1", early_stopping_patience=0,
               export_format=onnx_export.ExportFormat(), ner_head=None,
               distillation=distillation_options.NO_DISTILLATION):
    self.export_format = export_format
    self.distillation = distillation
    self.data_dir = data_dir
    self.data_format = data_format
    self.vocab_file = vocab_file
    self.bert_config_file = bert_config_file
    self.do_lower_case = do_lower_case
    self.max_seq_length = max_seq_length
    self.doc_stride = doc_stride
    self.ner_head = ner_head or ("crf" if use_crf else "tags")
    self.head = ner_heads.for_head(self.ner_head)  # the family: tags/crf or spans
    self.do_eval = do_eval
    self.do_predict = do_predict
    self.best_metric = best_metric
    self.early_stopping_patience = early_stopping_patience

  def model_settings(self):
    """The model_settings.json of a model trained with these settings (ner/serving.py)."""
    return self.head.model_settings(self.do_lower_case, self.max_seq_length, self.doc_stride)


class NerTask(job.Task):
  """run_ner_mgpu.py's job: the hooks of job.Task.

  Args:
    job_settings: run_settings.JobSettings of the run.
    settings: NerSettings.

  Attributes (once read_inputs() has run):
    bert_config: the modeling.BertConfig, checked against max_seq_length.
    tokenizer: the FullTokenizer, checked against bert_config.
  """

  def __init__(self, job_settings, settings):
    super(NerTask, self).__init__(job_settings, settings)
    settings.head.check_options(job_settings.rdrop_alpha, settings.distillation.distills)
    self.bert_config = self.tokenizer = None
    self.splits = None  # split name -> ner_splits.Split
    self.data_format = self.label_list = self.scheme = None
    # Distillation (--teacher_dir): the teacher, the unlabelled sentences windowed, and the
    # records training reads (the training split's, or with the teacher's logits).
    self.teacher = None
    self._unlabeled_windows, self._train_records = [], None

  def read_inputs(self):
    s = self.settings
    self.bert_config = bert_files.load_bert_config(s.bert_config_file, s.max_seq_length)
    self.tokenizer = bert_files.load_tokenizer(s.vocab_file, s.do_lower_case,
                                               self.bert_config, s.bert_config_file)
    split_names = [name for name, wanted in (("train", self.job_settings.do_train),
                                             ("dev", s.do_eval), ("test", s.do_predict))
                   if wanted]
    self.splits, self.data_format, self.label_list, self.scheme = ner_splits.read_splits(
        s.data_dir, s.data_format, split_names, self.job_settings.output_dir, s.head.spans)
    self.max_spans = None  # span heads: the records' padded span count (featurize)
    if s.distillation.distills:
      self._read_teacher()

  def _read_teacher(self):
    """Reads and checks the teacher, windows the unlabelled sentences (one per line, a
    token per character, as predict_text.py reads texts), and sets where the student starts
    with --init_from_teacher_layers."""
    self.teacher = teacher_lib.prepare_teacher(
        (ner_serving.NER_KIND,), self.settings, self.label_list, self.bert_config,
        self.job_settings)
    unlabeled_file = self.settings.distillation.unlabeled_file
    if unlabeled_file:
      self._unlabeled_windows = self._unlabeled_sentence_windows(unlabeled_file)

  def _unlabeled_sentence_windows(self, path):
    """The windows of --unlabeled_file's sentences, a token per character. Refused when the
    training sentences' tokens are words (most longer than a character): their unlabelled
    text would not be tokenized as they are."""
    tokens = [token for sentence in self.splits["train"].data.sentences
              for token in sentence.tokens]
    if sum(len(token) > 1 for token in tokens) * 2 > len(tokens):
      raise UsageError("--unlabeled_file=%s: it is read a token per character (as "
                       "predict_text.py reads texts), but most training tokens are longer "
                       "than a character; distill without it." % path)
    texts = [line for _, line in text_files.text_lines(path) if line.strip()]
    if not texts:
      raise UsageError("--unlabeled_file=%s: no text in it; give one sentence per line, "
                       "or leave the flag out." % path)
    s = self.settings
    return [window for _, windows in featurizing.featurize_sentences(
        ner_serving.sentences_of_texts(texts), self.tokenizer, self.label_list,
        s.max_seq_length, s.doc_stride) for window in windows]

  def train_size(self):
    if not self.job_settings.do_train:
      return 0, "training windows"
    # Steps count training windows: featurize the training split first (in memory).
    ner_splits.featurize_split(self.splits["train"], self.tokenizer, self.label_list,
                               self.settings.max_seq_length, self.settings.doc_stride,
                               self.settings.head.spans)
    unlabeled = len(self._unlabeled_windows)
    return (len(self.splits["train"].windows) + unlabeled,
            "training windows" + (" (%d unlabelled)" % unlabeled if unlabeled else ""))

  def check_start(self, config):
    """A span head's scores must fit their bound. Without training, the checkpoint to tag
    with must hold the head (and the CRF with use_crf). Training starts from a pretrained
    BERT, which has no head."""
    s = self.settings
    batches = [(flag, size) for flag, size, wanted in (
        ("--train_batch_size", config.train_batch_size, self.job_settings.do_train),
        ("--eval_batch_size", config.eval_batch_size, s.do_eval),
        ("--predict_batch_size", config.predict_batch_size, s.do_predict)) if wanted]
    s.head.check_batches(batches, len(self.label_list), s.max_seq_length)
    if not self.job_settings.do_train:
      checkpoint, _ = checkpoints.checkpoint_for_inference(self.job_settings.output_dir,
                                                           self.job_settings.init_checkpoint,
                                                           checkpoints.BEST_SUBDIR)
      self.check_head(checkpoint, self.settings.model_settings())

  def check_head(self, checkpoint, model_settings):
    ner_heads.for_model_settings(model_settings).check_head(checkpoint)

  def write_model_files(self):
    s = self.settings
    label_files.write_label_file(self.job_settings.output_dir, self.label_list)
    model_files.save_model_files(self.job_settings.output_dir, s.vocab_file,
                                 s.bert_config_file, s.model_settings())

  def featurize(self, config):
    self.max_spans = ner_splits.featurize(
        self.splits, self.tokenizer, self.label_list, config.cache_dir,
        self.settings.max_seq_length, self.settings.doc_stride, self.settings.head.spans)
    self._train_records = self.splits["train"].record_file if "train" in self.splits else None
    if self.teacher is not None:
      self._train_records = self._stored_teacher_outputs(config)

  def _stored_teacher_outputs(self, config):
    """The training records with the teacher's logits (distillation/teacher_outputs.py),
    keyed by the records' content: NER's records are rewritten on every run, alike."""
    record_files = [(self.splits["train"].record_file, True)]
    if self._unlabeled_windows:
      path = os.path.join(config.cache_dir, "ner_unlabeled.tf_record")
      tfrecord_io.write_records_atomically(path,
                                           ner_splits.window_records(self._unlabeled_windows))
      record_files.append((path, False))
    sources = [(cached_records.file_sha256(path).hex(), path, labelled)
               for path, labelled in record_files]
    teacher_model_fn = self.settings.head.create_model_fn(
        self.teacher.bert_config, len(self.label_list), self.settings.max_seq_length, 0.0,
        emit_logits=True)
    return teacher_outputs.stored_teacher_outputs(sources, self.teacher, teacher_model_fn,
                                                  config, self._feature_spec(),
                                                  config.cache_dir)[0]

  def _feature_spec(self):
    return self.settings.head.feature_spec(self.settings.max_seq_length, self.max_spans)

  def make_model_fn(self):
    return self.settings.head.create_model_fn(
        self.bert_config, len(self.label_list), self.settings.max_seq_length,
        self.job_settings.rdrop_alpha, self.settings.distillation if self.teacher else None)

  def _shuffle_buffer(self):
    return min(len(self.splits["train"].windows) + len(self._unlabeled_windows), 100000)

  def make_train_dataset(self, config):
    spec, num_replicas = self._feature_spec(), config.num_towers * config.num_workers
    if self.teacher is not None:
      spec = teacher_outputs.training_feature_spec(
          spec, [self.settings.max_seq_length, len(self.label_list)])
    record_file, shuffle_buffer = self._train_records, self._shuffle_buffer()
    head = self.settings.head
    return lambda skip: head.training_dataset(tfrecord_io.make_dataset(
        [record_file], spec, config.micro_batch_size, is_training=True,
        seed=config.random_seed, shuffle_buffer=shuffle_buffer, skip_batches=skip,
        length_multiple=config.length_multiple, group_by_length=config.group_by_length),
        num_replicas)

  def log_before_training(self, config):
    log_tag_skew(config, self.splits["train"], len(self.label_list), self._shuffle_buffer(),
                 self.settings.head)

  def make_inference(self, config, model_fn):
    record_files = {name: split.record_file for name, split in self.splits.items()}
    return job.record_file_inference(config, model_fn, record_files, self._feature_spec(),
                                     self.settings.do_eval, self.settings.do_predict)

  def _metrics(self, outputs):
    """(metrics, full result) of the dev split's outputs."""
    return self.settings.head.metrics(self.splits["dev"], outputs, self.label_list,
                                      self.scheme)

  def eval_spec(self, config, inference):
    if not self.settings.do_eval:
      return None

    def dev_metrics(outputs):
      return self._metrics(outputs)[0]

    return runner.EvalSpec(inference.datasets["eval"][0], dev_metrics,
                           self.settings.best_metric, self.settings.early_stopping_patience)

  def evaluate_and_predict(self, config, model_fn, inference):
    """The dev scores and reports, and the test predictions, with the best (else latest)
    checkpoint (computed in the training session when this process trained)."""
    s, output_dir = self.settings, self.job_settings.output_dir
    if not (s.do_eval or s.do_predict):
      return
    checkpoint, why = inference.checkpoint()
    tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
    if s.do_eval:
      metrics, result = self._metrics(inference.outputs("eval"))
      runner.write_eval_results(output_dir, metrics, checkpoint,
                                lambda unused_metrics: s.head.eval_report(result))
    if s.do_predict:
      self._write_predictions(inference.outputs("predict"))

  def _write_predictions(self, outputs):
    test, output_dir = self.splits["test"], self.job_settings.output_dir
    tags, spans = self.settings.head.predicted(test, outputs, self.label_list, self.scheme)
    if tags is None and self.data_format == "conll":
      tf.logging.info("conll input with --ner_head=%s: the predictions are spans, which "
                      "tags cannot hold when they nest; they go to predict_entities.jsonl "
                      "(no predict.txt).", self.settings.ner_head)
    predictions.write_predictions(output_dir, test, self.data_format, tags, spans=spans)
    tf.logging.info("Wrote the predictions of %d sentences (%d entities) to %s",
                    len(spans), sum(len(s) for s in spans), output_dir)

  def model_files_to_export(self):
    return model_files.find_model_files(
        self.job_settings.output_dir, "train it with this version of run_ner_mgpu.py "
        "--do_train, which saves them there.",
        (ner_serving.NER_KIND, ner_serving.SPAN_KIND))


def log_tag_skew(config, split, num_labels, shuffle_buffer, head):
  """With --group_by_length, on the chief: logs how much grouping skews the label mix of the
  training batches (tfrecord_io.log_label_skew; a warning when it is marked). A window's
  targets are the head family's skew_targets: the shares of each tag among its tagged pieces
  (tag heads), or of each entity type among its spans (span heads)."""
  if not (config.group_by_length and config.is_chief):
    return
  with phases.timed("featurize"):
    lengths, tag_ids, tag_mask = featurizing.tag_skew_inputs(split.windows)
    targets = head.skew_targets(split, tag_ids, tag_mask, num_labels)  # [n, labels]
    tfrecord_io.log_label_skew(lengths, targets, config.micro_batch_size, shuffle_buffer,
                               noun=head.skew_noun)
