# coding=utf-8
"""Our `--adam_bias_correction` update against torch.optim.AdamW itself, from the same start.

Two steps, one per virtualenv:

  .venv-tf2/bin/python benchmarks/adamw_vs_torch.py ours --out /tmp/adamw.npz
  /work/bench-venv/bin/python benchmarks/adamw_vs_torch.py torch --ours /tmp/adamw.npz

`ours` draws float32 weights named like BERT's (a kernel, a bias, a LayerNorm gamma: the
last two get no weight decay), a gradient per step and Google's warmup-then-decay learning
rate, and applies them with optimization.apply_gradients (global-norm clip 1.0, weight decay
0.01, epsilon 1e-6), once with the fused kernel (resource variables) and once with the
elementwise update (ref variables); it also applies Google's uncorrected AdamW, for scale.
`torch` replays the same gradients through torch.nn.utils.clip_grad_norm_ and
torch.optim.AdamW (the same decay groups, eps 1e-6, each step's learning rate set on the
groups) and prints, per step, the largest difference from ours relative to the largest
weight change so far.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import same_start  # pylint: disable=wrong-import-position

SHAPES = {"bert/encoder/layer_0/output/dense/kernel": (64, 32),
          "bert/encoder/layer_0/output/dense/bias": (32,),
          "bert/encoder/layer_0/output/LayerNorm/gamma": (32,)}
NO_DECAY = ("bias", "LayerNorm")
STEPS, PEAK_LR, WARMUP, WEIGHT_DECAY = 30, 1e-3, 5, 0.01


def learning_rates():
  """Google's schedule for STEPS steps (optimization.learning_rate_schedule), per step."""
  return [PEAK_LR * step / WARMUP if step < WARMUP else PEAK_LR * (1.0 - step / STEPS)
          for step in range(STEPS)]


def draw(seed=0):
  rng = np.random.RandomState(seed)
  initial = {name: (rng.randn(*shape) * 0.05).astype(np.float32)
             for name, shape in SHAPES.items()}
  # Gradients whose scale shrinks, then grows: some steps clipped, some not.
  grads = [{name: (rng.randn(*shape) * (0.3 if step % 3 else 0.01)).astype(np.float32)
            for name, shape in SHAPES.items()} for step in range(STEPS)]
  return initial, grads


def run_ours(out):
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  import optimization  # pylint: disable=import-outside-toplevel
  tf.disable_eager_execution()
  initial, grads = draw()
  results = {}
  for label, use_resource, corrected in (("fused", True, True), ("elementwise", False, True),
                                         ("google", True, False)):
    with tf.Graph().as_default():
      variables = {}
      for name, value in initial.items():
        with tf.variable_scope(name.rsplit("/", 1)[0], use_resource=use_resource):
          variables[name] = tf.get_variable(name.rsplit("/", 1)[1],
                                            initializer=tf.constant(value))
      global_step = tf.train.get_or_create_global_step()
      lr = tf.placeholder(tf.float32, [])
      grad_phs = {name: tf.placeholder(tf.float32, shape) for name, shape in SHAPES.items()}
      optimizer = optimization.make_optimizer("adamw", lr, weight_decay_rate=WEIGHT_DECAY,
                                              adam_bias_correction=corrected)
      train_op, _ = optimization.apply_gradients(
          [(grad_phs[n], variables[n]) for n in SHAPES], lr, global_step, optimizer, 1.0)
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step, step_lr in enumerate(learning_rates()):
          feed = {grad_phs[n]: grads[step][n] for n in SHAPES}
          feed[lr] = step_lr
          sess.run(train_op, feed)
          for name, value in sess.run(variables).items():
            results["%s/%d/%s" % (label, step, name)] = value
  arrays = {"initial/" + k: v for k, v in initial.items()}
  arrays.update(results)
  np.savez(out, **arrays)
  print("wrote %s (TensorFlow %s)" % (out, tf.__version__))


def run_torch(ours_path):
  import torch  # pylint: disable=import-outside-toplevel
  ours = np.load(ours_path)
  initial, grads = draw()
  for name in SHAPES:
    np.testing.assert_array_equal(ours["initial/" + name], initial[name])
  params = {name: torch.nn.Parameter(torch.tensor(value)) for name, value in initial.items()}
  decay = [p for n, p in params.items() if not any(x in n for x in NO_DECAY)]
  no_decay = [p for n, p in params.items() if any(x in n for x in NO_DECAY)]
  optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=PEAK_LR, eps=1e-6, foreach=False)
  print("torch %s; per step: max |ours - torch| / max |weight change so far|" %
        torch.__version__)
  print("step  lr         fused      elementwise  Google's uncorrected")
  worst = {"fused": 0.0, "elementwise": 0.0, "google": 0.0}
  for step, step_lr in enumerate(learning_rates()):
    for group in optimizer.param_groups:
      group["lr"] = step_lr
    for name, param in params.items():
      param.grad = torch.tensor(grads[step][name])
    torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
    optimizer.step()
    row = []
    for label in ("fused", "elementwise", "google"):
      difference = change = 0.0
      for name, param in params.items():
        theirs = param.detach().numpy()
        difference = max(difference, float(np.max(np.abs(
            ours["%s/%d/%s" % (label, step, name)] - theirs))))
        change = max(change, float(np.max(np.abs(theirs - initial[name]))))
      relative = difference / change if change else 0.0
      worst[label] = max(worst[label], relative)
      row.append(relative)
    print("%4d  %.3e  %.2e   %.2e     %.2e" % ((step + 1, step_lr) + tuple(row)))
  print("largest: fused %.2e, elementwise %.2e; Google's uncorrected AdamW %.2e" % (
      worst["fused"], worst["elementwise"], worst["google"]))
  largest_weight = max(float(np.max(np.abs(p.detach().numpy()))) for p in params.values())
  for label in ("fused", "elementwise"):
    difference = max(float(np.max(np.abs(ours["%s/%d/%s" % (label, STEPS - 1, name)] -
                                         param.detach().numpy())))
                     for name, param in params.items())
    print("%s after step %d: max |ours - torch| %.2e (weights up to %.3f)" % (
        label, STEPS, difference, largest_weight))


def main():
  same_start.two_sides_main(__doc__, "/tmp/adamw_vs_torch.npz", run_ours, run_torch)


if __name__ == "__main__":
  main()
