# coding=utf-8
"""Tests of the device plan and the tower builder on logical CPU devices."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
import multigpu

from tiny_model import (ADAMW_BIAS_CORRECTED, OPTIMIZERS, TINY_CONFIG, classifier_model_fn,
                        cpu_plan, random_batch, relative_update_difference, train_steps)


# ---------------------------------------------------------------------------
# Device plan
# ---------------------------------------------------------------------------

def test_plan_without_gpus_uses_one_logical_cpu_per_tower():
  plan = multigpu.plan_devices(2, towers_per_gpu=2, visible_gpus=0)
  assert plan.tower_devices == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
  assert plan.variable_device == "/cpu:0"
  assert plan.session_config().device_count["CPU"] == 4


def test_plan_with_gpus_maps_towers_per_gpu():
  plan = multigpu.plan_devices(2, towers_per_gpu=2, visible_gpus=4)
  assert plan.tower_devices == ["/gpu:0", "/gpu:0", "/gpu:1", "/gpu:1"]
  assert plan.variable_device == "/cpu:0"
  on_gpu = multigpu.plan_devices(1, variables_on_gpu=True, visible_gpus=1)
  assert on_gpu.variable_device == "/gpu:0"


def test_plan_errors_name_the_counts():
  with pytest.raises(ValueError, match=r"--n_gpus=4 but only 2 GPU"):
    multigpu.plan_devices(4, visible_gpus=2)
  with pytest.raises(ValueError, match=r"--n_gpus=0"):
    multigpu.plan_devices(0, visible_gpus=0)
  with pytest.raises(ValueError, match=r"--towers_per_gpu=0"):
    multigpu.plan_devices(1, towers_per_gpu=0, visible_gpus=0)


def test_towers_are_placed_on_their_devices_and_share_variables():
  plan = cpu_plan(2)
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in random_batch(np.random.RandomState(0), 4).items()}
    multigpu.build_training(plan, classifier_model_fn(), features, 1e-3, 10, 1)
    names = [v.op.name for v in tf.trainable_variables()]
    assert len(names) == len(set(names))
    assert "bert/embeddings/word_embeddings" in names and "output_weights" in names
    assert not any(n.startswith("tower") for n in names)
    for var in tf.global_variables():
      assert var.op.device.lower().endswith("cpu:0"), (var.op.name, var.op.device)
    devices = {op.name.split("/")[0]: op.device.lower() for op in tf.get_default_graph()
               .get_operations() if op.name.startswith("tower_") and op.type == "MatMul"}
    assert devices["tower_0"].endswith("cpu:0") and devices["tower_1"].endswith("cpu:1")


def tied_embedding_model_fn(features, is_training):
  """A tiny BERT whose output projection reuses the word embeddings (as masked LM does)."""
  model = modeling.BertModel(TINY_CONFIG, is_training, features["input_ids"],
                             features["input_mask"], features["segment_ids"])
  hidden = tf.reshape(model.get_sequence_output(), [-1, TINY_CONFIG.hidden_size])
  logits = tf.matmul(hidden, model.get_embedding_table(), transpose_b=True)  # [b*seq, vocab]
  labels = tf.reshape(features["input_ids"], [-1])
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                       logits=logits))
  return {"loss": loss}


@pytest.mark.parametrize("num_towers", [1, 2, 4])
def test_tied_embedding_gradient_is_summed_on_each_tower_device(num_towers):
  # On GPUs, per-tower work left on the variable device (the host) would cost host memory
  # and time that grow with the tower count. The plan needs no real GPU to be built.
  plan = multigpu.plan_devices(num_towers, visible_gpus=num_towers)
  vocab_by_hidden = [TINY_CONFIG.vocab_size, TINY_CONFIG.hidden_size]
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in random_batch(np.random.RandomState(0), 8).items()}
    multigpu.build_tower_losses_and_grads(plan, tied_embedding_model_fn, features)
    host_ops, tower_ops = [], []
    for op in tf.get_default_graph().get_operations():
      if op.type in ("AddN", "UnsortedSegmentSum") and \
          any(t.shape.as_list() == vocab_by_hidden for t in op.outputs):
        (tower_ops if "gpu" in op.device.lower() else host_ops).append(op.name)
  # On the host: at most the one sum over towers (the average).
  assert len(host_ops) == (1 if num_towers > 1 else 0), host_ops
  assert all(name.startswith("average_towers/") for name in host_ops), host_ops
  # Each tower densifies its lookup gradient and adds the projection's gradient itself.
  for i in range(num_towers):
    assert len([name for name in tower_ops if name.startswith("tower_%d/" % i)]) == 2, tower_ops


def test_embedding_gradients_stay_sparse_when_averaged():
  with tf.Graph().as_default():
    a = tf.IndexedSlices(tf.ones([3, 4]), tf.constant([0, 2, 2]), tf.constant([10, 4]))
    b = tf.IndexedSlices(2 * tf.ones([2, 4]), tf.constant([1, 2]), tf.constant([10, 4]))
    averaged = multigpu.average_gradients([a, b], 2)
    assert isinstance(averaged, tf.IndexedSlices)
    with tf.Session() as sess:
      dense = sess.run(tf.convert_to_tensor(averaged))
  expected = np.zeros([10, 4])
  expected[0] += 0.5
  expected[2] += 1.0 + 1.0
  expected[1] += 1.0
  np.testing.assert_allclose(dense, expected)


# ---------------------------------------------------------------------------
# The invariant: k towers x batch b == 1 tower x batch k*b
# ---------------------------------------------------------------------------

def run_training_steps(num_towers, batches, optimizer, initial_values=None,
                       accumulation_steps=1, layerwise_lr_decay=1.0):
  """Trains num_towers host towers, one update per batch; returns (initial, final) values."""
  initial, final, _, step = train_steps(cpu_plan(num_towers), batches, optimizer,
                                        initial_values, accumulation_steps, layerwise_lr_decay)
  assert step == len(batches)
  return initial, final


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_towers_give_the_same_update_as_one_big_batch(optimizer):
  rng = np.random.RandomState(7)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, one_tower = run_training_steps(1, batches, optimizer)
  for num_towers in (2, 4):
    _, towers = run_training_steps(num_towers, batches, optimizer, initial)
    assert relative_update_difference(initial, one_tower, towers) <= 1e-5, num_towers
  # The comparison can fail: a different batch gives a clearly different update.
  other = [random_batch(rng, 8) for _ in range(2)]
  _, different = run_training_steps(2, other, optimizer, initial)
  assert relative_update_difference(initial, one_tower, different) > 1e-2


# Google's AdamW (the fused kernel) and LAMB (the trust ratio before the factor); the factors
# of every optimizer are checked against NumPy in tests/model/test_optimization.py.
@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_layerwise_learning_rates_on_towers_are_one_devices(optimizer):
  """With --layerwise_lr_decay, 2 towers (and 2 accumulated micro-batches) give one device's
  update, and that update is not the undecayed one."""
  rng = np.random.RandomState(11)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, one_tower = run_training_steps(1, batches, optimizer, layerwise_lr_decay=0.5)
  _, towers = run_training_steps(2, batches, optimizer, initial, layerwise_lr_decay=0.5)
  assert relative_update_difference(initial, one_tower, towers) <= 1e-5
  _, accumulated = run_training_steps(2, batches, optimizer, initial, accumulation_steps=2,
                                      layerwise_lr_decay=0.5)
  assert relative_update_difference(initial, one_tower, accumulated) <= 1e-5
  _, undecayed = run_training_steps(1, batches, optimizer, initial)
  assert relative_update_difference(initial, one_tower, undecayed) > 1e-2


@pytest.mark.parametrize("optimizer", ["adamw", ADAMW_BIAS_CORRECTED])
def test_accumulated_micro_batches_give_the_same_update_as_one_batch(optimizer):
  rng = np.random.RandomState(3)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, whole = run_training_steps(1, batches, optimizer)
  _, accumulated = run_training_steps(2, batches, optimizer, initial, accumulation_steps=2)
  assert relative_update_difference(initial, whole, accumulated) <= 1e-5


def test_bias_corrected_adamw_on_towers_is_not_googles_update():
  """The towers' bias-corrected update is its own: removing the correction changes it
  (the towers test above would pass with the correction silently off)."""
  rng = np.random.RandomState(8)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, corrected = run_training_steps(2, batches, ADAMW_BIAS_CORRECTED)
  _, google = run_training_steps(2, batches, "adamw", initial)
  assert relative_update_difference(initial, corrected, google) > 0.3


def test_inference_pads_a_short_batch_only_to_a_multiple_of_the_towers():
  batch = random_batch(np.random.RandomState(4), 3)
  model_fn = classifier_model_fn()

  def with_tower_rows(features, is_training):
    outputs = model_fn(features, is_training)
    rows = tf.shape(features["input_ids"])[0]
    outputs["tower_rows"] = tf.fill([rows], rows)  # per example: its tower's batch size
    return outputs

  results = []
  for num_towers in (1, 2):
    plan = cpu_plan(num_towers)
    with tf.Graph().as_default():
      tf.set_random_seed(3)
      features = {k: tf.constant(v) for k, v in batch.items()}
      outputs = multigpu.build_inference(plan, with_tower_rows, features, 8 * num_towers)
      with tf.Session(config=plan.session_config()) as sess:
        sess.run(tf.global_variables_initializer())
        results.append(sess.run(outputs))
  one, two = results
  assert list(one["tower_rows"]) == [3, 3, 3]
  assert list(two["tower_rows"]) == [2, 2, 2]  # 3 rows padded to 4, not to the global 16
  np.testing.assert_allclose(two["probabilities"], one["probabilities"], rtol=1e-5)
  assert two["probabilities"].shape == (3, 3)
