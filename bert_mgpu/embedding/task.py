# coding=utf-8
"""The sentence-embedding job (run_embedding_mgpu.py): its settings and its job.Task.

- EmbeddingSettings: the data, the loss and its constants, the pooling, the outputs.
- EmbeddingTask: reads the splits (embedding/data.py) and checks that they feed the loss,
  writes their records (embedding/records.py), trains the encoder (embedding/model.py)
  with the loss over the global batch, evaluates (embedding/metrics.py: Spearman and
  Pearson of scored dev pairs, else the share of anchors whose positive ranks first),
  writes predict.txt (one cosine per test pair) and --embed_file's embeddings.
"""

import json
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bert_mgpu import bert_files
from bert_mgpu.data import output_files
from bert_mgpu.data import text_files
from bert_mgpu.data import tfrecord_io
from bert_mgpu.embedding import data
from bert_mgpu.embedding import losses
from bert_mgpu.embedding import metrics
from bert_mgpu.embedding import model as embedding_model
from bert_mgpu.embedding import records
from bert_mgpu.embedding import serving as embedding_serving
from bert_mgpu.errors import UsageError
from bert_mgpu.serving import model_files
from bert_mgpu.serving import onnx_export
from bert_mgpu.training import checkpoints
from bert_mgpu.training import job
from bert_mgpu.training import phases
from bert_mgpu.training import runner

EMBEDDING_KIND = embedding_serving.EMBEDDING_KIND
BEST_METRICS = ("spearman", "pearson", "top1")
EMBEDDINGS_FILE, EMBEDDED_TEXTS_FILE = "embeddings.npy", "embeddings.txt"
# --positive_threshold's default: the top fifth of the training scores' range (4 on a 0-5
# scale, 1 for 0/1 labels).
DEFAULT_POSITIVE_SHARE = 0.8


class EmbeddingSettings(object):
  """run_embedding_mgpu.py's options (the flags of the same names).

  Attributes:
    data_dir, data_format: the splits' directory and layout (embedding/data.py).
    bert_config_file, vocab_file, do_lower_case, max_seq_length: the model and its inputs
      (max_seq_length applies to each text).
    do_eval, do_predict: evaluate the dev set, predict the test set.
    loss, cosent_scale, temperature: the loss (embedding/losses.py) and its constants.
    positive_threshold: in_batch on scored pairs: the lowest score of a trained pair (None:
      DEFAULT_POSITIVE_SHARE of the training scores' range).
    hard_negatives, hard_negatives_given: in_batch on triplets: the hard negatives each
      anchor takes; whether the flag was given (refused on other data).
    pooling, normalize_embeddings: the sentence vector and whether it is served unit-length.
    best_metric, best_metric_given: the dev metric of best/; whether the flag was given.
    early_stopping_patience: evaluations without a better best_metric before stopping.
    embed_file: a file of texts whose embeddings the run writes (None: none).
    export_format: what --export_dir gets (serving/onnx_export.ExportFormat).
    given_flags: the names of the flags the command line gave (a run without training
      takes the others among pooling, normalize_embeddings, max_seq_length and
      do_lower_case from the trained model's model_settings.json).
  """

  def __init__(self, data_dir=None, data_format="auto", bert_config_file=None,
               vocab_file=None, do_lower_case=True, max_seq_length=64, do_eval=False,
               do_predict=False, loss=losses.COSENT, cosent_scale=20.0, temperature=0.05,
               positive_threshold=None, hard_negatives=1, hard_negatives_given=False,
               pooling=embedding_model.MEAN,
               normalize_embeddings=True, best_metric="spearman", best_metric_given=False,
               early_stopping_patience=0, embed_file=None, given_flags=(),
               export_format=onnx_export.ExportFormat()):
    self.data_dir, self.data_format = data_dir, data_format
    self.bert_config_file, self.vocab_file = bert_config_file, vocab_file
    self.do_lower_case, self.max_seq_length = do_lower_case, max_seq_length
    self.do_eval, self.do_predict = do_eval, do_predict
    self.loss, self.cosent_scale, self.temperature = loss, cosent_scale, temperature
    self.positive_threshold, self.hard_negatives = positive_threshold, hard_negatives
    self.hard_negatives_given = hard_negatives_given
    self.pooling, self.normalize_embeddings = pooling, normalize_embeddings
    self.best_metric, self.best_metric_given = best_metric, best_metric_given
    self.early_stopping_patience = early_stopping_patience
    self.embed_file = embed_file
    self.export_format = export_format
    self.given_flags = frozenset(given_flags)

  def model_settings(self):
    """model_settings.json: the kind, the text settings, the pooling and normalisation."""
    return {"model": EMBEDDING_KIND, "do_lower_case": self.do_lower_case,
            "max_seq_length": self.max_seq_length, "pooling": self.pooling,
            "normalize_embeddings": self.normalize_embeddings}


def _training_examples(text_set, settings):
  """(examples (texts, score, label id), texts per record the loss reads, number of
  classes, a log line) of the training split, or UsageError when it cannot feed the loss."""
  loss, path = settings.loss, text_set.path
  if loss == losses.COSENT:
    if text_set.data_format != data.PAIRS or not text_set.scored:
      raise UsageError("--loss=cosent trains on pairs with a score; %s holds %s. Give "
                       "text_a<TAB>text_b<TAB>score lines, or use --loss=in_batch." % (
                           path, _described(text_set)))
    return ([(r.texts, r.score, None) for r in text_set.records], 2, 0,
            "%d scored pairs" % len(text_set.records))
  if loss == losses.SOFTMAX:
    if text_set.data_format != data.PAIRS or not text_set.scored:
      raise UsageError("--loss=softmax trains on pairs with an integer class label; %s "
                       "holds %s." % (path, _described(text_set)))
    for r in text_set.records:
      if r.score != int(r.score) or r.score < 0:
        raise text_files.line_error(
            path, r.line, "the label %s is not a class id (0, 1, 2...)" % r.score,
            "--loss=softmax takes integer labels; for graded scores use --loss=cosent")
    classes = int(max(r.score for r in text_set.records)) + 1
    if classes < 2:
      raise UsageError("--loss=softmax: %s has one class only (label 0); it needs two or "
                       "more." % path)
    return ([(r.texts, None, int(r.score)) for r in text_set.records], 2, classes,
            "%d labelled pairs, %d classes" % (len(text_set.records), classes))
  # in_batch
  if settings.hard_negatives_given and text_set.data_format != data.TRIPLETS:
    raise UsageError("--hard_negatives is read with triplets; %s holds %s: drop it." % (
        path, _described(text_set)))
  if settings.positive_threshold is not None and not (
      text_set.data_format == data.PAIRS and text_set.scored):
    raise UsageError("--positive_threshold is read with scored pairs; %s holds %s: drop it."
                     % (path, _described(text_set)))
  if text_set.data_format == data.SENTENCES:
    return ([(r.texts, None, None) for r in text_set.records], 2, 0,
            "%d sentences, each encoded twice (unsupervised)" % len(text_set.records))
  if text_set.data_format == data.TRIPLETS:
    h = settings.hard_negatives
    for r in text_set.records:
      if len(r.texts) - 2 < h:
        raise text_files.line_error(
            path, r.line, "%d hard negative(s), --hard_negatives=%d" % (len(r.texts) - 2, h),
            "give each anchor that many, or lower --hard_negatives")
    return ([(r.texts[:2 + h], None, None) for r in text_set.records], 2 + h, 0,
            "%d triplets, %d hard negative(s) each" % (len(text_set.records), h))
  if not text_set.scored:
    return ([(r.texts, None, None) for r in text_set.records], 2, 0,
            "%d pairs, each second text its first's positive" % len(text_set.records))
  threshold = settings.positive_threshold
  scores = [r.score for r in text_set.records]
  if threshold is None:
    threshold = min(scores) + DEFAULT_POSITIVE_SHARE * (max(scores) - min(scores))
  kept = [(r.texts, None, None) for r in text_set.records if r.score >= threshold]
  if not kept:
    raise UsageError("--loss=in_batch: no pair of %s scores at least %g (--positive_threshold)."
                     % (path, threshold))
  return (kept, 2, 0, "%d of %d scored pairs (score >= %g, --positive_threshold)" % (
      len(kept), len(text_set.records), threshold))


# The model_settings.json fields a run without training takes from the trained model.
_TRAINED_SETTINGS = ("pooling", "normalize_embeddings", "max_seq_length", "do_lower_case")


def _read_json_object(path):
  """The JSON object of a settings file. Raises UsageError naming it."""
  try:
    value = json.loads(model_files.read_utf8(path))
  except (OSError, ValueError) as e:
    raise UsageError("%s: cannot read it as JSON (%s)." % (path, e))
  return value


def _adopt_settings(values, path, names, refused, settings, whose):
  """Takes each of `names` from `values` (a settings file's dict, read from `path`) when
  the command line did not give it, with a log line; one of `refused` given with another
  value is refused in one line (whose: "the model in DIR", for the messages)."""
  for name in names:
    if name not in values or values[name] == getattr(settings, name):
      continue
    if name in settings.given_flags:
      if name in refused:
        raise UsageError("--%s=%s, but %s has %s = %s (%s): drop the flag or give that "
                         "value." % (name, getattr(settings, name), whose, name, values[name],
                                     path))
      continue
    tf.logging.info("Using %s = %s of %s (%s).", name, values[name], whose, path)
    setattr(settings, name, values[name])


def _adopt_trained_settings(output_dir, settings):
  """A run on a trained output_dir (no --do_train) uses its model_settings.json: each of
  _TRAINED_SETTINGS not given on the command line is taken from it (and logged); one
  given with another value, or another kind of model, is refused in one line."""
  path = os.path.join(output_dir or "", model_files.SETTINGS_FILE)
  if not output_dir or not os.path.isfile(path):
    return
  trained = _read_json_object(path)
  if not isinstance(trained, dict) or trained.get("model") != EMBEDDING_KIND:
    raise UsageError("%s is not an embedding model's (model: %r): give run_embedding_mgpu.py "
                     "an output_dir it trained." % (path, trained.get("model") if isinstance(
                         trained, dict) else trained))
  _adopt_settings(trained, path, _TRAINED_SETTINGS, _TRAINED_SETTINGS, settings,
                  "the model in %s" % output_dir)


# The start settings a run takes from embedding_settings.json beside --init_checkpoint; the
# first two are refused when given otherwise (the converted model was trained with them).
_START_SETTINGS = ("pooling", "normalize_embeddings", "do_lower_case", "max_seq_length")
_START_SETTINGS_FIXED = ("pooling", "normalize_embeddings", "do_lower_case")


def adopt_start_settings(init_checkpoint, settings):
  """A run starting from a model converted from sentence-transformers' format
  (convert_checkpoint.py --to=tensorflow) takes its pooling, normalisation, lower-casing and
  max_seq_length from the embedding_settings.json beside the checkpoint, unless the
  command line gives them; the first three given with another value are refused in one
  line."""
  if not init_checkpoint:
    return
  path = os.path.join(os.path.dirname(init_checkpoint), embedding_model.START_SETTINGS_FILE)
  if not os.path.isfile(path):
    return
  start = _read_json_object(path)
  if not isinstance(start, dict) or start.get("pooling", embedding_model.MEAN) not in (
      embedding_model.POOLINGS):
    raise UsageError("%s: expected {\"pooling\": one of %s, ...}; convert the model again "
                     "with convert_checkpoint.py --to=tensorflow." % (
                         path, ", ".join(embedding_model.POOLINGS)))
  _adopt_settings(start, path, _START_SETTINGS, _START_SETTINGS_FIXED, settings,
                  "the model at --init_checkpoint")


def _check_evaluated_split(text_set, split):
  """A dev or test set: pairs or triplets, every record with as many texts (the records of
  a set share one shape)."""
  if text_set.data_format == data.SENTENCES:
    raise UsageError("%s holds single sentences: a %s set needs pairs (with a score to give "
                     "Spearman) or triplets. For embeddings of sentences use --embed_file." %
                     (text_set.path, split))
  first = text_set.records[0]
  for record in text_set.records:
    if len(record.texts) != len(first.texts):
      raise text_files.line_error(
          text_set.path, record.line, "%d hard negative(s), line %d has %d" % (
              len(record.texts) - 2, first.line, len(first.texts) - 2),
          "give every anchor of a %s set the same number" % split)


def _described(text_set):
  return "%s%s" % ("scored " if text_set.scored else "", text_set.data_format)


class EmbeddingTask(job.Task):
  """The embedding job's steps of job.run_job.

  Attributes (once read_inputs() has run):
    bert_config, tokenizer: the model's.
    splits: dict split -> data.TextSet.
    train_examples: (texts, score, label id) the loss trains on.
    texts_per_record: the training records' texts as the loss reads them.
    num_labels: the softmax loss's classes (0 for the others).
    embed_texts: --embed_file's (line number, text), blank lines left out.
  """

  def __init__(self, job_settings, settings):
    super(EmbeddingTask, self).__init__(job_settings, settings)
    self.bert_config = self.tokenizer = None
    self.splits, self.train_examples = {}, []
    self.texts_per_record, self.num_labels = 2, 0
    self.embed_texts, self._embed_blank_lines = [], 0
    self._record_files = {}
    self._record_texts = {}

  def read_inputs(self):
    s, js = self.settings, self.job_settings
    if not js.do_train:
      _adopt_trained_settings(js.output_dir, s)
    self.bert_config = bert_files.load_bert_config(s.bert_config_file, s.max_seq_length)
    self.tokenizer = bert_files.load_tokenizer(s.vocab_file, s.do_lower_case, self.bert_config,
                                               s.bert_config_file)
    for split, wanted in (("train", js.do_train), ("dev", s.do_eval), ("test", s.do_predict)):
      if wanted:
        text_set = data.read_split(data.split_file(s.data_dir, split), s.data_format)
        tf.logging.info("%s: %d %s%s%s", text_set.path, len(text_set.records),
                        "scored " if text_set.scored else "", text_set.data_format,
                        " (--data_format=auto chose it)" if s.data_format == "auto" else "")
        self.splits[split] = text_set
    if "train" in self.splits:
      (self.train_examples, self.texts_per_record, self.num_labels,
       line) = _training_examples(self.splits["train"], s)
      tf.logging.info("Training on %s.", line)
    for split in ("dev", "test"):
      if split in self.splits:
        _check_evaluated_split(self.splits[split], split)
    if s.do_eval:
      self._check_best_metric()
    if s.embed_file:
      lines = list(text_files.text_lines(s.embed_file))
      self.embed_texts = [(n, t) for n, t in lines if t.strip()]
      self._embed_blank_lines = len(lines) - len(self.embed_texts) - (lines[-1][1] == "")
      if not self.embed_texts:
        raise UsageError("--embed_file=%s has no text." % s.embed_file)

  def _check_best_metric(self):
    s = self.settings
    scored = self.splits["dev"].scored
    if scored and s.best_metric == "top1":
      raise UsageError("--best_metric=top1 is for a dev set without scores; %s has them: "
                       "use spearman or pearson." % self.splits["dev"].path)
    if not scored and s.best_metric != "top1":
      if s.best_metric_given:
        raise UsageError("--best_metric=%s needs scores in %s; use --best_metric=top1." % (
            s.best_metric, self.splits["dev"].path))
      s.best_metric = "top1"
      tf.logging.info("%s has no scores: dev reports top1 (the share of anchors whose "
                      "positive ranks first), and best/ follows it.", self.splits["dev"].path)

  def train_size(self):
    return len(self.train_examples), "training examples"

  def check_start(self, config):
    """A run that only evaluates, predicts or embeds has a checkpoint to use (before
    output_dir is claimed)."""
    if not self.job_settings.do_train:
      checkpoints.checkpoint_for_inference(config.output_dir, config.init_checkpoint,
                                           best_subdir=checkpoints.BEST_SUBDIR)

  def write_model_files(self):
    s = self.settings
    model_files.save_model_files(self.job_settings.output_dir, s.vocab_file,
                                 s.bert_config_file, s.model_settings())

  def model_files_to_export(self):
    return model_files.find_model_files(
        self.job_settings.output_dir, "train it with this version of run_embedding_mgpu.py "
        "--do_train, which saves them there.", (EMBEDDING_KIND,))

  def check_head(self, checkpoint, model_settings):
    """The encoder's weights (with pooling=pooler, the pooler's too) are in `checkpoint`;
    the softmax loss's classifier is training's only and not served."""
    needed = "bert/pooler/dense/kernel" if model_settings["pooling"] == (
        embedding_model.POOLER) else "bert/embeddings/word_embeddings"
    if not tf.train.load_checkpoint(checkpoint).has_tensor(needed):
      raise UsageError("%s has no %s: it is not a BERT encoder with the pooling %s. Point "
                       "--output_dir at a run_embedding_mgpu.py output_dir." % (
                           checkpoint, needed, model_settings["pooling"]))

  def featurize(self, config):
    s = self.settings
    inputs = {}
    if self.train_examples:
      inputs["train"] = self.train_examples
    for split in ("dev", "test"):
      if split in self.splits:
        inputs[split] = [(r.texts, r.score, None) for r in self.splits[split].records]
    if self.embed_texts:
      inputs["embed"] = [((t,), None, None) for _, t in self.embed_texts]
    tf.io.gfile.makedirs(config.cache_dir)
    with phases.timed("featurize"):
      for split, examples in inputs.items():
        path = os.path.join(config.cache_dir, "embedding-%s.tf_record" % split)
        count, cut = records.write_records(path, examples, self.tokenizer, s.max_seq_length)
        if cut:
          tf.logging.info("%s: %d text(s) cut to --max_seq_length=%d.", split, cut,
                          s.max_seq_length)
        self._record_files[split] = path
        self._record_texts[split] = len(examples[0][0])
        tf.logging.info("%s: %d records in %s", split, count, path)

  def _spec(self, split):
    scored = split == "train" and self.settings.loss == losses.COSENT or (
        split in ("dev", "test") and self.splits[split].scored)
    return records.feature_spec(self._record_texts[split], self.settings.max_seq_length,
                                scored=scored,
                                labelled=split == "train" and self.settings.loss == losses.SOFTMAX)

  def make_model_fn(self):
    s = self.settings
    return embedding_model.create_model_fn(self.bert_config, s.pooling, self.texts_per_record,
                                           s.loss, self.num_labels, s.cosent_scale,
                                           s.temperature)

  def make_train_dataset(self, config):
    return lambda skip: tfrecord_io.make_dataset(
        [self._record_files["train"]], self._spec("train"), config.micro_batch_size,
        is_training=True, seed=self.job_settings.random_seed,
        shuffle_buffer=min(len(self.train_examples), 100000), skip_batches=skip,
        length_multiple=config.length_multiple, group_by_length=config.group_by_length)

  def make_inference(self, config, model_fn):
    def make_dataset(split, batch_size):
      return lambda: tfrecord_io.make_dataset(
          [self._record_files[split]], self._spec(split), batch_size, is_training=False,
          length_multiple=config.length_multiple)
    datasets = {}
    for name, split, batch_size in (("eval", "dev", config.global_eval_batch_size),
                                    ("predict", "test", config.global_predict_batch_size),
                                    ("embed", "embed", config.global_predict_batch_size)):
      if split in self._record_files:
        datasets[name] = (make_dataset(split, batch_size), batch_size)
    return runner.Inference(config, model_fn, datasets,
                            lambda: checkpoints.checkpoint_for_inference(
                                config.output_dir, config.init_checkpoint,
                                best_subdir=checkpoints.BEST_SUBDIR))

  def eval_spec(self, config, inference):
    if not self.settings.do_eval:
      return None
    return runner.EvalSpec(inference.datasets["eval"][0],
                           lambda outputs: self._scores(outputs, config),
                           self.settings.best_metric, self.settings.early_stopping_patience)

  def _scores(self, outputs, config):
    """Spearman and Pearson (scored pairs) or top1, and the loss where the set feeds it."""
    s = self.settings
    scores = {}
    if "score" in outputs:
      cosines = metrics.pair_cosines(outputs["embeddings"])
      scores["spearman"] = metrics.spearman(cosines, outputs["score"])
      scores["pearson"] = metrics.pearson(cosines, outputs["score"])
    else:
      scores["top1"] = metrics.top1(outputs["embeddings"], outputs["text_ids"])
    loss = metrics.mean_batch_loss(s.loss, outputs, config.global_eval_batch_size,
                                   s.cosent_scale, s.temperature)
    if loss is not None:
      scores["loss"] = loss
    return scores

  def evaluate_and_predict(self, config, model_fn, inference):
    s, output_dir = self.settings, self.job_settings.output_dir
    if not (s.do_eval or s.do_predict or self.embed_texts):
      return
    checkpoint, why = inference.checkpoint()
    tf.logging.info("Evaluating and predicting with %s (%s).", checkpoint, why)
    if s.do_eval:
      runner.write_eval_results(output_dir, self._scores(inference.outputs("eval"), config),
                                checkpoint)
    if s.do_predict:
      outputs = inference.outputs("predict")
      self._write_predictions(outputs)
      if self.splits["test"].scored:
        scores = self._scores(outputs, config)
        scores["global_step"] = checkpoints.checkpoint_global_step(checkpoint)
        output_files.atomic_write_text(os.path.join(output_dir, "test_results.txt"),
                                       output_files.format_key_values(scores))
    if self.embed_texts:
      self._write_embeddings(inference.outputs("embed"))

  def _write_predictions(self, outputs):
    """predict.txt: per test record, the cosine of text 0 with each later text (a pair:
    one cosine; a triplet: the positive's, then each negative's), tab-separated, in order."""
    embeddings = metrics.unit(outputs["embeddings"])
    cosines = np.sum(embeddings[:, :1] * embeddings[:, 1:], axis=-1)  # [n, texts - 1]
    lines = ["\t".join("%.6f" % c for c in row) for row in cosines]
    path = os.path.join(self.job_settings.output_dir, "predict.txt")
    output_files.atomic_write_text(path, "".join(line + "\n" for line in lines))
    tf.logging.info("Wrote %d predictions to %s", len(lines), path)

  def _write_embeddings(self, outputs):
    """embeddings.npy (float32 [texts, dim], unit-length with --normalize_embeddings) and
    embeddings.txt (the texts, in that order)."""
    vectors = outputs["embeddings"][:, 0].astype(np.float32)
    if self.settings.normalize_embeddings:
      vectors = metrics.unit(vectors).astype(np.float32)
    output_dir = self.job_settings.output_dir
    with output_files.atomic_path(os.path.join(output_dir, EMBEDDINGS_FILE)) as tmp:
      with open(tmp, "wb") as f:
        np.save(f, vectors)
    output_files.atomic_write_text(os.path.join(output_dir, EMBEDDED_TEXTS_FILE),
                                   "".join(t + "\n" for _, t in self.embed_texts))
    tf.logging.info("Wrote the embeddings of %d texts of %s to %s, their texts to %s "
                    "(%d blank lines left out).", len(vectors), self.settings.embed_file,
                    EMBEDDINGS_FILE, EMBEDDED_TEXTS_FILE, self._embed_blank_lines)
