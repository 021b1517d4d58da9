# coding=utf-8
"""End-to-end tests of run_ner_mgpu.py's span heads (--ner_head=global_pointer and
efficient_global_pointer) on a made-up CMeEE set whose entities nest: every ORG ("<city>大学",
"<city>医院", ...) holds a LOC (its city), which a tag per character cannot represent.

Every run is a subprocess (tests/helpers/cli.py) with a tiny BERT; --n_gpus=2 runs two
towers on logical CPU devices.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli
from cli import read_jsonl

CITIES = [u"北京", u"上海", u"广州", u"深圳", u"杭州", u"南京", u"武汉", u"成都"]
SUFFIXES = [u"大学", u"医院", u"银行", u"公司"]
FILLERS = [u"他在", u"我去", u"她说", u"今天", u"我们参观了", u"听说", u"明天到", u"有人在"]
ENDINGS = [u"工作", u"看病", u"开会", u"", u"学习", u"吃饭"]
MAX_SEQ_LENGTH = 24  # the longest sentences need two windows


def make_sentence(rng):
  """A sentence and its entities (CMeEE records, end_idx inclusive): an ORG with its city
  as a nested LOC, and sometimes a city alone (a LOC)."""
  text, entities = FILLERS[rng.randint(len(FILLERS))], []
  for _ in range(1 + rng.randint(2)):
    city, start = CITIES[rng.randint(len(CITIES))], len(text)
    word = city
    if rng.rand() < 0.7:
      word = city + SUFFIXES[rng.randint(len(SUFFIXES))]
      entities.append({"start_idx": start, "end_idx": start + len(word) - 1, "type": "ORG",
                       "entity": word})
    entities.append({"start_idx": start, "end_idx": start + len(city) - 1, "type": "LOC",
                     "entity": city})
    text += word + ENDINGS[rng.randint(len(ENDINGS))] + u"，"
  return {"text": text, "entities": entities}


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, ensure_ascii=False, indent=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("cmeee_data"))
  rng = np.random.RandomState(0)
  splits = {"train": [make_sentence(rng) for _ in range(240)],
            "dev": [make_sentence(rng) for _ in range(40)],
            "test": [make_sentence(rng) for _ in range(40)]}
  data_dir = os.path.join(root, "cmeee")
  os.makedirs(data_dir)
  for name, records in splits.items():
    if name == "test":  # CBLUE's test file has no entities
      records = [{"text": record["text"]} for record in records]
    write_json(os.path.join(data_dir, "CMeEE_%s.json" % name), records)
  chars = sorted(set(u"".join(r["text"] for rs in splits.values() for r in rs)))
  with open(os.path.join(root, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write(u"".join(t + u"\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + chars))
  config = {"vocab_size": len(chars) + 4, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
            "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}
  write_json(os.path.join(root, "bert_config.json"), config)
  return {"root": root, "data_dir": data_dir, "test": splits["test"]}


def span_flags(data, output_dir, **flags):
  values = dict([
      ("data_dir", data["data_dir"]), ("data_format", "cmeee"),
      ("vocab_file", os.path.join(data["root"], "vocab.txt")),
      ("bert_config_file", os.path.join(data["root"], "bert_config.json")),
      ("output_dir", output_dir), ("do_train", True), ("do_eval", True), ("do_predict", True),
      ("n_gpus", 2), ("max_seq_length", MAX_SEQ_LENGTH), ("doc_stride", 8),
      ("ner_head", "global_pointer"), ("train_batch_size", 16), ("learning_rate", 2e-3),
      ("num_train_epochs", 8), ("save_checkpoints_steps", 1000), ("log_steps", 1000)])
  values.update(flags)
  return cli.flag_list(values)


def read_eval_results(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return {key: float(value) for key, value in
            (line.strip().split(" = ") for line in f if line.strip())}


def spans_of(record):
  return sorted((e["type"], e["start_idx"], e["end_idx"]) for e in record["entities"])


TF1 = tf.__version__.startswith("1.")


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
  """The GlobalPointer run, exported (SavedModel, and ONNX on TF 2.x)."""
  root = str(tmp_path_factory.mktemp("gp_run"))
  output_dir = os.path.join(root, "model")
  result = cli.run_script("run_ner_mgpu.py", span_flags(
      data, output_dir, export_dir=os.path.join(root, "exports"),
      export_format="savedmodel" if TF1 else "both"))
  cli.assert_succeeded(result)
  return output_dir, result


def test_the_span_head_learns_entities_inside_entities(trained, data):
  output_dir, result = trained
  metrics = read_eval_results(output_dir)
  assert metrics["f1"] >= 0.9 and metrics["nested_recall"] >= 0.9, metrics
  assert "windows (" in result.stderr and "were split)" in result.stderr
  with open(os.path.join(output_dir, "eval_report.json"), encoding="utf-8") as f:
    report = json.load(f)
  assert report["nested"]["support"] > 20  # every ORG's LOC
  with open(os.path.join(output_dir, "CMeEE_test.json"), encoding="utf-8") as f:
    predicted = json.load(f)
  assert [r["text"] for r in predicted] == [r["text"] for r in data["test"]]
  right = sum(spans_of(p) == spans_of(g) for p, g in zip(predicted, data["test"]))
  assert right >= 0.8 * len(predicted)
  nested = [p for p in predicted if len(spans_of(p)) > len(set(e["start_idx"]
                                                               for e in p["entities"]))]
  assert nested  # predictions that share a start: an ORG with its LOC
  with open(os.path.join(output_dir, "labels.txt"), encoding="utf-8") as f:
    assert f.read().split() == ["LOC", "ORG"]


def test_two_towers_give_the_update_of_one_device(data, tmp_path):
  def run(name, n_gpus, per_tower):
    output_dir = str(tmp_path / name)
    cli.assert_succeeded(cli.run_script("run_ner_mgpu.py", span_flags(
        data, output_dir, do_eval=False, do_predict=False, n_gpus=n_gpus,
        train_batch_size=per_tower, num_train_epochs=0.2,
        ner_head="efficient_global_pointer")))
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.endswith(("adam_m", "adam_v")) and name != "global_step"}
  one, two = run("one", 1, 16), run("two", 2, 8)
  assert "cls/ner/type_weights" in one and set(one) == set(two)
  for name in one:
    np.testing.assert_allclose(two[name], one[name], rtol=1e-4, atol=1e-6, err_msg=name)


def all_variables(output_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_a_preempted_run_resumes_to_the_weights_of_an_uninterrupted_one(data, tmp_path):
  """SIGTERM mid-training, then the same command: the span records (and --group_by_length's
  batch order) continue where they stopped, so the weights equal a straight run's."""
  def flags(output_dir):
    return span_flags(data, output_dir, do_eval=False, do_predict=False, log_steps=1,
                      group_by_length=True)
  straight_dir, stopped_dir = str(tmp_path / "straight"), str(tmp_path / "stopped")
  with cli.RunningScript("run_ner_mgpu.py", flags(stopped_dir),
                         str(tmp_path / "stopped.stderr")) as run:
    run.wait_for(lambda: re.search(r"step 2\d/\d+ ", run.stderr()), "step 20")
    run.signal(15)
    assert run.wait() == 128 + 15, run.stderr()[-3000:]
    match = re.search(r"Stopped by SIGTERM at step (\d+) of (\d+)", run.stderr())
  assert match and 20 <= int(match.group(1)) < int(match.group(2)), run.stderr()[-3000:]
  straight = cli.run_script("run_ner_mgpu.py", flags(straight_dir))
  resumed = cli.run_script("run_ner_mgpu.py", flags(stopped_dir))
  cli.assert_succeeded(straight)
  cli.assert_succeeded(resumed)
  assert "(step %s of %s)" % match.groups() in resumed.stderr
  final = [all_variables(d) for d in (straight_dir, stopped_dir)]
  assert set(final[0]) == set(final[1]) and "cls/ner/span_weights/adam_v" in final[0]
  for name in final[0]:
    np.testing.assert_array_equal(final[0][name], final[1][name], err_msg=name)


def test_conll_input_predicts_spans_into_json_lines_without_predict_txt(trained, data,
                                                                        tmp_path):
  # A copy: predicting here rewrites predict_entities.jsonl, which the serving tests read.
  output_dir = str(tmp_path / "model")
  shutil.copytree(trained[0], output_dir)
  conll_dir = tmp_path / "conll"
  conll_dir.mkdir()
  lines = []
  for record in data["test"][:5]:
    lines.extend(u"%s O" % char for char in record["text"])
    lines.append(u"")
  (conll_dir / "test.txt").write_text(u"\n".join(lines) + u"\n", encoding="utf-8")
  before = set(os.listdir(output_dir))
  result = cli.run_script("run_ner_mgpu.py", span_flags(
      data, output_dir, data_dir=str(conll_dir), data_format="conll", do_train=False,
      do_eval=False))
  cli.assert_succeeded(result)
  assert "predict_entities.jsonl (no predict.txt)" in result.stderr
  assert "predict.txt" not in set(os.listdir(output_dir)) - before
  with open(os.path.join(output_dir, "predict_entities.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  assert len(records) == 5 and any(r["entities"] for r in records)


@pytest.mark.parametrize("flags, message", [
    ({"use_crf": True}, "--use_crf means --ner_head=crf, but --ner_head=global_pointer"),
    ({"rdrop_alpha": 1.0}, "--rdrop_alpha=1.0 with --ner_head=global_pointer"),
    ({"eval_batch_size": 300000}, "take 1.3 GiB (--eval_batch_size=300000 x 2 types x "
                                  "24^2 pairs x 4 bytes), above the 1 GiB bound"),
])
def test_refusals_are_one_line_and_write_nothing(data, tmp_path, flags, message):
  output_dir = str(tmp_path / "out")
  result = cli.run_script("run_ner_mgpu.py", span_flags(data, output_dir, **flags))
  cli.assert_one_line_error(result, message)
  assert not os.path.exists(output_dir)


def test_predict_text_on_the_output_dir_and_the_exports_gives_the_runs_entities(trained,
                                                                              data, tmp_path):
  output_dir, _ = trained
  expected = read_jsonl(os.path.join(output_dir, "predict_entities.jsonl"))
  texts_file = str(tmp_path / "texts.txt")
  with open(texts_file, "w", encoding="utf-8") as f:
    f.write(u"".join(record["text"] + u"\n" for record in data["test"]))
  export_dir = os.path.join(os.path.dirname(output_dir), "exports")
  sources = [["--output_dir=" + output_dir], ["--export_dir=" + export_dir]]
  if not TF1:
    sources.append(["--export_dir=" + export_dir, "--backend=onnxruntime"])
  for source in sources:
    output_file = str(tmp_path / "predicted.jsonl")
    cli.assert_succeeded(cli.run_script("predict_text.py", source + [
        "--input_file=" + texts_file, "--output_file=" + output_file,
        "--predict_batch_size=5"]))
    assert read_jsonl(output_file) == expected, source
  assert any(len(r["entities"]) > len(set(e["start"] for e in r["entities"]))
             for r in expected)  # nested entities among them


def test_serve_answers_nested_entities(trained, data, tmp_path):
  output_dir, _ = trained
  expected = read_jsonl(os.path.join(output_dir, "predict_entities.jsonl"))
  running = cli.RunningScript("predict_text.py", [
      "--output_dir=" + output_dir, "--serve=0", "--host=127.0.0.1", "--max_batch=4"],
                              str(tmp_path / "stderr.txt"))
  with running:
    running.wait_for(lambda: re.search(r"Serving on (http://\S+)", running.stderr()),
                     "the server listening")
    url = re.search(r"Serving on (http://\S+)", running.stderr()).group(1)
    running.wait_for(lambda: cli.http_json(url + "/healthz", None, 60)[0] == 200,
                     "the model ready")
    rows = [0, 3, 1, 7, 2]
    status, reply = cli.http_json(url + "/predict", json.dumps(
        {"texts": [data["test"][i]["text"] for i in rows]}).encode("utf-8"), 60)
    assert status == 200, reply
    assert reply == {"entities": [expected[i]["entities"] for i in rows]}
    assert cli.http_json(url + "/labels", None, 60)[1]["labels"] == ["LOC", "ORG"]
    running.signal(15)
    assert running.wait() == 0


def test_conversion_to_transformers_refuses_a_span_head_and_writes_nothing(trained, tmp_path):
  output_dir, _ = trained
  target = str(tmp_path / "hf")
  result = cli.run_script("convert_checkpoint.py", ["--to=transformers",
                                                    "--input=" + output_dir,
                                                    "--output=" + target])
  cli.assert_one_line_error(result, "has a span head", "transformers has no class")
  assert not os.path.exists(target)
