"""Model weights between a TF checkpoint and a .npz of Google-named arrays.

With hf_finetune.py --init_npz / --save_init_npz, this starts ours and Hugging Face's
classifier from the same weights (weight_names.py has the name mapping). Both runs must
load them: ours with --init_checkpoint, HF with --init_npz. (`--random_seed` alone does not
reproduce --initial_weights: TF derives each initializer's seed from the ops built before
it, and a training graph builds others.)

  # weights drawn by our initializers (Google's: truncated normal), for both:
  python benchmarks/checkpoint_npz.py --initial_weights BERT_CONFIG NUM_LABELS INIT_SEED \
      W.npz [--multi_label | --ner]
  # HF's initial weights (hf_finetune.py --save_init_npz W.npz), or the above, for ours'
  # --init_checkpoint=OUT_DIR/model.ckpt:
  python benchmarks/checkpoint_npz.py --from_npz W.npz OUT_DIR/model.ckpt
  # a trained checkpoint's weights, for HF (hf_finetune.py --init_npz):
  python benchmarks/checkpoint_npz.py --to_npz CKPT W.npz

--to_npz keeps every variable except the optimizer's state: the slots (`*/adam_m`,
`*/adam_v`), global_step and the fp16 loss scale (`loss_scaling/*`).
"""

import argparse
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bert_mgpu.classifier import model as classifier_model  # pylint: disable=wrong-import-position
from bert_mgpu.ner import model as ner_model  # pylint: disable=wrong-import-position
from bert_mgpu.training import checkpoints  # pylint: disable=wrong-import-position
import modeling  # pylint: disable=wrong-import-position


def is_model_weight(name):
  """False for the optimizer's state (slots, global_step, the fp16 loss scale), else True."""
  return not (name.endswith(("/adam_m", "/adam_v")) or name == "global_step" or
              name.startswith("loss_scaling/"))


def check_npz_path(path):
  """np.savez appends .npz to a path without it; refuse such a path rather than write
  somewhere else than asked."""
  if not path.endswith(".npz"):
    raise SystemExit("%s: give a path ending in .npz" % path)
  return path


def checkpoint_to_npz(checkpoint, npz_path):
  """Writes the model weights of `checkpoint` (a prefix or a directory) to npz_path.

  Returns:
    The names written, sorted.
  """
  if tf.gfile.IsDirectory(checkpoint):
    checkpoint = tf.train.latest_checkpoint(checkpoint)
  reader = tf.train.load_checkpoint(checkpoint)
  names = sorted(n for n in reader.get_variable_to_shape_map() if is_model_weight(n))
  np.savez(check_npz_path(npz_path), **{name: reader.get_tensor(name) for name in names})
  return names


def npz_to_checkpoint(npz_path, checkpoint_prefix):
  """Writes every array of npz_path as a variable of that name to a new checkpoint.

  Returns:
    The checkpoint's path (prefix).
  """
  with np.load(npz_path) as arrays:
    return checkpoints.write_arrays({name: arrays[name] for name in arrays.files},
                                    checkpoint_prefix)


def initial_weights_to_npz(bert_config_file, num_labels, init_seed, npz_path, multi_label,
                           ner=False):
  """Writes weights drawn by the initializers of the classifier's model (Google's:
  truncated normal with stddev initializer_range, zero biases, LayerNorm 1 and 0), or with
  `ner` of run_ner_mgpu.py's (num_labels tags), under graph seed init_seed. Not the
  weights a `--random_seed=init_seed` run starts from (see the module docstring): load
  them into both runs."""
  check_npz_path(npz_path)
  config = modeling.BertConfig.from_json_file(bert_config_file)
  with tf.Graph().as_default():
    tf.set_random_seed(init_seed)
    ones = tf.ones([1, 8], tf.int32)
    if ner:
      model_fn = ner_model.create_model_fn(config, num_labels)
    else:
      model_fn = classifier_model.create_model_fn(config, num_labels, multi_label, None)
    features = {"input_ids": ones, "input_mask": ones, "segment_ids": ones * 0}
    if ner:
      features["tag_mask"] = ones
    model_fn(features, is_training=False)
    variables = tf.global_variables()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run(variables)
  np.savez(npz_path, **{v.op.name: value for v, value in zip(variables, values)})


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  group = p.add_mutually_exclusive_group(required=True)
  group.add_argument("--to_npz", nargs=2, metavar=("CHECKPOINT", "NPZ"))
  group.add_argument("--from_npz", nargs=2, metavar=("NPZ", "CHECKPOINT_PREFIX"))
  group.add_argument("--initial_weights", nargs=4,
                     metavar=("BERT_CONFIG", "NUM_LABELS", "INIT_SEED", "NPZ"))
  p.add_argument("--multi_label", action="store_true", help="with --initial_weights")
  p.add_argument("--ner", action="store_true",
                 help="with --initial_weights: run_ner_mgpu.py's model, NUM_LABELS tags")
  args = p.parse_args(argv)
  if args.to_npz:
    names = checkpoint_to_npz(*args.to_npz)
    print("%d arrays -> %s" % (len(names), args.to_npz[1]))
  elif args.from_npz:
    print("-> %s" % npz_to_checkpoint(*args.from_npz))
  else:
    config, num_labels, init_seed, npz_path = args.initial_weights
    initial_weights_to_npz(config, int(num_labels), int(init_seed), npz_path, args.multi_label,
                           args.ner)
    print("-> %s" % npz_path)


if __name__ == "__main__":
  sys.exit(main())
