# coding=utf-8
"""Training throughput at one global batch size split over 1, 2 and 4 towers.

On a machine without GPUs the towers are logical CPU devices that share the same cores, so the
ratios measure what the tower builder costs (splitting the batch, per-tower graphs, gradient
averaging), not a speed-up. On GPUs the same script shows the scaling.

  python scripts/bench_towers.py [--steps 30] [--global_batch 32] [--towers 1,2,4]
                                 [--variables_on_gpu]

Prints examples/sec per tower count and its ratio to the first one, all measured in one run.
"""

import argparse
import os
import sys
import time

import tensorflow.compat.v1 as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import modeling  # pylint: disable=wrong-import-position
import multigpu  # pylint: disable=wrong-import-position

SEQ_LENGTH = 64
CONFIG = modeling.BertConfig(
    vocab_size=8000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=512, max_position_embeddings=SEQ_LENGTH, type_vocab_size=2)


def model_fn(features, is_training):
  model = modeling.BertModel(CONFIG, is_training, features["input_ids"])
  return {"loss": tf.reduce_mean(tf.square(model.get_pooled_output()))}


def examples_per_second(num_towers, global_batch, steps, variables_on_gpu, warmup_steps=5):
  """Trains `steps` steps on random token ids; returns global examples per second."""
  plan = multigpu.plan_devices(num_towers, variables_on_gpu=variables_on_gpu)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    # Fresh random ids each step, made in the graph: no feeding cost in the measurement.
    features = {"input_ids": tf.random.uniform([global_batch, SEQ_LENGTH], 0,
                                               CONFIG.vocab_size, dtype=tf.int32)}
    ops = multigpu.build_training(plan, model_fn, features, 1e-4, 1000, 10)
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      for _ in range(warmup_steps):
        sess.run([ops.train_op, ops.loss])
      start = time.time()
      for _ in range(steps):
        sess.run([ops.train_op, ops.loss])  # fetch a real tensor, or Grappler prunes work
      return steps * global_batch / (time.time() - start)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--global_batch", type=int, default=32)
  parser.add_argument("--towers", default="1,2,4")
  parser.add_argument("--variables_on_gpu", action="store_true",
                      help="variables and the update on GPU 0 instead of the host CPU")
  args = parser.parse_args()
  tf.logging.set_verbosity(tf.logging.ERROR)
  counts = [int(t) for t in args.towers.split(",")]
  print("TensorFlow %s, %d GPU(s) visible, global batch %d, seq %d, hidden %d, %d layers, "
        "%d timed steps" % (tf.__version__ if hasattr(tf, "__version__") else "?",
                            multigpu.count_visible_gpus(), args.global_batch, SEQ_LENGTH,
                            CONFIG.hidden_size, CONFIG.num_hidden_layers, args.steps))
  baseline = None
  for count in counts:
    rate = examples_per_second(count, args.global_batch, args.steps, args.variables_on_gpu)
    baseline = baseline or rate
    print("towers %d: %8.1f examples/sec  (%.2fx of %d tower%s)" % (
        count, rate, rate / baseline, counts[0], "" if counts[0] == 1 else "s"))


if __name__ == "__main__":
  main()
