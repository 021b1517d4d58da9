"""Names of BERT classifier weights in Hugging Face's PyTorch model and in Google's checkpoints.

Used to start both frameworks from the same weights (hf_finetune.py --init_npz and
--save_init_npz, checkpoint_npz.py), so that a difference in results can be split into
the initial weights and the training that follows. Needs neither torch nor TensorFlow.

The .npz files hold Google's names ("bert/encoder/layer_0/attention/self/query/kernel")
and Google's layouts: a dense kernel is [in, out], where torch's Linear weight is
[out, in]; the classifier's output_weights is [labels, hidden] in both.
"""

import re

# Parts of a transformers parameter name, in order, and their Google spelling.
_PARTS = (
    ("bert.", "bert/"),
    ("encoder.layer.", "encoder/layer_"),
    ("attention.self.", "attention/self/"),
    ("attention.output.", "attention/output/"),
    ("intermediate.", "intermediate/"),
    ("output.", "output/"),
    ("embeddings.", "embeddings/"),
    ("pooler.", "pooler/"),
    ("LayerNorm.weight", "LayerNorm/gamma"),
    ("LayerNorm.bias", "LayerNorm/beta"),
)


# The Google names this mapping may produce; anything else is a parameter it does not know.
_KNOWN_NAME = re.compile(
    r"^bert/(embeddings/(word|position|token_type)_embeddings"
    r"|(embeddings|encoder/layer_\d+/(attention/output|output))/LayerNorm/(gamma|beta)"
    r"|(encoder/layer_\d+/(attention/self/(query|key|value)|attention/output/dense"
    r"|intermediate/dense|output/dense)|pooler/dense)/(kernel|bias))$")


def google_name(hf_name, head_scope=""):
  """The Google checkpoint name of a BertForSequenceClassification parameter.

  Args:
    hf_name: e.g. "bert.encoder.layer.0.attention.self.query.weight".
    head_scope: the scope of the classifier head's variables ("" for Google's
      `output_weights`, "multi_label" for ours with --multi_label).

  Returns:
    (name, transpose): the Google name and whether the array must be transposed between
    the two layouts.

  Raises:
    ValueError: a parameter this mapping does not know.
  """
  prefix = head_scope + "/" if head_scope else ""
  if hf_name == "classifier.weight":
    return prefix + "output_weights", False
  if hf_name == "classifier.bias":
    return prefix + "output_bias", False
  name = hf_name
  if name.endswith("_embeddings.weight"):
    name = name[:-len(".weight")]
  for hf_part, google_part in _PARTS:
    name = name.replace(hf_part, google_part)
  name = re.sub(r"layer_(\d+)\.", r"layer_\1/", name)
  transpose = False
  if name.endswith(".weight"):
    name, transpose = name[:-len(".weight")] + "/kernel", True
  elif name.endswith(".bias"):
    name = name[:-len(".bias")] + "/bias"
  if not _KNOWN_NAME.match(name):
    raise ValueError("no Google name for the parameter %r (read as %r)" % (hf_name, name))
  return name, transpose
