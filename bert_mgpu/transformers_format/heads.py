# coding=utf-8
"""The models that convert: each task's head and the transformers class that holds it.

A Head names the transformers class (config.json's `architectures`), its head variables
by Google's and transformers' names (from the task units), and whether that class has
BERT's pooler (BertForTokenClassification, BertForQuestionAnswering and BertForMaskedLM
have none: our models build it but never read it there).
"""

import collections

from bert_mgpu.classifier import model as classifier_model
from bert_mgpu.embedding import model as embedding_model
from bert_mgpu.ner import model as ner_model
from bert_mgpu.pretraining import model as pretraining_model
from bert_mgpu.squad import model as squad_model

Head = collections.namedtuple("Head", ["kind", "architecture", "names", "has_pooler"])
Head.__doc__ = """A model that converts.

Fields:
  kind: our name for it ("classifier", "multi_label", "ner", "squad", "pretraining",
    "masked_lm", "encoder").
  architecture: the transformers class, e.g. "BertForSequenceClassification".
  names: dict Google variable name -> transformers parameter name, for the head's variables.
  has_pooler: whether the transformers class holds bert.pooler.
"""

_PRETRAINING_NAMES = dict(pretraining_model.MASKED_LM_TRANSFORMERS_NAMES,
                          **pretraining_model.NEXT_SENTENCE_TRANSFORMERS_NAMES)

# In the order detect() tries them: a head is recognised when all its variables are there.
HEADS = (
    Head("multi_label", "BertForSequenceClassification",
         classifier_model.MULTI_LABEL_TRANSFORMERS_NAMES, True),
    Head("classifier", "BertForSequenceClassification", classifier_model.TRANSFORMERS_NAMES,
         True),
    Head("ner", "BertForTokenClassification", ner_model.TRANSFORMERS_NAMES, False),
    Head("squad", "BertForQuestionAnswering", squad_model.TRANSFORMERS_NAMES, False),
    Head("pretraining", "BertForPreTraining", _PRETRAINING_NAMES, True),
    Head("masked_lm", "BertForMaskedLM", pretraining_model.MASKED_LM_TRANSFORMERS_NAMES, False),
    Head("encoder", "BertModel", {}, True),
)

HEADS_BY_KIND = {head.kind: head for head in HEADS}

# The heads a --to=tensorflow conversion keeps without --keep_head: they do not depend on a
# label count, and every run script starts from them (the pretraining heads).
PRETRAINING_KINDS = ("pretraining", "masked_lm", "encoder")
# One per fine-tuned transformers class (multi-label is the classifier's problem_type).
FINE_TUNED_KINDS = ("classifier", "ner", "squad")


# Variable-name prefixes of heads that a task trains with but never predicts with (say, a
# classifier that only shapes an encoder's training): conversion leaves them out, listed in
# its summary, instead of refusing the model as it refuses any other variable that no
# transformers class receives. A unit adds its own here with the doc that says so.
TRAINING_ONLY_PREFIXES = (
    # Sentence-BERT's classifier of run_embedding_mgpu.py --loss=softmax (docs/EMBEDDINGS.md).
    embedding_model.SOFTMAX_SCOPE + "/",
)


def is_training_only(name):
  """Whether checkpoint variable `name` belongs to a head used only in training."""
  return name.startswith(TRAINING_ONLY_PREFIXES)


def detect(variable_names):
  """The first Head of HEADS whose variables are all among `variable_names`."""
  names = set(variable_names)
  for head in HEADS:
    if all(name in names for name in head.names):
      return head
  raise AssertionError("the encoder head has no variables, so it always matches")


def output_layer(head):
  """(weights, bias): Google's names of the two variables of a classification, tagging or
  QA head ([labels, hidden] and [labels])."""
  weights, bias = sorted(head.names, key=lambda name: name.endswith("bias"))
  return weights, bias


def fine_tuned_head(architecture):
  """The Head of a fine-tuned transformers class (sequence or token classification, QA),
  or None."""
  for kind in FINE_TUNED_KINDS:
    if HEADS_BY_KIND[kind].architecture == architecture:
      return HEADS_BY_KIND[kind]
  return None
