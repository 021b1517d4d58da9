# coding=utf-8
"""Collective all-reduce: the sums over replicas of a replicated plan (and over workers).

multigpu.py's package side: it decides what is summed, over which group; this module only
builds the collective ops. NCCL on GPUs, TF's ring algorithm (over gRPC between workers) on
CPUs.
"""

import inspect

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import collective_ops

# TF 1.15.0 lacks the argument (TF 1.15.5 and 2.x have it); there, the session config turns
# on NCCL (DevicePlan.session_config). This and that are the only version differences.
ALL_REDUCE_TAKES_HINT = (
    "communication_hint" in inspect.signature(collective_ops.all_reduce).parameters)

# Gradients are concatenated into packs of about this size, one all-reduce each: BERT-base
# has about 200 variables, most of them small.
PACK_BYTES = 32 << 20


def next_instance_key():
  """A new collective instance key. Every worker builds the same graph in the same order,
  so the n-th collective gets the same key on every worker, which is what pairs them."""
  graph = tf.get_default_graph()
  key = getattr(graph, "_bert_mgpu_instance_key", 0) + 1
  graph._bert_mgpu_instance_key = key  # pylint: disable=protected-access
  return key


def collective_sum(tensor, group_size, group_key, instance_key, on_gpu):
  """The sum of `tensor` over the `group_size` members of a collective group.

  Each member (a device of some worker) calls this with the same keys and gets the same
  result. NCCL on GPUs, TF's ring algorithm (over gRPC between workers) on CPUs.
  """
  if group_size == 1:
    return tf.identity(tensor)
  kwargs = {}
  if ALL_REDUCE_TAKES_HINT:
    kwargs["communication_hint"] = "nccl" if on_gpu else "auto"
  return collective_ops.all_reduce(tensor, group_size, group_key, instance_key,
                                   merge_op="Add", final_op="Id", **kwargs)


def pack_groups(tensors, pack_bytes=PACK_BYTES):
  """Splits indices of `tensors` into packs of one dtype and at most about pack_bytes each
  (a tensor larger than that is a pack of its own).

  Returns:
    A list of lists of indices into `tensors`, in order within each dtype.
  """
  packs, open_packs = [], {}
  for index, tensor in enumerate(tensors):
    dtype = tensor.dtype.base_dtype
    size = tensor.shape.num_elements() * dtype.size
    pack = open_packs.get(dtype)
    if pack is None or pack[1] + size > pack_bytes:
      pack = open_packs[dtype] = ([], 0)
      packs.append(pack[0])
    pack[0].append(index)
    open_packs[dtype] = (pack[0], pack[1] + size)
  return packs


def all_reduce_packed(replica_tensors, devices, group_size, group_key, on_gpu):
  """Sums lists of tensors over a collective group, a few packs at a time.

  Args:
    replica_tensors: one list per local member, each with the same shapes and dtypes
      (static shapes), e.g. the local gradient sums of each replica.
    devices: the device of each local member.
    group_size, group_key: the collective group (its members over all workers).
    on_gpu: use NCCL.

  Returns:
    Lists like replica_tensors, each tensor summed over the whole group.
  """
  summed = [[None] * len(tensors) for tensors in replica_tensors]
  for pack in pack_groups(replica_tensors[0]):
    instance_key = next_instance_key()
    for member, device in enumerate(devices):
      parts = [replica_tensors[member][k] for k in pack]
      with tf.device(device), tf.name_scope("all_reduce"):
        flat = tf.concat([tf.reshape(p, [-1]) for p in parts], axis=0)
        flat = collective_sum(flat, group_size, group_key, instance_key, on_gpu)
        pieces = tf.split(flat, [p.shape.num_elements() for p in parts])
        for k, part, piece in zip(pack, parts, pieces):
          summed[member][k] = tf.reshape(piece, part.shape)
  return summed
