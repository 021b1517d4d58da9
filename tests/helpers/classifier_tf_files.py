# coding=utf-8
"""The TensorFlow files of classifier runs: a random BERT classifier checkpoint to start a
run from, and the scalar summaries a run's event files hold."""

import collections
import glob
import os
import types

import tensorflow.compat.v1 as tf

import modeling
import numpy_bert

def write_init_checkpoint(config_dict, num_labels, path, seed, large_weights=False):
  """Saves a randomly initialised BERT classifier (bert/* plus the head) to `path`.

  The head variables are Google's top-level output_weights [num_labels, hidden] and
  output_bias [num_labels]; there is no global_step, as in Google's releases.

  Args:
    config_dict: the bert_config.json fields.
    num_labels: rows of the head.
    path: the checkpoint prefix to write.
    seed: random seed.
    large_weights: use numpy_bert.random_weights (kernels with stddev 0.3) instead of
      BERT's initializers (stddev 0.02), so that different inputs give clearly different
      outputs even before training.
  """
  config = modeling.BertConfig.from_dict(config_dict)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    input_ids = tf.placeholder(tf.int32, [1, 8])
    modeling.BertModel(config, False, input_ids)
    tf.get_variable("output_weights", [num_labels, config.hidden_size],
                    initializer=tf.truncated_normal_initializer(stddev=0.5))
    tf.get_variable("output_bias", [num_labels],
                    initializer=tf.truncated_normal_initializer(stddev=0.1))
    saver = tf.train.Saver(tf.global_variables())
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      if large_weights:
        values = numpy_bert.random_weights(types.SimpleNamespace(**config_dict), seed)
        for variable in tf.global_variables():
          name = variable.op.name
          if name in values:
            variable.load(values[name], sess)
      saver.save(sess, path, write_meta_graph=False)
  return path


def event_tags_and_steps(directory):
  """tag -> sorted steps of the scalar summaries in a directory's event files."""
  files = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
  assert files, "no TensorBoard event file in %s" % directory
  steps = collections.defaultdict(set)
  for path in files:
    for event in tf.train.summary_iterator(path):
      for value in event.summary.value:
        steps[value.tag].add(event.step)
  return dict((tag, sorted(s)) for tag, s in steps.items())
