# coding=utf-8
"""extract_features.py at the command line, on a tiny random BERT checkpoint.

The runs are subprocesses (tests/helpers/cli.py), started together in a module fixture.
Their outputs are checked against hand-written token lists, against BertModel run directly
in this process on each line alone (no padding, no towers), and against each other: one
tower against two, padding to the longest example against padding to max_seq_length,
the JSON lines of pooled runs against those of unpooled ones (byte for byte), and the
pooled .npy files against both the JSON lines and the direct run's last layer.
"""

import collections
import concurrent.futures
import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import cli  # pylint: disable=g-import-not-at-top
import extract_features  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top

MAX_SEQ_LENGTH = 12
LAYERS = [-1, -3, 1]  # the last, the first and the middle one of 3, in this order
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "hello",
         "world", "a", "b", "c", "|", "cafe", "long", "##er", u"北", u"京", u"是", u"首", u"都"]
# A large initializer_range, so that attention is far from uniform and a padding position
# that leaked into it would show in the values.
CONFIG = modeling.BertConfig(
    vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
    intermediate_size=32, hidden_act="gelu", hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1, max_position_embeddings=32, type_vocab_size=2,
    initializer_range=0.5)

# Input lines and the tokens Google's extract_features.py gives them (by hand). Nine lines:
# batches of 2 on one tower end with a partial batch of 1, global batches of 4 on two
# towers with 1.
LINES = [
    (u"the cat sat", ["[CLS]", "the", "cat", "sat", "[SEP]"]),
    (u"", ["[CLS]", "[SEP]"]),  # an empty line is a text with no tokens
    (u"Hello World ||| the dog", ["[CLS]", "hello", "world", "[SEP]", "the", "dog", "[SEP]"]),
    (u"北京是首都", ["[CLS]", u"北", u"京", u"是", u"首", u"都", "[SEP]"]),
    # Longer than MAX_SEQ_LENGTH: cut to its first 10 word pieces.
    (u"longer cat longer dog longer cat longer",
     ["[CLS]", "long", "##er", "cat", "long", "##er", "dog", "long", "##er", "cat", "long",
      "[SEP]"]),
    (u"the zebra", ["[CLS]", "the", "[UNK]", "[SEP]"]),
    (u"  the dog \t", ["[CLS]", "the", "dog", "[SEP]"]),  # stripped
    # Split at the last " ||| "; accents stripped by lower-casing.
    (u"a ||| b ||| Café", ["[CLS]", "a", "|", "|", "|", "b", "[SEP]", "cafe", "[SEP]"]),
    # A pair too long: the longer text loses tokens first.
    (u"the cat sat the dog the cat ||| a b c",
     ["[CLS]", "the", "cat", "sat", "the", "dog", "the", "[SEP]", "a", "b", "c", "[SEP]"]),
]

# Segment ids: 0 up to and including the first [SEP], 1 after it.
PAIR_LINES = (2, 7, 8)


def write_text(path, text):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return path


def encoder_variables():
  """BERT's variables but the pooler's, which no encoder layer depends on."""
  return [v for v in tf.global_variables() if not v.op.name.startswith("bert/pooler/")]


def write_checkpoint(path, seed=7):
  """Saves a freshly initialised BertModel of CONFIG (Google's variable names).

  Without the pooler: extract_features.py needs only what the encoder layers depend on.
  """
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    input_ids = tf.placeholder(tf.int32, [None, None])
    modeling.BertModel(CONFIG, False, input_ids)
    saver = tf.train.Saver(encoder_variables())
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      saver.save(sess, path)
  return path


def direct_layers(checkpoint, examples):
  """Every encoder layer of each example, computed alone: [layers, tokens, hidden] each.

  Args:
    checkpoint: the weights.
    examples: list of (input_ids, segment_ids) without padding.
  """
  with tf.Graph().as_default():
    input_ids = tf.placeholder(tf.int32, [1, None])
    segment_ids = tf.placeholder(tf.int32, [1, None])
    model = modeling.BertModel(CONFIG, False, input_ids, token_type_ids=segment_ids)
    layers = tf.stack(model.get_all_encoder_layers())[:, 0]  # [layers, seq, hidden]
    saver = tf.train.Saver(encoder_variables())
    with tf.Session() as sess:
      saver.restore(sess, checkpoint)
      return [sess.run(layers, {input_ids: [ids], segment_ids: [segments]})
              for ids, segments in examples]


def token_ids(tokens):
  return [VOCAB.index(token) for token in tokens]


def segment_ids(tokens, is_pair):
  if not is_pair:
    return [0] * len(tokens)
  first_sep = tokens.index("[SEP]")
  return [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)


Model = collections.namedtuple("Model", ["directory", "vocab_file", "config_file",
                                         "checkpoint", "input_file"])


def model_flags(model, output_file, **flags):
  """The flags of a run on `model`, as a dict for cli.flag_list."""
  args = collections.OrderedDict([
      ("input_file", model.input_file), ("output_file", output_file),
      ("vocab_file", model.vocab_file), ("bert_config_file", model.config_file),
      ("init_checkpoint", model.checkpoint), ("max_seq_length", MAX_SEQ_LENGTH),
      ("layers", ",".join(str(i) for i in LAYERS)), ("batch_size", 2)])
  args.update(flags)
  return args


def run_extract(flags, file_size_limit=None):
  """Runs extract_features.py; with a file size limit (bytes) as a full disk."""
  return cli.run_case(cli.Case("extract_features.py", flags, [], file_size_limit))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("extract_features"))
  vocab_file = write_text(os.path.join(directory, "vocab.txt"), u"\n".join(VOCAB) + u"\n")
  config_file = write_text(os.path.join(directory, "bert_config.json"),
                           CONFIG.to_json_string())
  checkpoint = write_checkpoint(os.path.join(directory, "bert_model.ckpt"))
  input_file = write_text(os.path.join(directory, "input.txt"),
                          u"".join(line + u"\n" for line, _ in LINES))
  return Model(directory, vocab_file, config_file, checkpoint, input_file)


# Good runs: name -> extra flags. Google's own flags (TPU ones included) are passed too.
# Each writes <name>.jsonl; a pooled one by default also <name>.jsonl.<pooling>.npy. With
# batches of 2 on one tower and 4 on two, the ninth line is a partial last batch.
GOOD_RUNS = collections.OrderedDict([
    ("one_tower", {"n_gpus": 1}),
    ("two_towers", {"n_gpus": 2}),
    ("pad_to_max", {"n_gpus": 1, "batch_size": 3, "pad_to_max_seq_length": "true",
                    "use_one_hot_embeddings": "true", "use_tpu": "false", "master": "x",
                    "num_tpu_cores": 8, "do_lower_case": "true"}),
    ("cls", {"n_gpus": 1, "pooling": "cls"}),
    ("mean", {"n_gpus": 1, "pooling": "mean"}),
    # --layers without -1: the .npy still comes from the last layer. Its .jsonl exists
    # before the run and must stay as it was.
    ("cls_no_json", {"n_gpus": 2, "pooling": "cls", "write_json": "false", "layers": "1"}),
    ("mean_two_towers", {"n_gpus": 2, "pooling": "mean",
                         "pooled_output_file": os.path.join("new_dir", "vectors.npy")}),
])
OLD_OUTPUT = u"old output\n"

Run = collections.namedtuple("Run", ["output_file", "result", "pooled_file"])


@pytest.fixture(scope="module")
def good_runs(model):
  def start(name, flags):
    output_file = os.path.join(model.directory, name + ".jsonl")
    pooled_file = None
    if flags.get("pooled_output_file"):
      pooled_file = flags["pooled_output_file"] = os.path.join(
          model.directory, flags["pooled_output_file"])
    elif flags.get("pooling"):
      pooled_file = "%s.%s.npy" % (output_file, flags["pooling"])
    return Run(output_file, run_extract(model_flags(model, output_file, **flags)),
               pooled_file)

  write_text(os.path.join(model.directory, "cls_no_json.jsonl"), OLD_OUTPUT)
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = collections.OrderedDict((name, pool.submit(start, name, dict(flags)))
                                      for name, flags in GOOD_RUNS.items())
    runs = {name: future.result() for name, future in futures.items()}
  for run in runs.values():
    cli.assert_succeeded(run.result)
  return runs


@pytest.fixture(scope="module")
def direct(model):
  """Every encoder layer of each line, computed alone in this process, unrounded."""
  examples = [(token_ids(tokens), segment_ids(tokens, i in PAIR_LINES))
              for i, (_, tokens) in enumerate(LINES)]
  return examples, direct_layers(model.checkpoint, examples)


def read_json_lines(path):
  with open(path, encoding="utf-8") as f:
    text = f.read()
  assert text.endswith("\n")
  return text.split("\n")[:-1]


def values_array(record):
  """[layers, tokens, hidden] from one output line."""
  return np.array([[layer["values"] for layer in feature["layers"]]
                   for feature in record["features"]]).transpose(1, 0, 2)


def test_json_lines_have_googles_keys_tokens_and_order(good_runs):
  lines = read_json_lines(good_runs["one_tower"][0])
  assert len(lines) == len(LINES)
  for index, (line, (_, tokens)) in enumerate(zip(lines, LINES)):
    record = json.loads(line, object_pairs_hook=collections.OrderedDict)
    # Google's bytes: json.dumps' defaults (ASCII escapes, ", " and ": "), keys in order.
    assert line == json.dumps(record)
    assert list(record) == ["linex_index", "features"]
    assert record["linex_index"] == index
    assert [feature["token"] for feature in record["features"]] == tokens
    for feature in record["features"]:
      assert list(feature) == ["token", "layers"]
      assert [list(layer) for layer in feature["layers"]] == [["index", "values"]] * 3
      assert [layer["index"] for layer in feature["layers"]] == LAYERS
      for layer in feature["layers"]:
        assert len(layer["values"]) == CONFIG.hidden_size
        assert all(round(v, 6) == v for v in layer["values"])
  assert u"\\u5317" in lines[3]  # 北, escaped as Google's json.dumps does


def test_values_match_bert_run_directly_on_each_line(model, good_runs, direct):
  examples, expected = direct
  lines = read_json_lines(good_runs["one_tower"][0])
  for line, all_layers in zip(lines, expected):
    values = values_array(json.loads(line))
    np.testing.assert_allclose(values, all_layers[LAYERS], rtol=0, atol=1e-5)
  # The pair's segment ids matter: the same ids as one text give other values.
  ids, segments = examples[2]
  single = direct_layers(model.checkpoint, [(ids, [0] * len(ids))])[0]
  assert np.abs(single - expected[2]).max() > 1e-3


@pytest.mark.parametrize("other", ["two_towers", "pad_to_max"])
def test_towers_and_padding_do_not_change_the_output(good_runs, other):
  reference = [json.loads(line) for line in read_json_lines(good_runs["one_tower"][0])]
  lines = [json.loads(line) for line in read_json_lines(good_runs[other][0])]
  assert len(lines) == len(reference)
  for record, expected in zip(lines, reference):
    assert record["linex_index"] == expected["linex_index"]
    assert ([f["token"] for f in record["features"]] ==
            [f["token"] for f in expected["features"]])
    # Other batch shapes sum in another order: a few float32 ulps (up to 6e-6 seen on TF
    # 1.15, values near 1.6). A padding position leaking into attention moves far more.
    np.testing.assert_allclose(values_array(record), values_array(expected), rtol=0,
                               atol=1e-5)


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def load_pooled(run):
  vectors = np.load(run.pooled_file)
  assert vectors.dtype == np.float32
  assert vectors.shape == (len(LINES), CONFIG.hidden_size)  # every line once, in order
  return vectors


@pytest.mark.parametrize("pooled, unpooled", [("cls", "one_tower"), ("mean", "one_tower"),
                                              ("mean_two_towers", "two_towers")])
def test_pooling_leaves_the_json_lines_byte_for_byte(good_runs, pooled, unpooled):
  assert read_bytes(good_runs[pooled].output_file) == read_bytes(
      good_runs[unpooled].output_file)


@pytest.mark.parametrize("name", ["cls", "mean", "cls_no_json", "mean_two_towers"])
def test_pooled_vectors_are_the_last_layers_cls_or_masked_mean(good_runs, direct, name):
  vectors = load_pooled(good_runs[name])
  # Each line alone, unpadded: every position is a real token, [CLS] and [SEP] included.
  # Batched lines are padded, so a mean over the padding too would not match.
  last_layer = [layers[-1] for layers in direct[1]]  # [tokens, hidden] each
  if GOOD_RUNS[name]["pooling"] == "cls":
    expected = [layer[0] for layer in last_layer]
  else:
    expected = [layer.mean(axis=0) for layer in last_layer]
  np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-5)
  if name != "cls_no_json":
    # And from the run's own JSON (layer -1 is LAYERS[0]), rounded to 6 decimals.
    records = [values_array(json.loads(line))[LAYERS.index(-1)]
               for line in read_json_lines(good_runs[name].output_file)]
    from_json = [(r[0] if GOOD_RUNS[name]["pooling"] == "cls" else r.mean(axis=0))
                 for r in records]
    np.testing.assert_allclose(vectors, from_json, rtol=0, atol=1e-5)


@pytest.mark.parametrize("two_towers, one_tower", [("cls_no_json", "cls"),
                                                   ("mean_two_towers", "mean")])
def test_two_towers_give_the_same_vectors(good_runs, two_towers, one_tower):
  # Other batch shapes sum in another order: float32 ulps, as for the JSON values.
  np.testing.assert_allclose(load_pooled(good_runs[two_towers]),
                             load_pooled(good_runs[one_tower]), rtol=0, atol=1e-5)


def test_write_json_false_writes_only_the_npy(model, good_runs):
  run = good_runs["cls_no_json"]
  with open(run.output_file, encoding="utf-8") as f:
    assert f.read() == OLD_OUTPUT
  assert sorted(name for name in os.listdir(model.directory)
                if name.startswith("cls_no_json")) == ["cls_no_json.jsonl",
                                                       "cls_no_json.jsonl.cls.npy"]


def test_pool_masks_padding_and_survives_rows_with_no_token():
  values = np.random.RandomState(5).randn(3, 4, 2).astype(np.float32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.int32)
  with tf.Graph().as_default(), tf.Session() as sess:
    cls, mean = sess.run([extract_features.pool(tf.constant(values), tf.constant(mask), p)
                          for p in ("cls", "mean")])
  np.testing.assert_array_equal(cls, values[:, 0])
  np.testing.assert_allclose(mean[:2], [values[0, :3].mean(0), values[1].mean(0)],
                             rtol=0, atol=1e-6)
  np.testing.assert_array_equal(mean[2], [0.0, 0.0])  # a padding row: 0, not NaN


def test_output_paths():
  paths = extract_features.output_paths
  assert paths("o.jsonl", "none", None, True) == ("o.jsonl", None)
  assert paths("o.jsonl", "cls", None, True) == ("o.jsonl", "o.jsonl.cls.npy")
  assert paths("o.jsonl", "mean", "", False) == (None, "o.jsonl.mean.npy")
  assert paths(None, "mean", "v.npy", False) == (None, "v.npy")
  assert paths("o.jsonl", "cls", "v.npy", True) == ("o.jsonl", "v.npy")
  for args, fragment in [(("o.jsonl", "none", None, False), "--write_json=false"),
                         (("o.jsonl", "none", "v.npy", True), "--pooled_output_file=v.npy"),
                         (("o.jsonl", "cls", "o.jsonl", True), "is the --output_file"),
                         ((None, "cls", None, True), "--output_file is required"),
                         ((None, "none", None, True), "--output_file is required")]:
    with pytest.raises(extract_features.UsageError, match=fragment):
      paths(*args)


def test_output_is_written_with_the_umask_and_no_temp_file_is_left(model, good_runs):
  mask = os.umask(0o022)
  os.umask(mask)
  for path in [good_runs["one_tower"].output_file, good_runs["cls"].pooled_file,
               good_runs["mean_two_towers"].pooled_file]:
    mode = os.stat(path).st_mode & 0o777
    assert mode == 0o666 & ~mask, (path, oct(mode))
  for directory in [model.directory, os.path.join(model.directory, "new_dir")]:
    assert [name for name in os.listdir(directory) if name.startswith(".tmp")] == []


def test_vectorised_rounding_gives_the_doubles_of_pythons_round():
  rng = np.random.RandomState(3)
  values = np.concatenate(
      [rng.randn(20000).astype(np.float32) * scale for scale in (1e-6, 1e-3, 1.0, 1e4)] +
      # Exact ties at the 7th decimal (k / 128), which round() breaks to even.
      [(rng.randint(-10 ** 6, 10 ** 6, 20000) / 128.0).astype(np.float32),
       np.array([0.0, -0.0, 5e-7, -5e-7, 1.5e-6, 2.5e-6, 3e38, -3e38, 1e-45, np.inf],
                np.float32)])
  rounded = extract_features.round_as_google(values).tolist()
  assert [repr(v) for v in rounded] == [repr(round(float(v), 6)) for v in values]


def test_json_line_is_byte_for_byte_googles():
  # Google's writer: OrderedDicts, round(float(x), 6) per value, json.dumps' defaults.
  values = np.random.RandomState(4).randn(2, 5, 3).astype(np.float32)
  tokens = ["[CLS]", u"北", "a", "##b", "[SEP]"]
  features = []
  for i, token in enumerate(tokens):
    layers = [collections.OrderedDict([("index", index), ("values", [
        round(float(x), 6) for x in values[j][i:i + 1].flat])])
              for j, index in enumerate([-1, 0])]
    features.append(collections.OrderedDict([("token", token), ("layers", layers)]))
  google = json.dumps(collections.OrderedDict([("linex_index", 7), ("features", features)]))
  assert extract_features.format_json_line(7, tokens, [-1, 0], values) == google + "\n"


# ---------------------------------------------------------------------------
# Bad input: one line, no traceback, no output file
# ---------------------------------------------------------------------------

# old_files: name -> text of the files in the output's directory before the run, which
# must be all it holds after it, unchanged (none: the directory must not exist).
BadCase = collections.namedtuple("BadCase", ["flags", "fragments", "output_file",
                                             "file_size_limit", "old_files"])


def make_bad_cases(model, root):
  cases = collections.OrderedDict()

  def add(name, fragments, file_size_limit=None, old_files=None, **flags):
    output_file = os.path.join(root, name, "out.jsonl")
    cases[name] = BadCase(model_flags(model, output_file, **flags), fragments, output_file,
                          file_size_limit, old_files or {})
    if old_files:
      os.makedirs(os.path.join(root, name))
      for file_name, text in old_files.items():
        write_text(os.path.join(root, name, file_name), text)

  os.makedirs(os.path.join(root, "inputs"))
  not_utf8 = os.path.join(root, "inputs", "gbk.txt")
  with open(not_utf8, "wb") as f:
    f.write(u"the cat\nthe dog\n".encode("utf-8") + u"北京\n".encode("gbk"))
  add("not_utf8", [not_utf8, "line 3", "not valid UTF-8"], input_file=not_utf8)
  empty = write_text(os.path.join(root, "inputs", "empty.txt"), u"")
  add("empty_input", ["--input_file=" + empty, "is empty"], input_file=empty)
  add("layer_out_of_range", ["--layers=-1,3", "layer 3", "from -3 to 2"], layers="-1,3")
  add("layer_too_negative", ["layer -4", "from -3 to 2"], layers="-4")
  add("layer_not_a_number", ["--layers=a", "'a'", "from -3 to 2"], layers="a")
  missing = os.path.join(root, "inputs", "missing.txt")
  add("missing_input", ["--input_file=" + missing, "no such file"], input_file=missing)
  add("missing_vocab", ["--vocab_file=" + missing, "no such file"], vocab_file=missing)
  add("missing_checkpoint", ["--init_checkpoint=" + missing, "no checkpoint"],
      init_checkpoint=missing)
  add("use_tpu", ["--use_tpu=true"], use_tpu="true")
  # A training flag: refused as unknown (every training flag was accepted and ignored).
  add("training_flag", ["optimizer"], optimizer="lamb")
  add("zero_batch", ["--batch_size=0"], batch_size=0)
  small_config = write_text(os.path.join(root, "inputs", "bert_config.json"), json.dumps(
      dict(CONFIG.to_dict(), hidden_size=8)))
  add("config_not_the_checkpoints", ["--init_checkpoint=", "shape [16] in checkpoint",
                                     "but [8] in the model"],
      bert_config_file=small_config)
  deeper_config = write_text(os.path.join(root, "inputs", "bert_config_4_layers.json"),
                             json.dumps(dict(CONFIG.to_dict(), num_hidden_layers=4)))
  add("checkpoint_lacks_a_layer", ["lacks 16 of BERT's variables", "bert/encoder/layer_3/"],
      bert_config_file=deeper_config)
  add("write_json_without_pooling", ["--write_json=false", "--pooling=cls"],
      write_json="false")
  add("pooled_without_pooling", ["--pooled_output_file=", "needs --pooling"],
      pooled_output_file=os.path.join(root, "inputs", "v.npy"))
  add("pooled_is_the_output", ["--pooled_output_file=", "is the --output_file"],
      pooling="cls", pooled_output_file=os.path.join(root, "pooled_is_the_output",
                                                     "out.jsonl"))
  add("pooled_is_a_directory", ["--pooled_output_file=" + os.path.join(root, "inputs"),
                                "is a directory"],
      pooling="mean", pooled_output_file=os.path.join(root, "inputs"))
  # The disk fills up while the output is written: the old files stay whole.
  add("disk_full", ["cannot write", "File too large"], file_size_limit=4096,
      old_files={"out.jsonl": OLD_OUTPUT})
  # The JSON fills it (the .npy is under 1 kB): neither file is replaced, the JSON named.
  add("disk_full_pooled", ["cannot write " + os.path.join(root, "disk_full_pooled",
                                                         "out.jsonl "), "File too large"],
      file_size_limit=4096, pooling="cls",
      old_files={"out.jsonl": OLD_OUTPUT, "out.jsonl.cls.npy": u"old vectors\n"})
  # The .npy alone: 128 bytes of header and 64 per line.
  add("disk_full_npy", ["cannot write " + os.path.join(root, "disk_full_npy",
                                                      "out.jsonl.mean.npy"), "File too large"],
      file_size_limit=300, pooling="mean", write_json="false",
      old_files={"out.jsonl.mean.npy": u"old vectors\n"})
  return cases


@pytest.fixture(scope="module")
def bad_runs(model, tmp_path_factory):
  cases = make_bad_cases(model, str(tmp_path_factory.mktemp("bad_input")))
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    futures = collections.OrderedDict(
        (name, pool.submit(run_extract, case.flags, case.file_size_limit))
        for name, case in cases.items())
    return {name: (cases[name], future.result()) for name, future in futures.items()}


@pytest.mark.parametrize("name", [
    "not_utf8", "empty_input", "layer_out_of_range", "layer_too_negative",
    "layer_not_a_number", "missing_input", "missing_vocab", "missing_checkpoint", "use_tpu",
    "training_flag", "zero_batch", "config_not_the_checkpoints", "checkpoint_lacks_a_layer",
    "write_json_without_pooling", "pooled_without_pooling", "pooled_is_the_output",
    "pooled_is_a_directory", "disk_full", "disk_full_pooled", "disk_full_npy"])
def test_bad_input_stops_with_one_error_line_and_no_output(bad_runs, name):
  case, result = bad_runs[name]
  cli.assert_one_line_error(result, *case.fragments)
  directory = os.path.dirname(case.output_file)
  if case.old_files:
    assert sorted(os.listdir(directory)) == sorted(case.old_files)  # no temp file left
    for file_name, text in case.old_files.items():
      with open(os.path.join(directory, file_name), encoding="utf-8") as f:
        assert f.read() == text
  else:
    assert not os.path.exists(directory)
