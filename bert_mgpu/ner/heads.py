# coding=utf-8
"""The two families of NER heads as the task unit (ner/task.py) sees them, one object each,
so that the task reads the same for every --ner_head:

- TagHeads ("tags", "crf"; ner/model.py): a tag per word piece. Records hold tag ids; the
  loss is the token mean over the global batch (loss weights); entities come from the tags.
- SpanHeads ("global_pointer", "efficient_global_pointer"; ner/global_pointer.py): a score
  per (type, start, end). Records hold span triples; the loss is the row mean of each tower
  (whole batches give every tower as many rows); entities may nest and no tags exist.

for_head(ner_head) and for_model_settings(settings) give the family's object.
"""

from bert_mgpu.data import length_grouping
from bert_mgpu.errors import UsageError
from bert_mgpu.ner import global_pointer
from bert_mgpu.ner import model as ner_model
from bert_mgpu.ner import predictions
from bert_mgpu.ner import scoring as ner_scoring
from bert_mgpu.ner import serving as ner_serving
from bert_mgpu.ner import span_windows
from bert_mgpu.ner import splits as ner_splits


DISTILL_NEEDS_TAGS = ("--teacher_dir with --ner_head=%s: distillation matches per-token tag "
                      "distributions, which only --ner_head=tags gives (a CRF's or a span "
                      "head's scores are not one); distill a tags student from a tags "
                      "teacher.")


class TagHeads(object):
  """--ner_head=tags or crf."""

  spans = False
  skew_noun = "tag"

  def __init__(self, ner_head):
    self.ner_head = ner_head
    self.use_crf = ner_head == "crf"

  def check_options(self, rdrop_alpha, distills):
    """UsageError (one line) for what the head cannot do: the CRF gives no per-token
    distributions for R-Drop or distillation to compare."""
    if self.use_crf and rdrop_alpha > 0:
      raise UsageError(ner_model.RDROP_WITH_CRF % rdrop_alpha)
    if self.use_crf and distills:
      raise UsageError(DISTILL_NEEDS_TAGS % self.ner_head)

  def model_settings(self, do_lower_case, max_seq_length, doc_stride):
    return ner_serving.ner_settings(do_lower_case, max_seq_length, doc_stride, self.use_crf)

  def check_batches(self, batches, num_labels, max_seq_length):
    """Nothing to bound: a tag head's outputs grow with batch x seq only."""

  def check_head(self, checkpoint):
    ner_model.check_head(checkpoint, self.use_crf)

  def feature_spec(self, max_seq_length, unused_max_spans):
    return ner_splits.feature_spec(max_seq_length)

  def create_model_fn(self, bert_config, num_labels, max_seq_length, rdrop_alpha,
                      distillation=None, emit_logits=False):
    return ner_model.create_model_fn(bert_config, num_labels, self.use_crf,
                                     max_seq_length=max_seq_length, rdrop_alpha=rdrop_alpha,
                                     distillation=distillation, emit_logits=emit_logits)

  def training_dataset(self, dataset, num_replicas):
    """The token mean over the global batch: per-token loss weights."""
    return ner_splits.with_loss_weights(dataset, num_replicas)

  def skew_targets(self, unused_split, tag_ids, tag_mask, num_labels):
    """[windows, tags]: the share of each tag among a window's tagged pieces."""
    return length_grouping.tag_shares(tag_ids, tag_mask, num_labels)

  def metrics(self, split, outputs, label_list, scheme):
    return predictions.ner_metrics(split, outputs, label_list, scheme, self.use_crf)

  def eval_report(self, result):
    return predictions.eval_report(result)

  def predicted(self, split, outputs, label_list, scheme):
    """(tags, spans) per sentence of the split: the decoded tags and their entities."""
    tags = predictions.sentence_tags(split, outputs["tag_ids"], label_list, scheme)
    return tags, [ner_scoring.entities(sentence_tags) for sentence_tags in tags]


class SpanHeads(object):
  """--ner_head=global_pointer or efficient_global_pointer."""

  spans = True
  skew_noun = "entity type"

  def __init__(self, ner_head):
    self.ner_head = ner_head
    self.use_crf = False

  def check_options(self, rdrop_alpha, distills):
    """UsageError (one line): a span head gives no per-token distributions for R-Drop or
    distillation to compare."""
    if rdrop_alpha > 0:
      raise UsageError(global_pointer.RDROP_WITH_SPANS % (rdrop_alpha, self.ner_head))
    if distills:
      raise UsageError(DISTILL_NEEDS_TAGS % self.ner_head)

  def model_settings(self, do_lower_case, max_seq_length, doc_stride):
    return ner_serving.span_settings(do_lower_case, max_seq_length, doc_stride, self.ner_head)

  def check_batches(self, batches, num_labels, max_seq_length):
    """Refuses (flag, per-tower batch) pairs whose scores exceed the memory bound."""
    global_pointer.check_score_memory(self.ner_head, batches, num_labels, max_seq_length)

  def check_head(self, checkpoint):
    global_pointer.check_head(checkpoint, self.ner_head)

  def feature_spec(self, max_seq_length, max_spans):
    return ner_splits.span_feature_spec(max_seq_length, max_spans)

  def create_model_fn(self, bert_config, num_labels, max_seq_length, unused_rdrop_alpha,
                      unused_distillation=None, unused_emit_logits=False):
    # A window outputs as many best pairs as it has positions: more spans above 0 than
    # that is logged (predictions.sentence_spans).
    return global_pointer.create_model_fn(bert_config, num_labels, self.ner_head,
                                          max_seq_length)

  def training_dataset(self, dataset, unused_num_replicas):
    return dataset

  def skew_targets(self, split, unused_tag_ids, unused_tag_mask, num_labels):
    """[windows, types]: the share of each entity type among a window's spans."""
    return span_windows.type_shares(split.window_spans, num_labels)

  def metrics(self, split, outputs, label_list, unused_scheme):
    return predictions.span_metrics(split, outputs, label_list)

  def eval_report(self, result):
    return predictions.span_eval_report(result)

  def predicted(self, split, outputs, label_list, unused_scheme):
    """(None, spans): span heads give no tags."""
    return None, predictions.sentence_spans(split, outputs, label_list)


def for_head(ner_head):
  """The family object of an --ner_head value."""
  if ner_head in global_pointer.SPAN_HEADS:
    return SpanHeads(ner_head)
  if ner_head not in ("tags", "crf"):
    raise ValueError("unknown NER head %r" % ner_head)
  return TagHeads(ner_head)


def for_model_settings(settings):
  """The family object of a model_settings.json's dict (ner/serving.py's two kinds)."""
  if settings["model"] == ner_serving.SPAN_KIND:
    return SpanHeads(settings["ner_head"])
  return TagHeads("crf" if settings["use_crf"] else "tags")
