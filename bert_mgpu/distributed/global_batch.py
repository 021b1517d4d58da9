# coding=utf-8
"""A loss over the whole global batch: the towers' rows joined in one known order, the loss
computed once, and each tower's gradient taken back through its own rows.

multigpu.py's package side for the losses that compare examples with each other (CoSENT's
ranking, in-batch negatives: bert_mgpu/embedding/losses.py). A per-tower loss sees only its
tower's rows, which is a weaker objective; here k towers (of any number of workers) give
exactly the update of one device running the whole batch.

The contract. A model_fn that wants it returns, when training,
  {"rows": dict name -> float32 [tower_batch, ...], "batch_loss": function(rows) -> loss}
instead of {"loss": ...}. `batch_loss` receives every name joined over the global batch,
[global_batch, ...], in the order worker by worker, tower by tower (the order in which
multigpu.worker_slice and split_for_towers cut the batch), and returns the float32 scalar
to minimise. That loss is not averaged over towers again.

How the rows meet:
  - within a process, every placement (host, gpu0, replicated) has all its towers in one
    graph: their rows are concatenated;
  - across workers, each worker writes its rows at its own offset into zeros of the global
    shape and the workers sum them with a collective all-reduce (on each worker's CPU 0).
    The sum adds only zeros to each row, so every worker holds the same rows bit for bit,
    computes the same loss, and takes the gradient of its own rows from it: the other
    workers' rows are constants there (TF 1.15's all-gather has no gradient, and its rank
    order is TensorFlow's, not ours).

The gradients. The loss's gradient with respect to each tower's rows is taken once; each
tower then differentiates its own rows with those as grad_ys, on its own device. The
tower builder averages tower gradients (divides by the number of towers of every worker),
so each tower's gradient is scaled by that number here: the update receives
sum over towers of d(loss)/d(weights), the gradient of the one loss.
"""

import tensorflow.compat.v1 as tf

from bert_mgpu.distributed.collectives import all_reduce_packed

ROWS = "rows"
BATCH_LOSS = "batch_loss"


def has_batch_loss(outputs):
  """Whether a model_fn's training outputs ask for the global-batch loss."""
  return BATCH_LOSS in outputs


def _at_offset(rows, offset, global_rows):
  """Places rows among zeros.

  Args:
    rows: [n, ...], n static.
    offset: the first row's place.
    global_rows: the result's rows.

  Returns:
    [global_rows, ...]: zeros, with `rows` at offset..offset + n - 1.
  """
  n = rows.shape[0]
  padding = [[offset, global_rows - offset - n]] + [[0, 0]] * (rows.shape.ndims - 1)
  return tf.pad(rows, padding)


def join_rows(plan, tower_rows, group_key):
  """The rows of every tower of every worker, in one order.

  Args:
    plan: multigpu.DevicePlan.
    tower_rows: per tower of this process, dict name -> float32 [tower_batch, ...]; every
      tower has the same names and static shapes.
    group_key: the collective group of one device per worker (multigpu's).

  Returns:
    dict name -> float32 [global_batch, ...]: worker by worker, tower by tower. A row's
    gradient flows back to the tower (of this worker) that computed it, and nowhere for
    the other workers' rows.
  """
  names = sorted(tower_rows[0])
  with tf.device(plan.tower_devices[0]), tf.name_scope("join_towers"):
    local = [tf.concat([rows[name] for rows in tower_rows], axis=0) for name in names]
  if plan.num_workers == 1:
    return dict(zip(names, local))
  device = plan.worker_device()
  with tf.device(device), tf.name_scope("join_workers"):
    local_rows = local[0].shape[0]
    if local_rows is None or any(t.shape[0] != local_rows for t in local):
      raise ValueError("joining rows over workers needs static batch sizes; got %s" %
                       [t.shape for t in local])
    offset = plan.worker_index * int(local_rows)
    padded = [_at_offset(t, offset, int(local_rows) * plan.num_workers) for t in local]
    summed = all_reduce_packed([padded], [device], plan.num_workers, group_key,
                               on_gpu=False)[0]
    # The forward value is the sum; the gradient reaches this worker's own rows only.
    joined = [p + tf.stop_gradient(s - p) for p, s in zip(padded, summed)]
  return dict(zip(names, joined))


def tower_losses_and_grads(plan, tower_outputs, tower_variables, loss_scale, group_key,
                           attack=None):
  """The loss of the global batch and each tower's share of its gradient.

  Args:
    plan: multigpu.DevicePlan.
    tower_outputs: per tower, its model_fn's training outputs (ROWS and BATCH_LOSS).
    tower_variables: per tower, the variables it differentiates (its replica's).
    loss_scale: fp16's DynamicLossScale, or None.
    group_key: the collective group of one device per worker.
    attack: must be None: adversarial training perturbs per tower.

  Returns:
    (losses, grads): per tower, the global loss (the same scalar for every tower, so the
    builder's mean over towers and workers is that loss), and the gradient of each of its
    variables, scaled by the number of towers of every worker (see the module docstring).
  """
  if attack is not None:
    raise ValueError("adversarial training is defined per tower; a global-batch loss "
                     "cannot take it")
  tower_rows = [outputs[ROWS] for outputs in tower_outputs]
  joined = join_rows(plan, tower_rows, group_key)
  with tf.device(plan.tower_devices[0]), tf.name_scope("global_batch_loss"):
    loss = tf.cast(tower_outputs[0][BATCH_LOSS](joined), tf.float32)
    scaled_loss = loss_scale.scale_loss(loss) if loss_scale else loss
  names = sorted(tower_rows[0])
  flat_rows = [rows[name] for rows in tower_rows for name in names]
  row_grads = tf.gradients(scaled_loss, flat_rows, colocate_gradients_with_ops=True)
  all_towers = float(plan.num_towers * plan.num_workers)
  grads = []
  for i, variables in enumerate(tower_variables):
    rows_and_grads = list(zip(flat_rows, row_grads))[i * len(names):(i + 1) * len(names)]
    pairs = [(rows, grad) for rows, grad in rows_and_grads if grad is not None]
    with tf.device(plan.tower_devices[i]), tf.name_scope("tower_%d_rows_backward" % i):
      tower_grads = tf.gradients([rows for rows, _ in pairs], variables,
                                 grad_ys=[grad for _, grad in pairs],
                                 colocate_gradients_with_ops=True)
      # Scaled after the backward pass, in float32: scaling grad_ys would make fp16's
      # gradients all_towers times one device's, and overflow sooner.
      grads.append([_scaled(grad, all_towers) for grad in tower_grads])
  return [loss] * plan.num_towers, grads


def _scaled(grad, factor):
  """A gradient (Tensor, IndexedSlices or None) times `factor`."""
  if grad is None:
    return None
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(grad.values * factor, grad.indices, grad.dense_shape)
  return grad * factor
