# coding=utf-8
"""Tests of the device plan, the tower builder and the shared loop on logical CPU devices."""

import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import modeling
import multigpu

SEQ = 8
NUM_LABELS = 3
TINY_CONFIG = modeling.BertConfig(
    vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    max_position_embeddings=16, type_vocab_size=2)


def classifier_model_fn(config=TINY_CONFIG, nan_loss=False, nan_gradient=False):
  """A tiny BERT classifier: the same kind of model the run scripts build."""
  def model_fn(features, is_training):
    model = modeling.BertModel(config, is_training, features["input_ids"],
                               features["input_mask"], features["segment_ids"])
    pooled = model.get_pooled_output()  # [batch, hidden]
    weights = tf.get_variable("output_weights", [NUM_LABELS, config.hidden_size],
                              initializer=tf.truncated_normal_initializer(stddev=0.02))
    bias = tf.get_variable("output_bias", [NUM_LABELS], initializer=tf.zeros_initializer())
    logits = tf.matmul(pooled, weights, transpose_b=True) + bias  # [batch, labels]
    log_probs = tf.nn.log_softmax(logits)
    per_example_loss = -tf.reduce_sum(
        tf.one_hot(features["label_ids"], NUM_LABELS) * log_probs, axis=-1)  # [batch]
    loss = tf.reduce_mean(per_example_loss)
    if nan_loss:
      loss = loss * np.nan
    if nan_gradient:
      # Adds exactly 0 to the loss, but its gradient is 0/0: the update writes NaN.
      loss += tf.sqrt(tf.reduce_sum(tf.square(bias - tf.stop_gradient(bias))))
    return {"loss": loss, "per_example_loss": per_example_loss,
            "probabilities": tf.nn.softmax(logits), "label_ids": features["label_ids"]}
  return model_fn


def random_batch(rng, n):
  input_mask = np.ones([n, SEQ], np.int32)
  for row in range(n):
    input_mask[row, rng.randint(3, SEQ + 1):] = 0
  return {
      "input_ids": rng.randint(1, TINY_CONFIG.vocab_size, size=[n, SEQ]).astype(np.int32),
      "input_mask": input_mask,
      "segment_ids": (rng.rand(n, SEQ) > 0.5).astype(np.int32),
      "label_ids": rng.randint(0, NUM_LABELS, size=[n]).astype(np.int32),
  }


def cpu_plan(num_towers):
  return multigpu.plan_devices(num_towers, visible_gpus=0)


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
  with pytest.raises(multigpu.UsageError, match=r"--n_gpus=4 but only 2 GPU"):
    multigpu.plan_devices(4, visible_gpus=2)
  with pytest.raises(multigpu.UsageError, match=r"--n_gpus=0"):
    multigpu.plan_devices(0, visible_gpus=0)
  with pytest.raises(multigpu.UsageError, match=r"--towers_per_gpu=0"):
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
                       accumulation_steps=1):
  """Builds a num_towers graph, applies one update per batch; returns (initial, final) values."""
  plan = cpu_plan(num_towers)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    placeholders = {k: tf.placeholder(tf.int32, [None] + list(v.shape[1:]), name=k)
                    for k, v in batches[0].items()}
    ops = multigpu.build_training(plan, classifier_model_fn(), placeholders, 1e-2, 100, 0,
                                  optimizer, accumulation_steps=accumulation_steps)
    with tf.Session(config=plan.session_config()) as sess:
      sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
      variables = tf.trainable_variables()
      if initial_values is not None:
        for var in variables:
          var.load(initial_values[var.op.name], sess)
      initial = {v.op.name: v for v in variables}
      initial = dict(zip(initial, sess.run(list(initial.values()))))
      for batch in batches:
        if accumulation_steps > 1:
          micro = np.array_split(np.arange(len(batch["label_ids"])), accumulation_steps)
          for rows in micro:
            sess.run(ops.accumulate_op, {placeholders[k]: v[rows] for k, v in batch.items()})
          sess.run(ops.train_op)
        else:
          sess.run(ops.train_op, {placeholders[k]: v for k, v in batch.items()})
      final = dict(zip(initial, sess.run([v for v in variables])))
      assert sess.run(ops.global_step) == len(batches)
  return initial, final


def relative_update_difference(initial, final_a, final_b):
  """||update_a - update_b|| / ||update_a|| over all variables."""
  diff = sum(np.sum((final_a[k] - final_b[k]) ** 2) for k in initial)
  norm = sum(np.sum((final_a[k] - initial[k]) ** 2) for k in initial)
  assert norm > 0
  return np.sqrt(diff / norm)


@pytest.mark.parametrize("optimizer", ["adamw", "radam", "lamb"])
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


def test_accumulated_micro_batches_give_the_same_update_as_one_batch():
  rng = np.random.RandomState(3)
  batches = [random_batch(rng, 8) for _ in range(2)]
  initial, whole = run_training_steps(1, batches, "adamw")
  _, accumulated = run_training_steps(2, batches, "adamw", initial, accumulation_steps=2)
  assert relative_update_difference(initial, whole, accumulated) <= 1e-5


# ---------------------------------------------------------------------------
# Data, inference with a partial last batch, the loop
# ---------------------------------------------------------------------------

FEATURE_SPEC = {
    "input_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.FixedLenFeature([SEQ], tf.int64),
    "label_ids": tf.FixedLenFeature([], tf.int64),
}


def write_records(path, batch):
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(len(batch["label_ids"])):
      feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(
          value=np.atleast_1d(v[i]).tolist())) for k, v in batch.items()}
      writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())


def records_file(tmp_path, seed, num_examples):
  """Writes random_batch(seed, num_examples) as TFRecords; returns the path."""
  path = str(tmp_path / "data.tf_record")
  write_records(path, random_batch(np.random.RandomState(seed), num_examples))
  return path


def train_dataset_fn(path, global_batch):
  return lambda skip: multigpu.make_dataset([path], FEATURE_SPEC, global_batch, True, seed=5,
                                            skip_batches=skip)


def test_inference_keeps_every_example_of_a_partial_last_batch(tmp_path):
  data = random_batch(np.random.RandomState(11), 37)
  records = str(tmp_path / "test.tf_record")
  write_records(records, data)
  checkpoint = multigpu.train(cpu_plan(1), classifier_model_fn(), train_dataset_fn(records, 8),
                              str(tmp_path / "model"), 2, 0, 1e-3, 8, log_steps=1)
  outputs = {}
  for towers in (1, 2):
    per_tower_batch = 8
    def dataset_fn():
      return multigpu.make_dataset([records], FEATURE_SPEC, per_tower_batch * towers, False)
    outputs[towers] = multigpu.infer(cpu_plan(towers), classifier_model_fn(), dataset_fn,
                                     per_tower_batch * towers, checkpoint)
    assert outputs[towers]["probabilities"].shape == (37, NUM_LABELS)
    np.testing.assert_array_equal(outputs[towers]["label_ids"], data["label_ids"])
  np.testing.assert_allclose(outputs[1]["probabilities"], outputs[2]["probabilities"],
                             rtol=1e-5, atol=1e-6)


def checkpoint_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_resumed_training_ends_where_an_uninterrupted_run_does(tmp_path):
  data = random_batch(np.random.RandomState(2), 24)
  records = str(tmp_path / "train.tf_record")
  write_records(records, data)
  kwargs = dict(num_warmup_steps=1, learning_rate=1e-3, global_batch_size=8, log_steps=1,
                save_checkpoints_steps=2, random_seed=9)
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = multigpu.train(cpu_plan(2), classifier_model_fn(), train_dataset_fn(records, 8),
                            straight_dir, num_train_steps=4, **kwargs)
  # A copy as it was when killed right after saving step 2: step 4 was never written.
  shutil.copytree(straight_dir, resumed_dir)
  for path in glob.glob(os.path.join(resumed_dir, "model.ckpt-4*")):
    os.remove(path)
  tf.train.update_checkpoint_state(resumed_dir, os.path.join(resumed_dir, "model.ckpt-2"))
  resumed = multigpu.train(cpu_plan(2), classifier_model_fn(), train_dataset_fn(records, 8),
                           resumed_dir, num_train_steps=4, **kwargs)
  assert os.path.basename(resumed) == os.path.basename(straight) == "model.ckpt-4"
  a, b = checkpoint_values(straight), checkpoint_values(resumed)
  assert set(a) == set(b)
  assert "output_weights/adam_m" in a and a["global_step"] == 4
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("model_option, message", [
    ("nan_loss", r"loss is nan and the gradient norm nan at step 1\b"),
    # A finite loss whose gradient is NaN: the update would write NaN into the weights.
    ("nan_gradient", r"gradient norm nan at step 1\b"),
])
def test_non_finite_step_stops_without_a_new_checkpoint(tmp_path, model_option, message):
  records = records_file(tmp_path, seed=4, num_examples=16)
  output_dir = str(tmp_path / "model")
  with pytest.raises(multigpu.TrainingDiverged, match=message):
    multigpu.train(cpu_plan(2), classifier_model_fn(**{model_option: True}),
                   train_dataset_fn(records, 8), output_dir, 3, 0, 1e-3, 8,
                   save_checkpoints_steps=1)
  assert tf.train.latest_checkpoint(output_dir) is None


def test_keep_checkpoint_max_also_counts_checkpoints_from_before_a_restart(tmp_path):
  records = records_file(tmp_path, seed=5, num_examples=16)
  output_dir = str(tmp_path / "model")
  for steps in (3, 6):
    multigpu.train(cpu_plan(1), classifier_model_fn(), train_dataset_fn(records, 8), output_dir,
                   steps, 0, 1e-3, 8, save_checkpoints_steps=1, keep_checkpoint_max=2)
  kept = sorted(os.path.basename(p) for p in glob.glob(os.path.join(output_dir, "*.index")))
  assert kept == ["model.ckpt-5.index", "model.ckpt-6.index"]


def test_early_stopped_run_does_not_train_again_and_best_dir_can_move(tmp_path):
  records = records_file(tmp_path, seed=6, num_examples=16)
  output_dir = str(tmp_path / "model")
  # A metric that never improves after the first evaluation: patience 1 stops at step 2.
  eval_spec = multigpu.EvalSpec(
      lambda: multigpu.make_dataset([records], FEATURE_SPEC, 8, False), 8,
      lambda outputs: {"score": 0.5}, "score", 1)
  for _ in range(2):
    last = multigpu.train(cpu_plan(1), classifier_model_fn(), train_dataset_fn(records, 8),
                          output_dir, 10, 0, 1e-3, 8, save_checkpoints_steps=1,
                          eval_spec=eval_spec)
    assert os.path.basename(last) == "model.ckpt-2"
  assert os.path.basename(tf.train.latest_checkpoint(output_dir)) == "model.ckpt-2"
  moved = str(tmp_path / "moved")
  shutil.move(output_dir, moved)
  best = tf.train.latest_checkpoint(os.path.join(moved, "best"))
  assert best is not None and os.path.basename(best) == "model.ckpt-1"


def test_expand_input_files_globs_directories_and_names_a_pattern_that_matches_nothing(tmp_path):
  for name in ("b.tfrecord", "a.tfrecord", "notes.txt"):
    (tmp_path / name).write_text(u"x")
  directory = str(tmp_path)
  assert multigpu.expand_input_files(directory + "/*.txt," + directory, ".tfrecord") == [
      os.path.join(directory, n) for n in ("notes.txt", "a.tfrecord", "b.tfrecord")]
  # A directory that does not exist raised NotFoundError from tf.gfile.Glob on TF 1.15.
  for flag in ("", directory + "/missing_dir/*.txt", directory + "/*.csv"):
    with pytest.raises(multigpu.UsageError, match="--input_file"):
      multigpu.expand_input_files(flag)
