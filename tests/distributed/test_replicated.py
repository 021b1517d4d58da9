# coding=utf-8
"""--variable_update=replicated in one process: a copy of the variables on every (logical
CPU) device, gradients summed by TF's collective all-reduce. It must give the update of the
host plan, keep every copy identical, and save only Google's plain names."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.distributed import collectives
import multigpu
from tiny_model import (OPTIMIZERS, batch_placeholders, classifier_model_fn, random_batch,
                        relative_update_difference, train_steps)


def replicated_plan(num_towers, towers_per_device=1):
  """num_towers on logical CPU devices, towers_per_device of them on each (as towers share
  a GPU with --towers_per_gpu; plan_devices gives each CPU tower a device of its own)."""
  devices = ["/cpu:%d" % (i // towers_per_device) for i in range(num_towers)]
  return multigpu.DevicePlan(devices, devices[0], num_cpu_devices=len(set(devices)),
                             variable_update="replicated")


def assert_replicas_identical(values, num_replicas):
  """Every replica's copy (weights and optimizer slots) equals replica 0's, bit for bit."""
  plain = [n for n in values if not n.startswith("replica_")]
  copies = 0
  for r in range(1, num_replicas):
    for name in plain:
      copy = multigpu.replica_variable_name(name, r)
      if copy in values:
        np.testing.assert_array_equal(values[copy], values[name], err_msg=copy)
        copies += 1
  assert copies > 0 or num_replicas == 1


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_replicated_gives_the_host_update(optimizer):
  rng = np.random.RandomState(11)
  batches = [random_batch(rng, 8) for _ in range(3)]
  initial, host, _, _ = train_steps(multigpu.plan_devices(1, visible_gpus=0), batches, optimizer)
  for num_towers in (2, 4):
    plan = replicated_plan(num_towers)
    start, final, values, step = train_steps(plan, batches, optimizer, initial)
    assert step == len(batches)
    for name in initial:  # the sync gave every replica the loaded values
      np.testing.assert_array_equal(start[name], initial[name])
    assert relative_update_difference(initial, host, final) <= 1e-5, num_towers
    assert_replicas_identical(values, num_towers)
  # The comparison can fail: other batches give a clearly different update.
  other = [random_batch(rng, 8) for _ in range(3)]
  _, different, _, _ = train_steps(replicated_plan(2), other, optimizer, initial)
  assert relative_update_difference(initial, host, different) > 1e-2


def test_replicated_with_layerwise_learning_rates_gives_the_host_update():
  """Every replica scales its copy of a layer's variables as the host scales the one copy
  (replica names carry a prefix); the decay really changes the update."""
  rng = np.random.RandomState(13)
  batches = [random_batch(rng, 8) for _ in range(2)]
  one_device = multigpu.plan_devices(1, visible_gpus=0)
  initial, host, _, _ = train_steps(one_device, batches, "adamw", layerwise_lr_decay=0.5)
  _, final, values, _ = train_steps(replicated_plan(2), batches, "adamw", initial,
                                    layerwise_lr_decay=0.5)
  assert relative_update_difference(initial, host, final) <= 1e-5
  assert_replicas_identical(values, 2)
  _, undecayed, _, _ = train_steps(one_device, batches, "adamw", initial)
  assert relative_update_difference(initial, host, undecayed) > 1e-2


def test_replicated_with_accumulation_and_two_towers_per_device():
  rng = np.random.RandomState(5)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, host, _, _ = train_steps(multigpu.plan_devices(1, visible_gpus=0), batches, "adamw")
  for plan, accumulation in ((replicated_plan(2), 2), (replicated_plan(4, 2), 1),
                             (replicated_plan(4), 2)):
    _, final, values, step = train_steps(plan, batches, "adamw", initial, accumulation)
    assert step == len(batches)
    assert relative_update_difference(initial, host, final) <= 1e-5, (plan.tower_devices, accumulation)
    assert_replicas_identical(values, len(plan.replica_devices))


def test_replicas_hold_one_copy_per_device_and_only_replica_0_is_saved():
  plan = replicated_plan(4, towers_per_device=2)
  assert plan.replica_devices == ["/cpu:0", "/cpu:1"]
  assert [plan.replica_of_tower(i) for i in range(4)] == [0, 0, 1, 1]
  with tf.Graph().as_default():
    features = {k: tf.constant(v) for k, v in random_batch(np.random.RandomState(0), 8).items()}
    multigpu.build_training(plan, classifier_model_fn(), features, 1e-3, 10, 0)
    names = [v.op.name for v in tf.global_variables()]
    saved = [v.op.name for v in multigpu.saveable_variables()]
    devices = {v.op.name: v.device for v in tf.global_variables()}
  assert "output_weights" in saved and "output_weights/adam_m" in saved
  assert "global_step" in saved
  assert not any(n.startswith("replica_") for n in saved)
  # replica 1 has its own weights and slots, on its own device
  assert "replica_1/output_weights" in names and "replica_1/output_weights/adam_m" in names
  assert "replica_2/output_weights" not in names
  assert devices["replica_1/output_weights"].lower().endswith("cpu:1")
  assert devices["replica_1/output_weights/adam_m"].lower().endswith("cpu:1")
  assert devices["output_weights"].lower().endswith("cpu:0")


def test_small_gradients_are_packed_into_few_all_reduces():
  with tf.Graph().as_default():
    tensors = [tf.zeros([1000]) for _ in range(50)] + [tf.zeros([4 << 20])] + [
        tf.zeros([3], tf.int64), tf.zeros([10])]
    packs = collectives.pack_groups(tensors, pack_bytes=1 << 20)
  flat = sorted(i for pack in packs for i in pack)
  assert flat == list(range(len(tensors)))  # every tensor once
  for pack in packs:  # one dtype per pack
    assert len(set(tensors[i].dtype for i in pack)) == 1
  assert [51] in packs  # the int64 tensor alone
  assert [50] in packs  # larger than a pack: alone
  assert len(packs) <= 4


def test_all_reduce_sums_over_devices():
  plan = replicated_plan(3)
  with tf.Graph().as_default():
    inputs = []
    for r, device in enumerate(plan.replica_devices):
      with tf.device(device):
        inputs.append([tf.constant([1.0, 2.0]) * (r + 1), tf.constant([[float(r)]])])
    summed = collectives.all_reduce_packed(inputs, plan.replica_devices, 3, 77, on_gpu=False)
    with tf.Session(config=plan.session_config()) as sess:
      values = sess.run(summed)
  for member in values:
    np.testing.assert_array_equal(member[0], [6.0, 12.0])
    np.testing.assert_array_equal(member[1], [[3.0]])


def test_several_workers_need_replicated():
  with pytest.raises(ValueError, match="--variable_update=replicated"):
    multigpu.plan_devices(1, visible_gpus=0, num_workers=2, worker_index=1)
  with pytest.raises(ValueError, match="old name"):
    multigpu.plan_devices(1, visible_gpus=0, variables_on_gpu=True,
                          variable_update="replicated")
  plan = multigpu.plan_devices(2, visible_gpus=0, variable_update="replicated", num_workers=3,
                               worker_index=2)
  assert plan.tower_devices == ["/job:worker/replica:0/task:2/device:CPU:0",
                                "/job:worker/replica:0/task:2/device:CPU:1"]
  assert plan.group_size == 6
  assert plan.session_config().experimental.collective_group_leader == (
      "/job:worker/replica:0/task:0")
  assert plan.for_inference().tower_devices == ["/cpu:0", "/cpu:1"]


def test_fp16_overflow_on_one_replica_skips_the_update_on_every_replica():
  # Rows with label 7 multiply their tower's loss by 1e30: its fp16 gradients overflow. Only
  # tower 1 (rows 4-7, replica 1) gets one; the all-reduced gradient must make every replica
  # skip, or the copies would drift apart.
  def poisoned_model_fn(features, is_training):
    outputs = classifier_model_fn()(features, is_training)
    poisoned = tf.reduce_any(tf.equal(features["label_ids"], 7))
    outputs["loss"] = outputs["loss"] * tf.where(poisoned, 1e30, 1.0)
    return outputs

  plan = replicated_plan(2)
  batch = random_batch(np.random.RandomState(2), 8)
  poisoned_batch = dict(batch, label_ids=batch["label_ids"].copy())
  poisoned_batch["label_ids"][5] = 7
  with tf.Graph().as_default():
    placeholders = batch_placeholders(batch)
    ops = multigpu.build_training(plan, poisoned_model_fn, placeholders, 1e-2, 100, 0,
                                  precision="fp16")
    sync = multigpu.build_start_sync(plan)
    weights = [v for v in tf.trainable_variables()]
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(sync)
      before = sess.run(weights)
      scale = sess.run(ops.loss_scale.scale)
      norm = sess.run([ops.train_op, ops.global_norm],
                      {placeholders[k]: v for k, v in poisoned_batch.items()})[1]
      assert not np.isfinite(norm)
      assert sess.run(ops.global_step) == 0 and sess.run(ops.loss_scale.scale) == scale / 2
      for old, new in zip(before, sess.run(weights)):  # no replica moved
        np.testing.assert_array_equal(old, new)
      sess.run(ops.train_op, {placeholders[k]: v for k, v in batch.items()})
      assert sess.run(ops.global_step) == 1
      values = dict(zip([v.op.name for v in tf.global_variables()],
                        sess.run(tf.global_variables())))
  assert any(not np.array_equal(a, b) for a, b in zip(before, [values[w.op.name]
                                                               for w in weights]))
  assert_replicas_identical(values, 2)


def test_gpu_plans_ask_for_nccl_one_rank_per_gpu(monkeypatch):
  # No GPU here: the graph is only built and inspected, not run.
  plan = multigpu.plan_devices(2, towers_per_gpu=2, visible_gpus=2,
                               variable_update="replicated")
  assert plan.tower_devices == ["/gpu:0", "/gpu:0", "/gpu:1", "/gpu:1"]
  assert plan.replica_devices == ["/gpu:0", "/gpu:1"] and plan.group_size == 2
  with tf.Graph().as_default():
    inputs = []
    for device in plan.replica_devices:
      with tf.device(device):
        inputs.append([tf.zeros([3])])
    collectives.all_reduce_packed(inputs, plan.replica_devices, plan.group_size, 1, plan.on_gpu)
    reduces = [op for op in tf.get_default_graph().get_operations()
               if op.type.startswith("CollectiveReduce")]
  assert len(reduces) == 2
  assert {op.get_attr("communication_hint") for op in reduces} == {b"nccl"}
  assert {op.device.lower() for op in reduces} == {"/device:gpu:0", "/device:gpu:1"}
  # TF 1.15 switches NCCL on through the session config as well (some releases lack the
  # argument), as does any TensorFlow without it.
  assert plan.session_config().experimental.collective_nccl == tf.__version__.startswith("1.")
  monkeypatch.setattr(collectives, "ALL_REDUCE_TAKES_HINT", False)
  assert plan.session_config().experimental.collective_nccl
  assert not replicated_plan(2).session_config().experimental.collective_nccl  # CPUs: ring
