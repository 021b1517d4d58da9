# coding=utf-8
"""--adversarial=fgm|pgd (bert_mgpu/training/adversarial.py): the update of
multigpu.build_training against a reference computed by hand, on one device, on towers and
on replicas; the norm taken over the global batch (not per tower); the documented
accumulation behaviour (each micro-batch attacked with its own norm); fp16's unscaled
gradient under the norm; the refusals and the zero / non-finite gradient.

The reference (`reference_update`) is built in a graph of its own, without multigpu.py: the
tiny classifier's plain variables, tf.gradients of its loss, the perturbation computed in
NumPy from the dense table gradient, the table loaded with table + r to take the
adversarial gradients, and the sum of clean and adversarial gradients applied with
optimization.apply_gradients, with the schedule and optimizer train_steps builds.

The optimizer is RAdam: its first five steps are plain momentum (u = m_hat = clipped
gradient, plus weight decay), so the first update is linear in the gradient and any
difference in the gradient shows in the weights (AdamW's first step is ~lr * sign(g),
which would hide most of it). The runs use dropout off (tiny_model.TINY_CONFIG).
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bert_mgpu.errors import UsageError
from bert_mgpu.training import adversarial
import multigpu
import optimization
from tiny_model import (SEQ, batch_placeholders, classifier_model_fn, cpu_plan,  # pylint: disable=g-multiple-import
                        random_batch, relative_update_difference, train_steps)

TABLE = adversarial.TABLE_NAME
OPTIMIZER = "radam"  # train_steps' optimizer here: a first update linear in the gradient
# train_steps' schedule: build_training(..., init_lr=1e-2, num_train_steps=100, warmup 0).
LEARNING_RATE, NUM_TRAIN_STEPS = 1e-2, 100
FGM = adversarial.make_attack("fgm", epsilon=1.0)
# A radius the third step leaves (0.3 + 0.3 > 0.5): the projection is exercised.
PGD = adversarial.make_attack("pgd", epsilon=0.5, alpha=0.3, steps=3)
REPLICATED = multigpu.DevicePlan(["/cpu:0", "/cpu:1"], "/cpu:0", num_cpu_devices=2,
                                 variable_update="replicated")
# 4 towers on 2 replicas (--towers_per_gpu=2): each replica sums two towers' rows first.
TWO_TOWERS_PER_REPLICA = multigpu.DevicePlan(["/cpu:0", "/cpu:0", "/cpu:1", "/cpu:1"], "/cpu:0",
                                             num_cpu_devices=2, variable_update="replicated")
SAME = 1e-5  # relative update difference of two ways to compute one update
DIFFERENT = 1e-3  # ... of two updates that must differ (100x SAME at least)


# ---------------------------------------------------------------------------
# The reference
# ---------------------------------------------------------------------------

class Reference(object):
  """The tiny classifier in a graph of its own (plain resource variables, no multigpu.py):
  its gradients at given weights, and one optimizer step of given gradients."""

  def __init__(self, initial, example_batch):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.placeholders = batch_placeholders(example_batch)
      with tf.variable_scope(tf.get_variable_scope(), use_resource=True):
        loss = classifier_model_fn()(self.placeholders, True)["loss"]
      self.variables = tf.trainable_variables()
      self.names = [v.op.name for v in self.variables]
      assert sorted(self.names) == sorted(initial), (self.names, sorted(initial))
      self.table = self.names.index(TABLE)
      # Dense: a gathered table's IndexedSlices summed per row.
      self.gradients = [tf.convert_to_tensor(g) for g in tf.gradients(loss, self.variables)]
      global_step = tf.train.get_or_create_global_step()
      learning_rate = optimization.learning_rate_schedule(LEARNING_RATE, NUM_TRAIN_STEPS, 0,
                                                          global_step)
      self.fed = [tf.placeholder(tf.float32, v.shape) for v in self.variables]
      self.step, _ = optimization.apply_gradients(list(zip(self.fed, self.variables)),
                                                  learning_rate, global_step, OPTIMIZER,
                                                  clip_norm=1.0)
      self.initializer = tf.global_variables_initializer()
    self.session = tf.Session(graph=self.graph)
    self.initial = initial
    self.load()

  def load(self, table_offset=0.0):
    """The initial weights, the table plus `table_offset`."""
    with self.graph.as_default():
      self.session.run(self.initializer)
      for name, variable in zip(self.names, self.variables):
        value = self.initial[name] + (table_offset if name == TABLE else 0.0)
        variable.load(value, self.session)

  def grads(self, batch, table_offset=0.0):
    """The gradients of the mean loss over `batch` at the initial weights, the table
    plus `table_offset`: a list of float64 arrays in self.names' order."""
    self.load(table_offset)
    values = self.session.run(self.gradients,
                              {self.placeholders[k]: v for k, v in batch.items()})
    return [v.astype(np.float64) for v in values]

  def apply(self, grads):
    """The weights after one step of `grads` from the initial ones."""
    self.load()
    self.session.run(self.step, {p: g.astype(np.float32) for p, g in zip(self.fed, grads)})
    return dict(zip(self.names, self.session.run(self.variables)))


def numpy_perturbations(reference, batch, attack, log):
  """r as adversarial.py's docstring defines it, in NumPy, from the reference's table
  gradients over `batch`; `log` collects (||r|| before projection, after)."""
  table = reference.table
  gradient = reference.grads(batch)[table]
  if attack.method == "fgm":
    return attack.epsilon * gradient / np.linalg.norm(gradient)
  r = np.zeros_like(gradient)
  for step in range(attack.steps):
    if step > 0:
      gradient = reference.grads(batch, r)[table]
    moved = r + attack.alpha * gradient / np.linalg.norm(gradient)
    norm = np.linalg.norm(moved)
    r = moved * min(1.0, attack.epsilon / norm)
    log.append((norm, np.linalg.norm(r)))
  return r


def reference_gradients(reference, batch, attack, groups=1, log=None):
  """The gradient of one update: `batch` cut into `groups` equal parts, each attacked with
  its own table gradient (groups=1: the whole batch's, as the docstring says for towers;
  groups=N: the documented accumulation over N micro-batches, or a norm per tower), each
  part's clean plus adversarial gradient, averaged over the parts."""
  log = [] if log is None else log
  total = None
  for rows in np.array_split(np.arange(len(batch["label_ids"])), groups):
    part = {k: v[rows] for k, v in batch.items()}
    clean = reference.grads(part)
    if attack is None:
      summed = clean
    else:
      r = numpy_perturbations(reference, part, attack, log)
      summed = [c + a for c, a in zip(clean, reference.grads(part, r))]
    total = summed if total is None else [t + s for t, s in zip(total, summed)]
  return [t / groups for t in total]


def reference_update(reference, batch, attack, groups=1, log=None):
  return reference.apply(reference_gradients(reference, batch, attack, groups, log))


# ---------------------------------------------------------------------------
# The batch and the runs the tests share
# ---------------------------------------------------------------------------

def halves_batch(seed):
  """8 random rows whose halves (tower 0 and 1 of 2, or micro-batch 1 and 2) differ: rows
  0-3 are short and use token ids 1-24, rows 4-7 are full length and use ids 16-39. The
  halves' table gradients then have different norms, so a norm per half gives another
  perturbation than the whole batch's, and they share rows 16-24 (and repeat ids within
  a row), which must be summed before the norm."""
  rng = np.random.RandomState(seed)
  batch = random_batch(rng, 8)
  batch["input_ids"][:4] = rng.randint(1, 25, size=[4, SEQ])
  batch["input_ids"][4:] = rng.randint(16, 40, size=[4, SEQ])
  batch["input_mask"][:4, 3:] = 0
  batch["input_mask"][4:] = 1
  return batch


@pytest.fixture(scope="module")
def start():
  """The initial weights, the batch, the plain one-device update of it, the reference
  built on those weights, and per attack method: the one-device update with the attack
  and the references with the whole batch's norm ("global") and with a norm per half
  ("per_half": per tower of 2, or per micro-batch of 2)."""
  batch = halves_batch(45)
  initial, plain, _, _ = train_steps(cpu_plan(1), [batch], OPTIMIZER)
  reference = Reference(initial, batch)
  runs = {"initial": initial, "batch": batch, "plain": plain, "reference": reference}
  for attack in (FGM, PGD):
    log = []
    runs[attack.method] = {
        "one_device": train_steps(cpu_plan(1), [batch], OPTIMIZER, initial,
                                  attack=attack)[1],
        "global": reference_update(reference, batch, attack, groups=1, log=log),
        "per_half": reference_update(reference, batch, attack, groups=2),
        "log": log}
  yield runs
  reference.session.close()


# ---------------------------------------------------------------------------
# 1. Against the reference, one device
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("attack", [FGM, PGD], ids=["fgm", "pgd"])
def test_one_device_matches_the_reference_computed_by_hand(start, attack):
  initial, runs = start["initial"], start[attack.method]
  # The reference's plain step is train_steps' (the same optimizer step, built apart).
  assert relative_update_difference(
      initial, start["plain"], reference_update(start["reference"], start["batch"],
                                                None)) < SAME
  if attack.method == "pgd":
    log = runs["log"]
    assert len(log) == attack.steps
    # The projection was needed (the ball was left) and kept r on the ball.
    assert any(before > attack.epsilon * 1.01 for before, _ in log), log
    assert all(after <= attack.epsilon * (1 + 1e-6) for _, after in log), log
  got = runs["one_device"]
  assert relative_update_difference(initial, runs["global"], got) < SAME
  # The attack changes the update: a run without it (or with its gradient dropped) fails.
  assert relative_update_difference(initial, got, start["plain"]) > DIFFERENT
  # The table's update (not only the other variables') differs from the plain one.
  assert np.abs(got[TABLE] - start["plain"][TABLE]).max() > 1e-6


def test_pgd_differs_from_fgm_and_one_pgd_step_is_fgm(start):
  """PGD's update is not FGM's with its epsilon or its alpha; one PGD step of alpha =
  epsilon is FGM with that epsilon."""
  initial, batch, reference = start["initial"], start["batch"], start["reference"]
  pgd = start["pgd"]["one_device"]
  for epsilon in (PGD.epsilon, PGD.alpha):
    fgm = reference_update(reference, batch, adversarial.make_attack("fgm", epsilon, epsilon))
    assert relative_update_difference(initial, pgd, fgm) > DIFFERENT
  one_step = adversarial.make_attack("pgd", epsilon=0.5, alpha=0.5, steps=1)
  _, got, _, _ = train_steps(cpu_plan(1), [batch], OPTIMIZER, initial, attack=one_step)
  fgm = reference_update(reference, batch, adversarial.make_attack("fgm", 0.5, 0.5))
  assert relative_update_difference(initial, fgm, got) < SAME


# ---------------------------------------------------------------------------
# 2 and 3. Towers and replicas give one device's update: the global batch's norm
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("attack", [FGM, PGD], ids=["fgm", "pgd"])
@pytest.mark.parametrize("plan", [cpu_plan(2), REPLICATED, TWO_TOWERS_PER_REPLICA],
                         ids=["host", "replicated", "replicated_2_towers_each"])
def test_two_towers_give_one_devices_update_with_the_global_batchs_norm(start, plan,
                                                                        attack):
  initial, runs = start["initial"], start[attack.method]
  # The two readings of the norm differ by far more than the tolerance.
  assert relative_update_difference(initial, runs["global"], runs["per_half"]) > DIFFERENT
  _, towers, values, step = train_steps(plan, [start["batch"]], OPTIMIZER, initial,
                                        attack=attack)
  assert step == 1
  assert relative_update_difference(initial, runs["one_device"], towers) < SAME
  assert relative_update_difference(initial, runs["global"], towers) < SAME
  # A norm per tower would give the per-half reference's update.
  assert relative_update_difference(initial, runs["per_half"], towers) > DIFFERENT
  assert relative_update_difference(initial, start["plain"], towers) > DIFFERENT
  if plan.replicated:  # the second replica holds the same weights
    for name, value in towers.items():
      np.testing.assert_allclose(values[multigpu.replica_variable_name(name, 1)], value,
                                 rtol=1e-6, atol=1e-7, err_msg=name)


# ---------------------------------------------------------------------------
# 4. Accumulation attacks each micro-batch on its own
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("attack", [FGM, PGD], ids=["fgm", "pgd"])
def test_accumulation_attacks_each_micro_batch_with_its_own_norm(start, attack):
  """Documented: with --accumulation_steps, each micro-batch is attacked with its own
  global micro-batch's gradient norm: 2 micro-batches on one device give the average of
  two attacked micro-batch gradients (the per-half reference), not the 2-tower update."""
  initial, runs = start["initial"], start[attack.method]
  _, accumulated, _, step = train_steps(cpu_plan(1), [start["batch"]], OPTIMIZER, initial,
                                        accumulation_steps=2, attack=attack)
  assert step == 1
  assert relative_update_difference(initial, runs["per_half"], accumulated) < SAME
  assert relative_update_difference(initial, runs["global"], accumulated) > DIFFERENT
  assert relative_update_difference(initial, runs["one_device"], accumulated) > DIFFERENT


def test_accumulation_on_two_towers_takes_each_micro_batchs_norm_over_both():
  """2 towers x 2 micro-batches of 4 rows: each micro-batch (2 rows per tower) is
  attacked with the norm of both towers' rows, as on one device with accumulation."""
  batch = halves_batch(47)
  initial, accumulated, _, _ = train_steps(cpu_plan(1), [batch], OPTIMIZER,
                                           accumulation_steps=2, attack=FGM)
  _, towers, _, _ = train_steps(cpu_plan(2), [batch], OPTIMIZER, initial,
                                accumulation_steps=2, attack=FGM)
  assert relative_update_difference(initial, accumulated, towers) < SAME


# ---------------------------------------------------------------------------
# 5. fp16: the norm is taken of the unscaled gradient
# ---------------------------------------------------------------------------

def norm_inputs(graph, step=0, replica=0):
  """The tensors whose norm next_perturbation takes at attack step `step` on `replica` (tf.norm's
  x * x, the only elementwise square in the scope's norm)."""
  scope = "adversarial_step_%d_replica_%d/" % (step, replica)
  found = [op.inputs[0] for op in graph.get_operations()
           if op.name.startswith(scope + "norm/") and op.type == "Mul"
           and op.inputs[0] is op.inputs[1]]
  assert found, sorted(op.name for op in graph.get_operations() if op.name.startswith(scope))
  return found


@pytest.mark.parametrize("plan", [cpu_plan(1), REPLICATED], ids=["host", "replicated"])
def test_fp16_takes_the_norm_of_the_unscaled_gradient(start, plan):
  """fp16 runs on this CPU (emulated; test_precision.py does the same). The tensor whose
  norm gives r is the true gradient of the table (the fp32 reference's, to fp16's
  precision), whatever the loss scale (2^15 or 8), not scale x gradient; and the fp16 update
  with FGM follows fp32's. (r = eps g/||g|| does not change if g is multiplied by the scale,
  so the update alone cannot show a missing unscale: the tensor under the norm does.)
  Replicated: each replica's half of the batch, all-reduced, is the whole batch's gradient
  on replica 0 (its local sums are unscaled before the all-reduce)."""
  initial, batch, reference = start["initial"], start["batch"], start["reference"]
  true_gradient = reference.grads(batch)[reference.table]
  with tf.Graph().as_default() as graph:
    tf.set_random_seed(1)
    placeholders = batch_placeholders(batch)
    ops = multigpu.build_training(plan, classifier_model_fn(), placeholders, LEARNING_RATE,
                                  NUM_TRAIN_STEPS, 0, OPTIMIZER, precision="fp16",
                                  attack=FGM)
    assert ops.loss_scale is not None
    # Every replica's: a collective all-reduce runs only when all its replicas run.
    under_norms = [norm_inputs(graph, replica=replica)[0]
                   for replica in range(len(plan.replica_devices) if plan.replicated else 1)]
    under_norm = under_norms[0]
    assert under_norm.dtype == tf.float32 and under_norm.shape.as_list() == list(
        initial[TABLE].shape)
    matmuls = {op.outputs[0].dtype.name for op in graph.get_operations()
               if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMul")}
    assert matmuls == {"float16"}
    sync = multigpu.build_start_sync(plan)
    trained = {v.op.name: v for v in multigpu.saveable_variables() if v.op.name in initial}
    feed = {placeholders[k]: v for k, v in batch.items()}
    with tf.Session(config=plan.session_config()) as sess:
      sess.run(tf.global_variables_initializer())
      for name, variable in trained.items():
        variable.load(initial[name], sess)
      if sync is not None:
        sess.run(sync)
      for scale in (2.0 ** 15, 8.0):
        ops.loss_scale.scale.load(scale, sess)
        for got in sess.run(under_norms, feed):
          error = np.linalg.norm(got - true_gradient) / np.linalg.norm(true_gradient)
          assert error < 1e-2, (scale, error, np.linalg.norm(got),
                                np.linalg.norm(true_gradient))
      ops.loss_scale.scale.load(2.0 ** 15, sess)
      sess.run(ops.train_op, feed)
      assert sess.run(ops.global_step) == 1  # applied, not skipped
      fp16 = {name: value for name, value in zip(trained, sess.run(list(trained.values())))}
  fp32 = reference_update(reference, batch, FGM)
  assert relative_update_difference(initial, fp32, fp16) < 2e-2


# ---------------------------------------------------------------------------
# 6. Settings and degenerate gradients
# ---------------------------------------------------------------------------

def test_make_attack_and_describe():
  assert adversarial.make_attack("none") is None
  fgm = adversarial.make_attack("fgm")
  assert fgm == adversarial.Attack("fgm", 1.0, 0.3, 3) and fgm.passes == 1
  assert fgm.describe() == "adversarial training FGM on the token embeddings (epsilon 1)"
  pgd = adversarial.make_attack("pgd", 1.0, 0.3, 2)
  assert pgd.passes == 2
  assert pgd.describe() == ("adversarial training PGD on the token embeddings (2 steps of "
                            "0.3 in a ball of radius 1)")


@pytest.mark.parametrize("arguments,message", [
    (("gan",), "--adversarial=gan: use one of none|fgm|pgd."),
    (("fgm", 0.0), "--adversarial_epsilon=0.0: give a positive size"),
    (("fgm", -1.0), "--adversarial_epsilon=-1.0: give a positive size"),
    (("pgd", float("inf")), "--adversarial_epsilon=inf: give a positive size"),
    (("pgd", float("nan")), "--adversarial_epsilon=nan: give a positive size"),
    (("pgd", 1.0, 0.0), "--adversarial_alpha=0.0: PGD's step must be positive and at most "
                        "--adversarial_epsilon=1.0"),
    (("pgd", 0.5, 0.6), "--adversarial_alpha=0.6: PGD's step must be positive and at most "
                        "--adversarial_epsilon=0.5"),
    (("pgd", 1.0, 0.3, 0), "--adversarial_steps=0: PGD takes at least 1 step")])
def test_make_attack_refuses_each_bad_value_in_one_line(arguments, message):
  with pytest.raises(UsageError) as raised:
    adversarial.make_attack(*arguments)
  assert str(raised.value).startswith(message), str(raised.value)
  assert "\n" not in str(raised.value)


def test_fgm_with_a_small_epsilon_is_not_refused_over_pgds_alpha():
  assert adversarial.make_attack("fgm", 0.2).epsilon == 0.2
  assert adversarial.make_attack("none", 0.2) is None


def test_table_index_finds_the_table_by_its_plain_name():
  with tf.Graph().as_default():
    names = ["bert/embeddings/position_embeddings", TABLE, "output_bias", "other/" + TABLE]
    variables = [tf.Variable(0.0, name=name) for name in names]
    assert adversarial.table_index(variables) == 1
    with pytest.raises(ValueError, match="does not train"):
      adversarial.table_index(variables[2:])


def test_the_adversarial_gradient_of_the_table_stays_sparse():
  """The perturbed read passes the gathered rows' gradient through as IndexedSlices on both
  TensorFlows (TF 1.15's own Add gradient would make a dense [vocab, hidden] tensor)."""
  batch = random_batch(np.random.RandomState(4), 4)
  with tf.Graph().as_default():
    _, grads_and_vars = multigpu.build_tower_losses_and_grads(
        cpu_plan(1), classifier_model_fn(), batch_placeholders(batch), attack=FGM)
    table_grads = [g for g, v in grads_and_vars if v.op.name == TABLE]
    assert len(table_grads) == 1 and isinstance(table_grads[0], tf.IndexedSlices)
    value = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    with tf.Session() as sess:
      np.testing.assert_array_equal(
          sess.run(adversarial.perturbed(value, tf.constant([[0.5, 0.0], [0.0, -1.0]]))),
          [[1.5, 2.0], [3.0, 3.0]])


@pytest.mark.parametrize("attack", [FGM, PGD], ids=["fgm", "pgd"])
def test_a_zero_or_non_finite_gradient_gives_no_perturbation(attack):
  previous = np.full([4, 3], 0.12, np.float32)
  with tf.Graph().as_default():
    gradient = tf.placeholder(tf.float32, [4, 3])
    first = adversarial.next_perturbation(attack, None, gradient)
    later = adversarial.next_perturbation(attack, tf.constant(previous), gradient)
    with tf.Session() as sess:
      for bad in (0.0, np.inf, -np.inf, np.nan):
        value = np.ones([4, 3], np.float32)
        value[1, 2] = bad
        if bad == 0.0:
          value[:] = 0.0
        r, r_later = sess.run([first, later], {gradient: value})
        np.testing.assert_array_equal(r, np.zeros([4, 3]), err_msg=str(bad))
        # PGD keeps the perturbation it had (FGM has none to keep).
        np.testing.assert_array_equal(
            r_later, previous if attack.method == "pgd" else np.zeros([4, 3]),
            err_msg=str(bad))
      # A usable gradient: a step of epsilon (FGM) or alpha (PGD) along it.
      value = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0
      step = (attack.epsilon if attack.method == "fgm" else attack.alpha)
      expected = step * value / np.linalg.norm(value)
      np.testing.assert_allclose(sess.run(first, {gradient: value}), expected, rtol=1e-5)
      if attack.method == "pgd":  # previous + step leaves the ball of 0.5: projected back
        moved = previous + expected
        assert np.linalg.norm(moved) > attack.epsilon * 1.05
        np.testing.assert_allclose(
            sess.run(later, {gradient: value}),
            moved * attack.epsilon / np.linalg.norm(moved), rtol=1e-5)
