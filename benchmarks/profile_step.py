# coding=utf-8
"""Where a training step's time goes: runs one of our commands (run_*_mgpu.py) as it is,
traces a few of its training steps with TensorFlow's step stats, and prints the time of
each op type and the slowest ops, per step.

Usage (TF virtualenv, from the repo root):
  python benchmarks/profile_step.py --command run_embedding_mgpu.py --trace_from 60 \\
      --trace_steps 5 -- --data_dir=... --do_train ...

Everything after `--` goes to the command. Step n is the command's n-th training step
(sess.run with the training fetches); trace a few well after the first, which builds
caches. The op times are summed over the threads that ran them, so with 2 cores they add
up to more than the step's wall time; the share of each op type is what to read.
"""

import argparse
import collections
import importlib
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


class StepTracer(object):
  """Wraps Session.run: traces the training steps trace_from .. trace_from + count - 1
  (the runs whose fetches are a dict: the runner's training step) and sums their op
  times."""

  def __init__(self, trace_from, count):
    self.trace_from, self.count = trace_from, count
    self.steps = 0
    self.walls = []
    self.by_type = collections.Counter()
    self.by_node = collections.Counter()
    self.type_of = {}

  def install(self):
    import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.python.client import session  # pylint: disable=import-outside-toplevel
    original = session.BaseSession.run
    tracer = self

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
      if isinstance(fetches, dict):
        tracer.steps += 1
        if tracer.trace_from <= tracer.steps < tracer.trace_from + tracer.count:
          metadata = tf.RunMetadata()
          start = time.time()
          result = original(self, fetches, feed_dict,
                            tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE), metadata)
          tracer.walls.append(time.time() - start)
          tracer.add(metadata.step_stats)
          return result
      return original(self, fetches, feed_dict, options, run_metadata)
    session.BaseSession.run = run

  def add(self, step_stats):
    for device in step_stats.dev_stats:
      for node in device.node_stats:
        # timeline_label: "name = OpType(inputs)"; some nodes have none.
        label = node.timeline_label
        op_type = label.split("=")[-1].strip().split("(")[0] if "=" in label else node.node_name
        self.by_type[op_type] += node.all_end_rel_micros
        self.by_node[node.node_name] += node.all_end_rel_micros
        self.type_of[node.node_name] = op_type

  def report(self, top_types, top_nodes):
    steps = max(1, len(self.walls))
    total = sum(self.by_type.values())
    print("traced steps: %d, wall per step: %s s" % (
        len(self.walls), ", ".join("%.3f" % wall for wall in self.walls)))
    print("op time per step (summed over threads): %.1f ms" % (total / 1000.0 / steps))
    for op_type, micros in self.by_type.most_common(top_types):
      print("  %-36s %8.2f ms  %5.1f%%" % (op_type, micros / 1000.0 / steps,
                                           100.0 * micros / max(total, 1)))
    print("slowest ops:")
    for name, micros in self.by_node.most_common(top_nodes):
      print("  %8.2f ms  %-24s %s" % (micros / 1000.0 / steps, self.type_of[name], name))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--command", required=True, help="e.g. run_embedding_mgpu.py")
  parser.add_argument("--trace_from", type=int, default=60, help="the first step traced")
  parser.add_argument("--trace_steps", type=int, default=5)
  parser.add_argument("--top_types", type=int, default=25)
  parser.add_argument("--top_nodes", type=int, default=20)
  argv = sys.argv[1:]
  split = argv.index("--") if "--" in argv else len(argv)
  args = parser.parse_args(argv[:split])
  tracer = StepTracer(args.trace_from, args.trace_steps)
  tracer.install()
  command = importlib.import_module(os.path.splitext(os.path.basename(args.command))[0])
  from bert_mgpu import command_line  # pylint: disable=import-outside-toplevel
  sys.argv = [args.command] + argv[split + 1:]
  command.define_flags()
  try:
    command_line.run_main(command.main)
  except SystemExit as e:
    if e.code:
      raise
  finally:
    tracer.report(args.top_types, args.top_nodes)


if __name__ == "__main__":
  main()
