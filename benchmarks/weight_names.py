"""Names of BERT classifier weights in Hugging Face's PyTorch model and in Google's checkpoints.

Used to start both frameworks from the same weights (hf_finetune.py --init_npz and
--save_init_npz, checkpoint_npz.py), so that a difference in results can be split into
the initial weights and the training that follows. Needs neither torch nor TensorFlow.
The BERT body's names come from bert_mgpu/transformers_format/weight_names.py.

The .npz files hold Google's names ("bert/encoder/layer_0/attention/self/query/kernel")
and Google's layouts: a dense kernel is [in, out], where torch's Linear weight is
[out, in]; the classifier's output_weights is [labels, hidden] in both.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The body's names are the package's (convert_checkpoint.py's); standard library only.
from bert_mgpu.transformers_format import weight_names  # pylint: disable=wrong-import-position

# The span heads' torch parameters (torch_span_heads.SpanHead as .head) -> (our variable
# under the head scope, transposed between the layouts): bert_mgpu/ner/global_pointer.py.
SPAN_HEAD_NAMES = {"head.span.weight": ("span_weights", True),
                   "head.span.bias": ("span_bias", False),
                   "head.types.weight": ("type_weights", True),
                   "head.types.bias": ("type_bias", False)}


def google_name(hf_name, head_scope=""):
  """The Google checkpoint name of a BertForSequenceClassification parameter (or of a
  torch_span_heads.SpanModel's).

  Args:
    hf_name: e.g. "bert.encoder.layer.0.attention.self.query.weight".
    head_scope: the scope of the classifier head's variables ("" for Google's
      `output_weights`, "multi_label" for ours with --multi_label, "cls/ner" for the
      NER heads).

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
  if hf_name in SPAN_HEAD_NAMES:
    return prefix + SPAN_HEAD_NAMES[hf_name][0], SPAN_HEAD_NAMES[hf_name][1]
  name = weight_names.body_to_google(hf_name)
  if name is None:
    raise ValueError("no Google name for the parameter %r" % hf_name)
  return name, weight_names.is_kernel(name)
