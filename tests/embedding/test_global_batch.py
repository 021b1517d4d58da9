# coding=utf-8
"""The embedding losses over the global batch (bert_mgpu/distributed/global_batch.py): k
towers, however placed, give exactly the update of one device with the whole batch, and
not the update of a loss computed per tower."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import global_batch
from bert_mgpu.embedding import losses
from bert_mgpu.embedding import model as embedding_model
import multigpu
from tiny_model import SEQ, TINY_CONFIG, cpu_plan, relative_update_difference, train_steps

NUM_CLASSES = 3


def embedding_batch(rng, n, texts, scored=False, labelled=False, duplicates=False):
  """n records of `texts` random texts each ([n, texts, SEQ]); with duplicates, records
  0 and 5 share their positive text (a false negative the in-batch loss must mask)."""
  input_mask = np.ones([n, texts, SEQ], np.int32)
  for row in range(n):
    for text in range(texts):
      input_mask[row, text, rng.randint(3, SEQ + 1):] = 0
  input_ids = rng.randint(1, TINY_CONFIG.vocab_size, size=[n, texts, SEQ]).astype(np.int32)
  text_ids = rng.randint(0, 1 << 24, size=[n, texts * 2]).astype(np.int32)
  if duplicates:
    input_ids[5, 1], input_mask[5, 1] = input_ids[0, 1], input_mask[0, 1]
    text_ids[5, 2:4] = text_ids[0, 2:4]
  batch = {"input_ids": input_ids * input_mask, "input_mask": input_mask,
           "segment_ids": np.zeros([n, texts, SEQ], np.int32), "text_ids": text_ids}
  if scored:
    batch["score"] = rng.randint(0, 6, size=[n]).astype(np.float32)  # 0-5, with ties
  if labelled:
    batch["label_ids"] = rng.randint(0, NUM_CLASSES, size=[n]).astype(np.int32)
  return batch


# (loss, texts per record, the batch's extra features)
CASES = {
    "cosent": (losses.COSENT, 2, dict(scored=True)),
    "in_batch_pairs": (losses.IN_BATCH, 2, dict(duplicates=True)),
    "in_batch_triplets": (losses.IN_BATCH, 3, dict(duplicates=True)),
    "softmax": (losses.SOFTMAX, 2, dict(labelled=True)),
}


def model_fn_of(loss, texts):
  return embedding_model.create_model_fn(TINY_CONFIG, embedding_model.MEAN, texts, loss,
                                         num_labels=NUM_CLASSES)


def per_tower_model_fn(loss, texts):
  """The same loss computed on each tower's rows alone (what a per-device loss does)."""
  model_fn = model_fn_of(loss, texts)

  def tower_loss(features, is_training):
    outputs = model_fn(features, is_training)
    return {"loss": outputs[global_batch.BATCH_LOSS](outputs[global_batch.ROWS])}
  return tower_loss


def replicated_plan(num_towers, towers_per_device=1):
  devices = ["/cpu:%d" % (i // towers_per_device) for i in range(num_towers)]
  return multigpu.DevicePlan(devices, devices[0], num_cpu_devices=len(set(devices)),
                             variable_update="replicated")


def two_devices_two_towers(variable_update):
  devices = ["/cpu:0", "/cpu:0", "/cpu:1", "/cpu:1"]
  return multigpu.DevicePlan(devices, "/cpu:0", num_cpu_devices=2,
                             variable_update=variable_update)


def batches_of(case, seed, count=2, n=8):
  _, texts, extra = CASES[case]
  rng = np.random.RandomState(seed)
  return [embedding_batch(rng, n, texts, **extra) for _ in range(count)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_towers_give_the_update_of_one_device_with_the_whole_batch(case):
  loss, texts, _ = CASES[case]
  batches = batches_of(case, 3)
  one_device = multigpu.plan_devices(1, visible_gpus=0)
  initial, reference, _, _ = train_steps(one_device, batches, "adamw",
                                         model_fn=model_fn_of(loss, texts))
  plans = {"4 x 2": cpu_plan(4), "replicated 2 devices x 2 towers": replicated_plan(4, 2)}
  if case == "in_batch_triplets":
    # Every placement for the loss most sensitive to the rows' order (anchors, positives,
    # hard negatives, a masked duplicate); the join is the same code for every loss (CI time).
    plans.update({"2 x 4": cpu_plan(2), "2 devices x 2 towers": two_devices_two_towers("host")})
  for name, plan in plans.items():
    _, final, _, step = train_steps(plan, batches, "adamw", initial,
                                    model_fn=model_fn_of(loss, texts))
    assert step == len(batches)
    assert relative_update_difference(initial, reference, final) <= 1e-5, name
  if loss != losses.SOFTMAX:  # a mean of per-pair losses is the same per tower
    _, per_tower, _, _ = train_steps(cpu_plan(4), batches, "adamw", initial,
                                     model_fn=per_tower_model_fn(loss, texts))
    assert relative_update_difference(initial, reference, per_tower) > 1e-2


@pytest.mark.parametrize("case", ["cosent", "in_batch_triplets"])
def test_with_accumulation_each_micro_batch_is_one_global_batch(case):
  """Accumulation: the loss spans each micro-batch's global batch, on any towers."""
  loss, texts, _ = CASES[case]
  batches = batches_of(case, 4)
  one_device = multigpu.plan_devices(1, visible_gpus=0)
  initial, reference, _, _ = train_steps(one_device, batches, "adamw", accumulation_steps=2,
                                         model_fn=model_fn_of(loss, texts))
  for plan in (cpu_plan(2), replicated_plan(2)):
    _, final, _, _ = train_steps(plan, batches, "adamw", initial, accumulation_steps=2,
                                 model_fn=model_fn_of(loss, texts))
    assert relative_update_difference(initial, reference, final) <= 1e-5
  _, whole, _, _ = train_steps(one_device, batches, "adamw", initial,
                               model_fn=model_fn_of(loss, texts))
  assert relative_update_difference(initial, reference, whole) > 1e-2


def test_the_loss_logged_is_the_global_batch_loss():
  loss, texts, _ = CASES["in_batch_pairs"]
  batch = batches_of("in_batch_pairs", 6, count=1)[0]
  values = {}
  for name, plan in (("one", multigpu.plan_devices(1, visible_gpus=0)), ("four", cpu_plan(4)),
                     ("replicated", replicated_plan(2))):
    with tf.Graph().as_default():
      placeholders = {k: tf.placeholder(tf.float32 if v.dtype.kind == "f" else tf.int32,
                                        [None] + list(v.shape[1:])) for k, v in batch.items()}
      tf.set_random_seed(1)
      ops = multigpu.build_training(plan, model_fn_of(loss, texts), placeholders, 1e-3, 10, 0)
      init_values = [v for v in multigpu.saveable_variables()]
      sync = multigpu.build_start_sync(plan)
      with tf.Session(config=plan.session_config()) as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        if name != "one":
          for var in init_values:
            if var.op.name in values["weights"]:
              var.load(values["weights"][var.op.name], sess)
        else:
          values["weights"] = dict(zip([v.op.name for v in init_values],
                                       sess.run(init_values)))
        if sync is not None:
          sess.run(sync)
        # The whole step: a replica's all-reduce waits for every replica's.
        values[name] = sess.run([ops.train_op, ops.update_loss],
                                {placeholders[k]: v for k, v in batch.items()})[1]
  assert values["one"] > 0
  np.testing.assert_allclose(values["four"], values["one"], rtol=1e-5)
  np.testing.assert_allclose(values["replicated"], values["one"], rtol=1e-5)


def test_adversarial_training_is_refused_with_a_global_batch_loss():
  batch = batches_of("cosent", 1, count=1)[0]
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in batch.items()}
    with pytest.raises(ValueError, match="per tower"):
      multigpu.build_training(cpu_plan(2), model_fn_of(losses.COSENT, 2), features, 1e-3, 10,
                              0, attack=object())
