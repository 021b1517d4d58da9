# coding=utf-8
"""Our GlobalPointer and Efficient GlobalPointer span heads (--ner_head) against a PyTorch
reference written here from the paper's definition, on transformers' BertModel, from the
same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/global_pointer_vs_torch.py ours --out /tmp/gp.npz
  /work/bench-venv/bin/python benchmarks/global_pointer_vs_torch.py torch --ours /tmp/gp.npz

`ours` writes STEPS batches of made-up windows (random pieces, lengths differing per row,
a few spans per window with nested ones, spans sharing their boundaries under two types,
windows without any) as the span heads' records (ner/splits.py's span_window_records into a
TFRecord file), reads them back with tfrecord_io.make_dataset (each batch cut to its longest
window), and trains
bert_mgpu.ner.global_pointer.create_model_fn's model for each head in HEADS through
multigpu.build_training, on 1 tower and on 2 (logical CPU devices), with same_start.py's
settings (those of layerwise_lr_vs_torch.py and adversarial_vs_torch.py): its tiny BERT
(dropout 0, weights drawn once by NumPy under Google's names, the head's too),
`--adam_bias_correction` AdamW (lr 1e-3, eps 1e-6, weight decay 0.01 except LayerNorm and
biases), Google's rate without warmup (so that the first update moves the weights), global
norm clip 1.0.

`torch` loads the same weights into transformers' BertModel (eager attention, eval mode,
dropout 0) and a span head written from the paper (Su Jianlin 2021, GlobalPointer and
Efficient GlobalPointer; torch_span_heads.py, shared with hf_span_ner.py): per-type
query/key projections (or one shared projection, queries at its even outputs and keys at its
odd ones, plus per-type start and end biases from a dense layer over it, halved), rotary
position embedding on the interleaved pairs (2i, 2i + 1) with base 10000 computed as a
complex product, score
q.k / sqrt(head_size), pairs off the window's pieces ([CLS], [SEP], padding) and pairs that
end before they start left out of the loss, and the multi-label categorical cross-entropy
log(1 + sum_neg e^s) + log(1 + sum_pos e^-s) averaged over the (window, type) rows. It trains
on the same batches with torch.nn.utils.clip_grad_norm_(1.0) and torch.optim.AdamW (eps 1e-6,
decay groups as ours) in float32 and in float64 (to tell float32's rounding from a
difference in the arithmetic), and, for contrast, once per variant of CONTRASTS: the rotary
pairs taken as (i, i + head_size/2) (the other common layout), the [SEP] pair counted as a
candidate (the pieces' edge moved by one), and, for the efficient head, the start and end
biases swapped; a comparison that could not tell those apart would mean little.

Printed per head: the initial loss on each side; per step the losses, the gradient norms and
the largest |ours - torch| of the weights relative to the largest change of torch's weights
so far, for our 1- and 2-tower runs, against torch in float64, and ours on 1 tower against
ours on 2; where the first step differs most; the first step's difference from each
contrast. `torch --summary F.json` also writes these figures as JSON (the test reads them).
"""

import collections
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import same_start  # pylint: disable=wrong-import-position
import weight_names  # pylint: disable=wrong-import-position

CONFIG = same_start.CONFIG  # hidden 32, 3 layers, 4 heads, vocab 60, 16 positions, dropout 0
SEQ, BATCH = same_start.SEQ, same_start.BATCH
NUM_TYPES, MAX_SPANS, HEAD_SIZE = 3, 6, 64
STEPS, PEAK_LR = same_start.STEPS, same_start.PEAK_LR
WARMUP = 0  # Google's rate is 0 at step 0 under any warmup: without, the first update moves
HEADS = ("global_pointer", "efficient_global_pointer")  # global_pointer.SPAN_HEADS
# The reference's variants that are not the paper's, per head, for contrast (train_torch).
CONTRASTS = {HEADS[0]: ("halves", "sep_candidate"),
             HEADS[1]: ("halves", "sep_candidate", "biases_swapped")}
TOWERS = (1, 2)
CLS_ID, SEP_ID = 2, 3
BATCH_FEATURES = ("input_ids", "input_mask", "segment_ids", "span_triples")

HEAD_SCOPE = "cls/ner"  # bert_mgpu/ner/model.py's
# The head's torch parameters -> (our name, transposed between the layouts).
HEAD_NAMES = {hf_name: weight_names.google_name(hf_name, HEAD_SCOPE)
              for hf_name in weight_names.SPAN_HEAD_NAMES}

Window = collections.namedtuple("Window", ["input_ids", "input_mask", "segment_ids"])


run_name = same_start.run_name  # "global_pointer, 2 towers"
run_key = same_start.run_key  # where ours' file keeps a run's step


# ---------------------------------------------------------------------------
# The data (NumPy only)
# ---------------------------------------------------------------------------

def window_spans(rng, length, row):
  """Made-up (type, start, end) spans over the pieces 1 .. length - 2 of a window: none on
  every fifth row; else an outer span, one nested inside it (on rows with room), a span of
  one piece elsewhere, and on every third row the outer span again under another type."""
  last = length - 2  # the last piece
  if row % 5 == 4 or last < 1:
    return []
  spans = []
  start = rng.randint(1, last + 1)
  end = rng.randint(start, last + 1)
  outer_type = rng.randint(NUM_TYPES)
  spans.append((outer_type, start, end))
  if end - start >= 1:
    inner_start = rng.randint(start, end + 1)
    inner_end = rng.randint(inner_start, end + 1)
    spans.append((int(rng.randint(NUM_TYPES)), inner_start, inner_end))
  if row % 3 == 0:
    spans.append(((outer_type + 1) % NUM_TYPES, start, end))
  single = rng.randint(1, last + 1)
  if not start <= single <= end:
    spans.append((int(rng.randint(NUM_TYPES)), single, single))
  spans = sorted(set((int(t), int(s), int(e)) for t, s, e in spans))
  assert len(spans) <= MAX_SPANS and all(1 <= s <= e <= last for _, s, e in spans)
  return spans


def windows(seed=1):
  """STEPS x BATCH windows (Window, each padded to SEQ) and their spans, in batch order."""
  rng = np.random.RandomState(seed)
  result, spans = [], []
  for step in range(STEPS):
    # Odd batches reach the full length, even ones stop short of it: the input pipeline
    # cuts those to their longest window.
    lengths = rng.randint(4, SEQ + 1 if step % 2 else SEQ - 3, size=BATCH)
    for row, length in enumerate(lengths):
      ids = [CLS_ID] + list(rng.randint(5, CONFIG["vocab_size"], size=length - 2)) + [SEP_ID]
      pad = [0] * (SEQ - length)
      result.append(Window([int(i) for i in ids] + pad, [1] * length + pad, [0] * SEQ))
      spans.append(window_spans(rng, length, row))
  return result, spans


def nested_count(spans):
  """Spans lying inside another of the same window (boundaries within, not equal)."""
  return sum(any(s2 <= s <= e <= e2 and (s, e) != (s2, e2) for _, s2, e2 in row)
             for row in spans for _, s, e in row)


# ---------------------------------------------------------------------------
# Ours
# ---------------------------------------------------------------------------

def our_batches(tf, towers, record_file):
  """The STEPS batches of the records as the span heads' input pipeline gives them for
  `towers` towers: {input_ids, input_mask, segment_ids, span_triples}."""
  # pylint: disable=import-outside-toplevel
  from bert_mgpu.data import tfrecord_io
  from bert_mgpu.ner import splits
  with tf.Graph().as_default():
    dataset = tfrecord_io.make_dataset([record_file], splits.span_feature_spec(SEQ, MAX_SPANS),
                                       BATCH, is_training=False)
    batch = tf.data.make_one_shot_iterator(dataset).get_next()
    with tf.Session() as sess:
      return [sess.run(batch) for _ in range(STEPS)]


def run_ours(out):
  # pylint: disable=import-outside-toplevel
  import tensorflow.compat.v1 as tf
  from bert_mgpu.data import tfrecord_io
  from bert_mgpu.ner import global_pointer
  from bert_mgpu.ner import splits
  import modeling
  tf.disable_eager_execution()
  assert tuple(global_pointer.SPAN_HEADS) == HEADS, global_pointer.SPAN_HEADS
  config = modeling.BertConfig.from_dict(CONFIG)
  all_windows, all_spans = windows()
  arrays = {}
  with tempfile.TemporaryDirectory() as directory:
    record_file = os.path.join(directory, "spans.tf_record")
    tfrecord_io.write_records_atomically(
        record_file, splits.span_window_records(all_windows, all_spans, MAX_SPANS))
    data = {towers: our_batches(tf, towers, record_file) for towers in TOWERS}
  for step, batch in enumerate(data[1]):
    for name in BATCH_FEATURES:
      arrays["batch/%d/%s" % (step, name)] = batch[name]
  print("%d batches of %d windows, cut to lengths %s; %d spans, %d of them nested, %d windows "
        "without any" % (STEPS, BATCH, [b["input_ids"].shape[1] for b in data[1]],
                         sum(map(len, all_spans)), nested_count(all_spans),
                         sum(not s for s in all_spans)))
  for head in HEADS:
    initial = None
    for towers in TOWERS:
      run = run_name(head, towers)
      # Each batch is cut to its longest window: placeholders of any length.
      initial = same_start.train_ours(
          tf, run, towers, global_pointer.create_model_fn(config, NUM_TYPES, head, SEQ),
          data[towers], WARMUP, arrays, initial, any_length=True)
      print("%s: losses %s" % (run, " ".join(
          "%.6f" % arrays[run_key(run, s, "loss")] for s in range(STEPS))))
    same_start.add_start(arrays, initial, "initial/%s/" % head)
  same_start.save_ours(tf, out, arrays)


# ---------------------------------------------------------------------------
# The PyTorch reference
# ---------------------------------------------------------------------------

def make_model(head, dtype, variant="paper"):
  """transformers' BertModel and the span head of torch_span_heads (the paper's, or one of
  CONTRASTS' variants), eval mode (dropout is 0 anyway), in `dtype` (a torch dtype)."""
  # pylint: disable=import-outside-toplevel
  import hf_common
  import torch_span_heads
  config = hf_common.hf_bert_config(CONFIG, NUM_TYPES, attn_implementation="eager")
  # With the pooler: ours has its (unused) weights, which the comparison goes over.
  model = torch_span_heads.SpanModel(config, NUM_TYPES, head, HEAD_SIZE, variant, pooler=True)
  model.eval()
  return model.to(dtype)


def span_loss(torch, model, batch):
  """The span head's loss on one of ours' batches."""
  return model(**{k: torch.from_numpy(batch[k]).long() for k in BATCH_FEATURES}).loss


def train_torch(head, initial, data, dtype="float32", variant="paper"):
  """torch's STEPS steps (variant: "paper" or one of CONTRASTS): same_start.train_torch's per
  step (its weights under Google's names after the step, the rate factor, the norm before
  clipping, the loss before the step)."""
  # pylint: disable=import-outside-toplevel
  import torch
  import hf_common
  model = make_model(head, getattr(torch, dtype), variant)
  hf_common.load_arrays(model, initial, "ours' initial weights", HEAD_SCOPE)
  return same_start.train_torch(model, data, span_loss, WARMUP, head_scope=HEAD_SCOPE)


def run_torch(ours_path, summary_path=None):
  # pylint: disable=import-outside-toplevel
  import torch
  import transformers
  ours = same_start.open_ours(ours_path)
  data = [{name: ours["batch/%d/%s" % (step, name)] for name in BATCH_FEATURES}
          for step in range(STEPS)]
  print("TensorFlow %s (ours), torch %s, transformers %s; %d types, head size %d, %d steps "
        "of %d windows (lengths cut to %s)" % (
            ours["tensorflow_version"], torch.__version__, transformers.__version__,
            NUM_TYPES, HEAD_SIZE, STEPS, BATCH, [b["input_ids"].shape[1] for b in data]))
  summary = {}
  for head in HEADS:
    initial = same_start.start_of(ours, "initial/%s/" % head)
    theirs = train_torch(head, initial, data)
    exact = train_torch(head, initial, data, "float64")
    contrasts = {v: train_torch(head, initial, data, variant=v) for v in CONTRASTS[head]}
    changes = same_start.changes_so_far(theirs, initial)
    runs = [run_name(head, towers) for towers in TOWERS]
    losses = {run: [float(ours[run_key(run, s, "loss")]) for s in range(STEPS)] for run in runs}
    print("\n%s: initial loss ours %s, torch %.7f (float64 %.7f)" % (
        head, ", ".join("%.7f (%s)" % (losses[run][0], run.split(", ")[1]) for run in runs),
        theirs[0][3], exact[0][3]))
    print("step  loss ours 1/2 towers, torch        norm ours/torch    "
          "vs torch 1/2 towers  vs torch-fp64 ours/torch  1 vs 2 towers")
    worst = {run: 0.0 for run in runs}
    for step in range(STEPS):
      weights, rate, norm, loss = theirs[step]
      assert abs(ours[run_key(runs[0], step, "lr")] / PEAK_LR - rate) < 1e-6
      relative = {run: same_start.largest_difference(ours, run, step, weights) / changes[step]
                  for run in runs}
      for run in runs:
        worst[run] = max(worst[run], relative[run])
      towers = same_start.largest_difference(ours, runs[0], step, same_start.ours_after(
          ours, runs[1], step, initial)) / changes[step]
      fp64 = (same_start.largest_difference(ours, runs[0], step, exact[step][0]) / changes[step],
              same_start.largest_distance(weights, exact[step][0]) / changes[step])
      if step == 0:
        first = {"towers": towers, "fp64": fp64}
      print("%4d  %.6f/%.6f/%.6f  %.6f/%.6f  %.2e/%.2e    %.2e/%.2e         %.2e" % (
          step + 1, losses[runs[0]][step], losses[runs[1]][step], loss,
          ours[run_key(runs[0], step, "global_norm")], norm, relative[runs[0]],
          relative[runs[1]], fp64[0], fp64[1], towers))
    print("largest after %d steps: %s" % (STEPS, ", ".join(
        "%s %.2e" % (run, value) for run, value in worst.items())))
    print("largest after step 1 (1 tower) at " + same_start.worst_element(
        ours, runs[0], initial, theirs[0][0], PEAK_LR * theirs[0][1]))
    # Against the variants: the first step's difference, relative to that variant's change.
    against = {v: same_start.largest_difference(ours, runs[0], 0, steps[0][0]) /
                  same_start.largest_distance(steps[0][0], initial)
               for v, steps in contrasts.items()}
    print("contrast, ours (1 tower) against torch's variants at step 1: %s" % ", ".join(
        "%s %.2f (initial loss %.7f)" % (v, against[v], contrasts[v][0][3]) for v in against))
    summary[head] = {
        "initial_loss": {"ours_1": losses[runs[0]][0], "ours_2": losses[runs[1]][0],
                         "torch": theirs[0][3], "torch_fp64": exact[0][3]},
        "contrasts": {v: {"initial_loss": contrasts[v][0][3], "relative_difference": against[v]}
                      for v in contrasts},
        "losses": {"ours_1": losses[runs[0]], "ours_2": losses[runs[1]],
                   "torch": [s[3] for s in theirs]},
        "relative_difference": {"ours_1": worst[runs[0]], "ours_2": worst[runs[1]],
                                "ours_1_vs_ours_2": first["towers"],
                                "ours_1_vs_torch_fp64": first["fp64"][0],
                                "torch_vs_torch_fp64": first["fp64"][1]},
        "largest_change": float(changes[-1])}
  if summary_path:
    with open(summary_path, "w", encoding="utf-8") as f:
      json.dump(summary, f, indent=1)
  return summary


def main(argv=None):
  same_start.two_sides_main(__doc__, "/tmp/global_pointer_vs_torch.npz", run_ours, run_torch,
                            argv, summary=True)


if __name__ == "__main__":
  main()
