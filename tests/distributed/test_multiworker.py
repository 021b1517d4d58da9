# coding=utf-8
"""Several worker processes on 127.0.0.1 (TF's own distributed runtime and collective
all-reduce): the same weights as one process, only the chief writes, a dead worker is
named within the bound, and a preempted run resumes to its planned step.

Every process is bounded in time (tests/helpers/cli.py) and killed when its test ends."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from classifier_runs import base_flags, run_classifier
from classifier_tf_files import write_init_checkpoint
import cli
from cli import assert_one_line_error, assert_succeeded, flag_list, free_ports

# No dropout, so different splits of the same global batches give the same updates.
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


@pytest.fixture(scope="module")
def setup(demo_data, tmp_path_factory):
  """The demo data with dropout off, and an init checkpoint holding every variable."""
  root = tmp_path_factory.mktemp("multiworker")
  config = dict(demo_data.config, **NO_DROPOUT)
  config_file = str(root / "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(config, f)
  init = write_init_checkpoint(config, len(demo_data.labels), str(root / "init" / "bert.ckpt"),
                               seed=3)
  return demo_data, config_file, init, root


def training_flags(setup, output_dir, **overrides):
  data, config_file, init, _ = setup
  flags = base_flags(data, output_dir, bert_config_file=config_file, init_checkpoint=init,
                     do_eval=None, do_predict=None, train_batch_size=4, num_train_epochs=3,
                     save_checkpoints_steps=4, keep_checkpoint_max=0, num_workers=1)
  flags.update(overrides)
  return flags


def worker_flags(setup, output_dir, hosts, index, **overrides):
  flags = dict(n_gpus=1, variable_update="replicated", worker_hosts=",".join(hosts),
               task_index=index, worker_timeout_secs=5)
  flags.update(overrides)
  return training_flags(setup, output_dir, **flags)


@contextlib.contextmanager
def workers(setup, output_dirs, tmp_path, hosts=None, **overrides):
  """Starts one worker per output_dir (worker 0 is the chief); kills any left at the end."""
  hosts = hosts or ["127.0.0.1:%d" % p for p in free_ports(len(output_dirs))]
  running = []
  with contextlib.ExitStack() as stack:
    for index, output_dir in enumerate(output_dirs):
      flags = worker_flags(setup, output_dir, hosts, index, **overrides)
      running.append(stack.enter_context(cli.RunningScript(
          "run_classifier_mgpu.py", flag_list(flags),
          str(tmp_path / ("worker%d.log" % index)))))
    yield running


def final_weights(output_dir):
  checkpoint = tf.train.latest_checkpoint(output_dir)
  reader = tf.train.load_checkpoint(checkpoint)
  names = [n for n in reader.get_variable_to_shape_map()
           if not n.endswith(("adam_m", "adam_v")) and n != "global_step"]
  return checkpoint, {n: reader.get_tensor(n).astype(np.float64) for n in names}


def relative_difference(a, b, initial):
  diff = sum(np.sum((a[k] - b[k]) ** 2) for k in a)
  norm = sum(np.sum((a[k] - initial[k]) ** 2) for k in a)
  assert norm > 0
  return np.sqrt(diff / norm)


@pytest.fixture(scope="module")
def one_process(setup):
  """The reference: one process with 2 towers."""
  output_dir = str(setup[3] / "one_process")
  assert_succeeded(run_classifier(training_flags(setup, output_dir, n_gpus=2)))
  return output_dir


def test_two_workers_give_the_weights_of_one_process_and_only_the_chief_writes(
    setup, one_process, tmp_path):
  chief_dir, other_dir = str(tmp_path / "chief"), str(tmp_path / "other")
  with workers(setup, [chief_dir, other_dir], tmp_path) as (chief, other):
    assert chief.wait() == 0, chief.stderr()[-3000:]
    assert other.wait() == 0, other.stderr()[-3000:]
  assert "Traceback" not in chief.stderr() + other.stderr()
  assert not os.path.exists(other_dir)  # the other worker wrote nothing
  reference_path, reference = final_weights(one_process)
  path, weights = final_weights(chief_dir)
  assert os.path.basename(path) == os.path.basename(reference_path)  # the planned step
  _, initial = final_weights(os.path.dirname(setup[2]))
  assert relative_difference(reference, weights, initial) <= 1e-5
  assert "2 workers" in chief.stderr() or "x 2 workers" in chief.stderr()


def test_a_killed_worker_is_named_by_the_other_within_the_bound(setup, tmp_path):
  hosts = ["127.0.0.1:%d" % p for p in free_ports(2)]
  # Many steps, so the run is still training when a worker dies.
  with workers(setup, [str(tmp_path / "a"), str(tmp_path / "b")], tmp_path, hosts=hosts,
               num_train_epochs=200, save_checkpoints_steps=1000) as (chief, other):
    chief.wait_for(lambda: "step 3/" in chief.stderr(), "training")
    other.process.kill()
    killed_at = time.time()
    code = chief.wait()
    elapsed = time.time() - killed_at
  assert_one_line_error(chief.outcome(code), "worker 1 (%s)" % hosts[1])
  assert elapsed < 5 + 30, elapsed  # --worker_timeout_secs=5, plus probing and exit


def test_preempted_workers_stop_together_and_resume_to_the_planned_step(
    setup, one_process, tmp_path):
  chief_dir, other_dir = str(tmp_path / "chief"), str(tmp_path / "other")
  hosts = ["127.0.0.1:%d" % p for p in free_ports(2)]
  with workers(setup, [chief_dir, other_dir], tmp_path, hosts=hosts) as (chief, other):
    chief.wait_for(lambda: "step 2/" in chief.stderr(), "training")
    other.signal(signal.SIGTERM)  # only the non-chief is told; both must stop and agree
    assert other.wait() == 128 + signal.SIGTERM, other.stderr()[-3000:]
    assert chief.wait() == 128 + signal.SIGTERM, chief.stderr()[-3000:]
  stopped = tf.train.latest_checkpoint(chief_dir)
  assert stopped is not None and "Stopped by" in chief.stderr()
  reference_path, reference = final_weights(one_process)
  assert os.path.basename(stopped) != os.path.basename(reference_path)  # stopped early
  with workers(setup, [chief_dir, other_dir], tmp_path, hosts=hosts) as (chief, other):
    assert chief.wait() == 0, chief.stderr()[-3000:]
    assert other.wait() == 0, other.stderr()[-3000:]
  assert "Resuming from" in chief.stderr()
  path, weights = final_weights(chief_dir)
  assert os.path.basename(path) == os.path.basename(reference_path)
  _, initial = final_weights(os.path.dirname(setup[2]))
  assert relative_difference(reference, weights, initial) <= 1e-5


def test_worker_flag_errors_are_one_line(setup, tmp_path):
  flags = training_flags(setup, str(tmp_path / "o"), worker_hosts="127.0.0.1:1,127.0.0.1:2",
                         task_index=0)
  assert_one_line_error(run_classifier(flags), "--variable_update=replicated")
  flags.update(variable_update="replicated", task_index=2)
  assert_one_line_error(run_classifier(flags), "--task_index=2", "0 to 1")
  flags.update(worker_hosts="127.0.0.1", task_index=0)
  assert_one_line_error(run_classifier(flags), "host:port")
  assert not os.path.exists(str(tmp_path / "o"))


@pytest.mark.parametrize("flag, values, setting, details", [
    ("save_checkpoints_steps", (4, 5), "save_checkpoints_steps",
     ["the chief has 4, 1 other worker(s) differ", "the chief has 4, this worker 5"]),
    # A recorded training flag (training_flags.json): compared by its digest.
    ("learning_rate", (5e-3, 4e-3), "the training flags (training_flags.json)",
     ["1 other worker(s) differ", "this worker's differ from the chief's"])])
def test_workers_with_different_flags_stop_with_one_line_instead_of_hanging(
    setup, tmp_path, flag, values, setting, details):
  hosts = ["127.0.0.1:%d" % p for p in free_ports(2)]
  runs = []
  with contextlib.ExitStack() as stack:
    for index, value in enumerate(values):
      flags = worker_flags(setup, str(tmp_path / ("w%d" % index)), hosts, index,
                           **{flag: value})
      runs.append(stack.enter_context(cli.RunningScript(
          "run_classifier_mgpu.py", flag_list(flags), str(tmp_path / ("w%d.log" % index)))))
    codes = [run.wait() for run in runs]
  for run, code, detail in zip(runs, codes, details):
    assert_one_line_error(run.outcome(code),
                          "the workers disagree on %s (%s)" % (setting, detail))


def test_the_local_try_out_script_runs_two_workers(tmp_path):
  out = str(tmp_path / "try")
  result = subprocess.run(
      ["bash", cli.script_path("scripts/run_multiworker.sh"), "local", out],
      env=dict(cli.script_env(), PYTHON=sys.executable), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, encoding="utf-8", errors="replace",
      timeout=cli.RUN_TIMEOUT_SECONDS)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "worker 1 wrote nothing to its --output_dir" in result.stdout
  assert tf.train.latest_checkpoint(os.path.join(out, "model")).endswith("model.ckpt-100")
  assert not os.path.exists(os.path.join(out, "worker1_output"))


# Runs a repo script with tf.train.Saver.save slowed down by SLOW_SAVE_SECS (a slow disk, or
# BERT-large's checkpoint on a network file system).
SLOW_SAVE = """
import os, runpy, sys, time
import tensorflow.compat.v1 as tf
save = tf.train.Saver.save
def slow_save(self, *args, **kwargs):
  time.sleep(float(os.environ["SLOW_SAVE_SECS"]))
  return save(self, *args, **kwargs)
tf.train.Saver.save = slow_save
script = os.path.join(os.environ["REPO_DIR"], "run_classifier_mgpu.py")
sys.path.insert(0, os.environ["REPO_DIR"])
sys.argv = [script] + sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def test_a_slow_preemption_save_is_not_cut_short_by_the_watchdog(setup, tmp_path, monkeypatch):
  # The other worker leaves right after the agreed stop; the chief's save takes 3 times
  # --worker_timeout_secs. The watchdog must be off by then, or it would end the chief.
  wrapper = tmp_path / "slow_save.py"
  wrapper.write_text(SLOW_SAVE)
  monkeypatch.setenv("SLOW_SAVE_SECS", "6")
  monkeypatch.setenv("REPO_DIR", cli.REPO_DIR)
  hosts = ["127.0.0.1:%d" % p for p in free_ports(2)]
  chief_dir = str(tmp_path / "chief")
  flags = dict(num_train_epochs=200, save_checkpoints_steps=1000, worker_timeout_secs=2)
  with cli.RunningScript(str(wrapper), flag_list(worker_flags(setup, chief_dir, hosts, 0,
                                                              **flags)),
                         str(tmp_path / "chief.log")) as chief, \
      cli.RunningScript("run_classifier_mgpu.py",
                        flag_list(worker_flags(setup, str(tmp_path / "o"), hosts, 1, **flags)),
                        str(tmp_path / "other.log")) as other:
    chief.wait_for(lambda: "step 2/" in chief.stderr(), "training")
    other.signal(signal.SIGTERM)
    assert other.wait() == 128 + signal.SIGTERM, other.stderr()[-3000:]
    assert chief.wait() == 128 + signal.SIGTERM, chief.stderr()[-3000:]
  assert "cannot be reached" not in chief.stderr()
  assert tf.train.latest_checkpoint(chief_dir) is not None
