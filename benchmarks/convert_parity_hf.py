# coding=utf-8
"""Parity of convert_checkpoint.py with transformers: transformers' side (benchmark venv).

Not part of the project: imports torch and transformers (benchmarks/README.md). Its peer
convert_parity_ours.py runs our models in the project's TF venv; both share --work_dir.

  compare       after `convert_parity_ours.py export`: loads every head's export
                (hf/<kind>) with AutoConfig, AutoTokenizer and the AutoModelFor... class,
                catching every log record of transformers' logger and every Python warning
                while loading; runs it in eval mode in float32 on our ids (inputs.npz) and
                compares with our outputs (ours_outputs/<kind>.npz); compares AutoTokenizer's
                ids with ours (texts.json) on the model texts and on every review.
  save          transformers -> ours, step 1: BertModel, BertForMaskedLM and
                BertForSequenceClassification with random weights (--num_layers of
                --bert_config_file), save_pretrained'd into hf_saved/ (BertModel also as
                pytorch_model.bin and as bfloat16 safetensors), with BertTokenizer's files;
                their outputs on the reviews (hf_saved/outputs.npz).
  compare_back  step 3, after `convert_parity_ours.py import`: our outputs on the converted
                checkpoints (tf_outputs/) against hf_saved/outputs.npz.

Relative difference: |theirs - ours| / max(|ours|, 1e-3), the largest over the values
compared (real positions only: padding is left out). Every table is also written as JSON to
<work_dir>/<command>.json.

  /work/bench-venv/bin/python benchmarks/convert_parity_hf.py compare --work_dir=/tmp/parity/w
"""

import argparse
import collections
import contextlib
import copy
import io
import json
import logging
import os
import platform
import random
import sys
import unicodedata
import warnings

import numpy as np

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common  # pylint: disable=wrong-import-position

AUTO_CLASSES = {
    "classifier": transformers.AutoModelForSequenceClassification,
    "multi_label": transformers.AutoModelForSequenceClassification,
    "ner": transformers.AutoModelForTokenClassification,
    "ner_crf": transformers.AutoModelForTokenClassification,
    "squad": transformers.AutoModelForQuestionAnswering,
    "masked_lm": transformers.AutoModelForMaskedLM,
    "pretraining": transformers.AutoModelForPreTraining,
    "encoder": transformers.AutoModel,
}
PAIR_KINDS = ("squad", "pretraining")
MASKED_LM_KINDS = ("masked_lm", "pretraining")
# Outputs with one value (or vector) per position, of the heads that have them.
PER_POSITION = ("sequence_output", "logits", "start_logits", "end_logits")
PER_POSITION_KINDS = ("ner", "ner_crf", "squad", "encoder")
BATCH_SIZE = 16
MAX_SEQ_LENGTH = 128
MASKED_POSITIONS = 5
RELATIVE_FLOOR = 1e-3
# Words in a loading message that would mean weights were lost or made up.
WEIGHT_WORDS = ("missing", "unexpected", "unused", "newly initialized", "not initialized",
                "were not used", "mismatch")
CLS_LABELS = ("负面", "中性", "正面")


def parse_args():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("command", choices=("compare", "save", "compare_back"))
  p.add_argument("--work_dir", required=True)
  p.add_argument("--bert_config_file", help="save: the config to take the shapes from.")
  p.add_argument("--vocab_file", help="save: the vocab for BertTokenizer.")
  p.add_argument("--num_layers", type=int, default=4, help="save: encoder layers.")
  p.add_argument("--seed", type=int, default=2)
  p.add_argument("--threads", type=int, default=2)
  return p.parse_args()


# ---------------------------------------------------------------------------
# Loading with every message caught
# ---------------------------------------------------------------------------

class _Records(logging.Handler):
  def __init__(self):
    super().__init__(logging.DEBUG)
    self.lines = []

  def emit(self, record):
    self.lines.append("%s %s: %s" % (record.levelname, record.name, record.getMessage()))


def caught(load):
  """load()'s result and every message it produced: records of transformers' logger (at
  warning level), Python warnings, and text written to stderr/stdout."""
  transformers.utils.logging.set_verbosity_warning()
  handler = _Records()
  library_logger = logging.getLogger("transformers")
  library_logger.addHandler(handler)
  out = io.StringIO()
  try:
    with warnings.catch_warnings(record=True) as python_warnings, \
        contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
      warnings.simplefilter("always")
      result = load()
  finally:
    library_logger.removeHandler(handler)
  lines = handler.lines + ["PythonWarning %s: %s" % (w.category.__name__, w.message)
                           for w in python_warnings]
  lines += ["output: " + line for line in out.getvalue().splitlines() if line.strip()]
  return result, lines


def about_weights(lines):
  """The messages that mention missing, unused or newly initialized weights."""
  return [line for line in lines if any(word in line.lower() for word in WEIGHT_WORDS)]


def load_export(directory, kind):
  """(config, tokenizer, model in eval mode, loading info, every message) of one export."""
  config, config_lines = caught(lambda: transformers.AutoConfig.from_pretrained(directory))
  tokenizer, tokenizer_lines = caught(
      lambda: transformers.AutoTokenizer.from_pretrained(directory))
  (model, info), model_lines = caught(lambda: AUTO_CLASSES[kind].from_pretrained(
      directory, output_loading_info=True))
  model.eval()
  dtypes = sorted({str(p.dtype) for p in model.parameters()})
  if dtypes != ["torch.float32"]:
    raise SystemExit("%s loaded as %s, not float32" % (directory, dtypes))
  return config, tokenizer, model, info, config_lines + tokenizer_lines + model_lines


# ---------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------

def difference(ours, theirs, where=None):
  """{"values", "max_abs", "max_rel"} of theirs against ours, over `where` (bool, broadcast
  over trailing axes) or everything."""
  ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  if ours.shape != theirs.shape:
    raise SystemExit("shapes differ: ours %s, theirs %s" % (ours.shape, theirs.shape))
  if where is not None:
    where = np.broadcast_to(where.reshape(where.shape + (1,) * (ours.ndim - where.ndim)),
                            ours.shape)
    ours, theirs = ours[where], theirs[where]
  gap = np.abs(theirs - ours)
  return {"values": int(ours.size), "max_abs": float(gap.max()),
          "max_rel": float((gap / np.maximum(np.abs(ours), RELATIVE_FLOOR)).max()),
          "max_abs_ours": float(np.abs(ours).max())}


def agreement(ours_ids, theirs_ids, where):
  """Share of equal ids over `where`."""
  return float((np.asarray(ours_ids)[where] == np.asarray(theirs_ids)[where]).mean())


def softmax(x):
  return torch.softmax(torch.as_tensor(x, dtype=torch.float64), -1).numpy()


def viterbi(scores, transitions):
  """The best tag path of scores [T, K] under transitions[from, to] (ours: no start/end
  scores), in float64."""
  delta, back = scores[0].astype(np.float64), []
  for t in range(1, len(scores)):
    candidates = delta[:, None] + transitions
    back.append(candidates.argmax(axis=0))
    delta = candidates.max(axis=0) + scores[t]
  path = [int(delta.argmax())]
  for pointers in reversed(back):
    path.append(int(pointers[path[-1]]))
  return path[::-1]


def run_batches(model, ids, mask, types, outputs_of, per_position=()):
  """outputs_of(model output, rows) per batch of BATCH_SIZE rows (each cut to its longest
  row), concatenated; the outputs named in per_position padded back to MAX_SEQ_LENGTH."""
  results = {}
  with torch.no_grad():
    for start in range(0, len(ids), BATCH_SIZE):
      rows = slice(start, start + BATCH_SIZE)
      length = int(mask[rows].sum(axis=1).max())
      output = model(input_ids=torch.as_tensor(ids[rows, :length], dtype=torch.long),
                     attention_mask=torch.as_tensor(mask[rows, :length], dtype=torch.long),
                     token_type_ids=torch.as_tensor(types[rows, :length], dtype=torch.long))
      for name, value in outputs_of(output, rows).items():
        value = value.detach().numpy() if torch.is_tensor(value) else value
        if name in per_position:
          widths = [(0, 0), (0, MAX_SEQ_LENGTH - length)] + [(0, 0)] * (value.ndim - 2)
          value = np.pad(value, widths)
        results.setdefault(name, []).append(value)
  return {name: np.concatenate(values) for name, values in results.items()}


def _gather_log_probs(logits, positions):
  """log-softmax of logits [B, L, V] at positions [B, P] -> [B, P, V]."""
  index = torch.as_tensor(positions, dtype=torch.long)
  picked = logits[torch.arange(len(index))[:, None], index]
  return torch.log_softmax(picked, dim=-1)


def head_outputs(kind, positions):
  """outputs_of for run_batches: the outputs of a head of `kind`."""
  def outputs_of(output, rows):
    if kind == "encoder":
      return {"sequence_output": output.last_hidden_state,
              "pooled_output": output.pooler_output}
    if kind in MASKED_LM_KINDS:
      logits = output.logits if kind == "masked_lm" else output.prediction_logits
      result = {"mlm_log_probs": _gather_log_probs(logits, positions[rows])}
      if kind == "pretraining":
        result["nsp_logits"] = output.seq_relationship_logits
      return result
    if kind == "squad":
      return {"start_logits": output.start_logits, "end_logits": output.end_logits}
    return {"logits": output.logits}
  return outputs_of


def float64_rows(model, inputs, ours, theirs):
  """The encoder's sequence output, ours and transformers' float32, each against
  transformers' in float64: float32 rounding or a real difference?"""
  reference = run_batches(copy.deepcopy(model).double(), inputs["single_ids"],
                          inputs["single_mask"], inputs["single_types"],
                          head_outputs("encoder", None), PER_POSITION)
  mask = inputs["single_mask"].astype(bool)
  return [{"head": "encoder", "output": "%s: %s vs transformers float64" % (name, who),
           "agreement": None, "difference": difference(reference[name], value[name],
                                                       None if name == "pooled_output" else mask)}
          for name in ("sequence_output", "pooled_output")
          for who, value in (("ours", ours), ("transformers float32", theirs))]


def tag_mask_of(mask):
  tags = mask.astype(bool).copy()
  tags[:, 0] = False
  tags[np.arange(len(mask)), mask.sum(axis=1) - 1] = False  # [CLS] and [SEP]
  return tags


def compare_head(kind, ours, theirs, inputs, directory):
  """Rows (output, difference, agreement) of one head."""
  prefix = "pair" if kind in PAIR_KINDS else "single"
  mask = inputs[prefix + "_mask"].astype(bool)
  rows = []
  if kind == "encoder":
    rows.append(("sequence_output", difference(ours["sequence_output"],
                                               theirs["sequence_output"], mask), None))
    rows.append(("pooled_output", difference(ours["pooled_output"], theirs["pooled_output"]),
                 None))
  elif kind in MASKED_LM_KINDS:
    where = inputs[prefix + "_position_weights"] > 0
    rows.append(("mlm_log_probs", difference(ours["mlm_log_probs"], theirs["mlm_log_probs"],
                                             where),
                 agreement(ours["mlm_log_probs"].argmax(-1), theirs["mlm_log_probs"].argmax(-1),
                           where)))
    rows.append(("mlm_probabilities", difference(np.exp(ours["mlm_log_probs"]),
                                                 np.exp(theirs["mlm_log_probs"]), where), None))
    if kind == "pretraining":
      rows.append(("nsp_logits", difference(ours["nsp_logits"], theirs["nsp_logits"]),
                   agreement(ours["nsp_logits"].argmax(-1), theirs["nsp_logits"].argmax(-1),
                             slice(None))))
  elif kind == "squad":
    for name in ("start_logits", "end_logits"):
      rows.append((name, difference(ours[name], theirs[name], mask), None))
  elif kind in ("classifier", "multi_label"):
    probabilities = (1 / (1 + np.exp(-theirs["logits"].astype(np.float64)))
                     if kind == "multi_label" else softmax(theirs["logits"]))
    rows.append(("logits", difference(ours["logits"], theirs["logits"]),
                 agreement(ours["logits"].argmax(-1), theirs["logits"].argmax(-1),
                           slice(None))))
    rows.append(("probabilities", difference(ours["probabilities"], probabilities), None))
  else:
    rows.extend(compare_ner(kind, ours, theirs, mask, directory))
  return rows


def compare_ner(kind, ours, theirs, mask, directory):
  """NER rows: per-piece logits and probabilities; tags by argmax, or with the CRF by
  Viterbi over transformers' logits and crf_transitions.json."""
  tags = tag_mask_of(mask.astype(np.int32))
  rows = [("logits", difference(ours["logits"], theirs["logits"], mask), None),
          ("probabilities", difference(ours["probabilities"], softmax(theirs["logits"]), mask),
           None)]
  if kind == "ner":
    theirs_tags = theirs["logits"].argmax(-1)
    rows.append(("tag_ids (argmax)", None, agreement(ours["tag_ids"], theirs_tags, tags)))
    return rows
  with open(os.path.join(directory, "crf_transitions.json"), encoding="utf-8") as f:
    transitions = np.asarray(json.load(f)["transitions"], np.float64)
  theirs_tags = np.zeros(tags.shape, np.int64)
  for i in range(len(tags)):
    where = np.flatnonzero(tags[i])
    if len(where):
      theirs_tags[i, where] = viterbi(theirs["logits"][i, where].astype(np.float64),
                                      transitions)
  rows.append(("tag_ids (Viterbi, crf_transitions.json)", None,
               agreement(ours["tag_ids"], theirs_tags, tags)))
  return rows


# ---------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------

def why_different(text, tokenizer):
  """A first guess at why the tokenizers differ on `text`: a literal special token, a
  character transformers deletes as "other" (Unicode C*: private use, unassigned) where ours
  (as Google's) deletes only Cc/Cf, or a word over 100 characters after its pre-tokenizer."""
  reasons = [token for token in ("[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]")
             if token in text]
  if reasons:
    return "literal special token " + " ".join(reasons)
  others = sorted({"U+%04X %s" % (ord(c), unicodedata.category(c)) for c in text
                   if unicodedata.category(c) in ("Co", "Cn", "Cs")})
  if others:
    return "character(s) of category Co/Cn/Cs: " + ", ".join(others)
  backend = tokenizer.backend_tokenizer
  words = backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))
  longest = max((len(word) for word, _ in words), default=0)
  if longest > 100:
    return "a word of %d characters (> 100) after pre-tokenizing" % longest
  return "other"


def compare_tokenizer(tokenizer, texts, our_ids, limit=8):
  """(count of texts whose ids differ, the first `limit` differences)."""
  theirs, _ = caught(lambda: tokenizer(texts, add_special_tokens=True)["input_ids"])
  differing = [i for i, (a, b) in enumerate(zip(our_ids, theirs)) if list(a) != list(b)]
  reasons = collections.Counter(why_different(texts[i], tokenizer).split(":")[0]
                                for i in differing)
  examples = [dict(reasons)]
  for i in differing[:limit]:
    ours_tokens = tokenizer.convert_ids_to_tokens(our_ids[i])
    theirs_tokens = tokenizer.convert_ids_to_tokens(theirs[i])
    first = next(j for j in range(max(len(ours_tokens), len(theirs_tokens)))
                 if ours_tokens[j:j + 1] != theirs_tokens[j:j + 1])
    examples.append({"text": texts[i][:160], "why": why_different(texts[i], tokenizer),
                     "ours": ours_tokens[max(0, first - 2):first + 6],
                     "theirs": theirs_tokens[max(0, first - 2):first + 6]})
  return len(differing), examples


def compare_pairs(tokenizer, texts, inputs):
  """Texts whose pair (text i, text i + 1) ids or segment ids differ from ours (pairs
  that fit MAX_SEQ_LENGTH untruncated only), and the count of pairs checked."""
  checked = differing = 0
  for i, text in enumerate(texts):
    encoded = tokenizer(text, texts[(i + 1) % len(texts)])
    length = int(inputs["pair_mask"][i].sum())
    if len(encoded["input_ids"]) > MAX_SEQ_LENGTH - 1 and length == MAX_SEQ_LENGTH:
      continue  # ours was cut: not comparable
    checked += 1
    differing += (list(encoded["input_ids"]) != inputs["pair_ids"][i, :length].tolist() or
                  list(encoded["token_type_ids"]) != inputs["pair_types"][i, :length].tolist())
  return differing, checked


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

def _print_table(title, rows):
  print("\n" + title)
  print("| head | output | values | max abs diff | max rel diff | max abs (ours) | "
        "agreement |")
  print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
  for row in rows:
    d = row["difference"] or {}
    print("| %s | %s | %s | %s | %s | %s | %s |" % (
        row["head"], row["output"], d.get("values", ""),
        "%.2e" % d["max_abs"] if d else "", "%.2e" % d["max_rel"] if d else "",
        "%.3g" % d["max_abs_ours"] if d else "",
        "" if row["agreement"] is None else "%.4f" % row["agreement"]))


def versions():
  return {"torch": torch.__version__, "transformers": transformers.__version__,
          "python": platform.python_version(), "threads": torch.get_num_threads()}


def compare(args):
  """ours -> transformers: every head, its loading messages, the tokenizer."""
  work_dir = args.work_dir
  inputs = dict(np.load(os.path.join(work_dir, "inputs.npz")))
  with open(os.path.join(work_dir, "texts.json"), encoding="utf-8") as f:
    texts = json.load(f)
  rows, loading, tokenizer = [], {}, None
  for kind in AUTO_CLASSES:
    directory = os.path.join(work_dir, "hf", kind)
    config, tokenizer, model, info, lines = load_export(directory, kind)
    loading[kind] = {"class": type(model).__name__, "tokenizer": type(tokenizer).__name__,
                     "problem_type": config.problem_type, "num_labels": config.num_labels,
                     "info": {k: [str(x) for x in v] for k, v in info.items()},
                     "messages": lines, "about_weights": about_weights(lines)}
    prefix = "pair" if kind in PAIR_KINDS else "single"
    ids = inputs[prefix + ("_masked_ids" if kind in MASKED_LM_KINDS else "_ids")]
    theirs = run_batches(model, ids, inputs[prefix + "_mask"], inputs[prefix + "_types"],
                         head_outputs(kind, inputs[prefix + "_positions"]),
                         PER_POSITION if kind in PER_POSITION_KINDS else ())
    with np.load(os.path.join(work_dir, "ours_outputs", kind + ".npz")) as ours:
      ours = dict(ours)
    for output, diff, agree in compare_head(kind, ours, theirs, inputs, directory):
      rows.append({"head": kind, "output": output, "difference": diff, "agreement": agree})
    if kind == "encoder":
      rows.extend(float64_rows(model, inputs, ours, theirs))
    print("%-12s %s: loading info %s, %d messages, %d about weights" % (
        kind, loading[kind]["class"], {k: len(v) for k, v in info.items()}, len(lines),
        len(loading[kind]["about_weights"])), flush=True)
  _print_table("ours -> transformers (our ids in; real positions only)", rows)
  model_texts = [t["text"] for t in texts["model_texts"]]
  tokenizer_report = {"tokenizer": type(tokenizer).__name__}
  for name, text_list, ids in (("model_texts", model_texts, texts["model_ids"]),
                               ("all_reviews", texts["all_texts"], texts["all_ids"])):
    count, examples = compare_tokenizer(tokenizer, text_list, ids)
    tokenizer_report[name] = {"texts": len(text_list), "differing": count,
                              "first": examples}
  tokenizer_report["pairs"] = dict(zip(("differing", "checked"),
                                       compare_pairs(tokenizer, model_texts, inputs)))
  print("\ntokenizer:", json.dumps(tokenizer_report, ensure_ascii=False, indent=1))
  for kind, report in loading.items():
    print("\n%s loading messages (%d):" % (kind, len(report["messages"])))
    for line in report["messages"]:
      print("    " + line[:300])
  with open(os.path.join(work_dir, "compare.json"), "w", encoding="utf-8") as f:
    json.dump({"versions": versions(), "rows": rows, "loading": loading,
               "tokenizer": tokenizer_report}, f, ensure_ascii=False, indent=1)


def perturb(model, generator):
  """Adds noise to every bias and LayerNorm parameter (transformers draws them 0 and 1), so
  that one mapped wrongly shows."""
  with torch.no_grad():
    for name, param in model.named_parameters():
      if "LayerNorm.weight" in name:
        param.add_(0.05 * torch.randn(param.shape, generator=generator))
      elif name.endswith("bias"):
        param.add_(0.02 * torch.randn(param.shape, generator=generator))


def save_inputs(tokenizer, texts, path, seed):
  """The reviews by transformers' tokenizer (cut to MAX_SEQ_LENGTH, padded), with
  MASKED_POSITIONS masked positions each; the arrays convert_parity_ours.py import reads."""
  encoded = tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH, padding="max_length",
                      return_tensors="np")
  ids, mask = encoded["input_ids"].astype(np.int32), encoded["attention_mask"].astype(np.int32)
  rng = random.Random(seed)
  positions = np.zeros([len(ids), MASKED_POSITIONS], np.int32)
  weights = np.zeros([len(ids), MASKED_POSITIONS], np.float32)
  masked = ids.copy()
  for i, length in enumerate(mask.sum(axis=1)):
    chosen = sorted(rng.sample(range(1, int(length) - 1), min(MASKED_POSITIONS, length - 2)))
    positions[i, :len(chosen)] = chosen
    weights[i, :len(chosen)] = 1
    masked[i, chosen] = tokenizer.mask_token_id
  arrays = {"single_ids": ids, "single_mask": mask,
            "single_types": encoded["token_type_ids"].astype(np.int32),
            "single_masked_ids": masked, "single_positions": positions,
            "single_position_weights": weights}
  np.savez(path, **arrays)
  return arrays


def save(args):
  """transformers -> ours, step 1 (see the module docstring)."""
  saved = os.path.join(args.work_dir, "hf_saved")
  with open(os.path.join(args.work_dir, "texts.json"), encoding="utf-8") as f:
    texts = [t["text"] for t in json.load(f)["model_texts"] if t["source"] != "edge_case"]
  google = hf_common.read_google_config(args.bert_config_file)
  google["num_hidden_layers"] = args.num_layers
  torch.manual_seed(args.seed)
  generator = torch.Generator().manual_seed(args.seed)
  tokenizer = transformers.BertTokenizer(vocab=args.vocab_file, do_lower_case=True)
  models = {"bert": transformers.BertModel(hf_common.hf_bert_config(google, 2)),
            "mlm": transformers.BertForMaskedLM(hf_common.hf_bert_config(google, 2))}
  cls_config = hf_common.hf_bert_config(google, len(CLS_LABELS))
  cls_config.id2label = dict(enumerate(CLS_LABELS))
  cls_config.label2id = {label: i for i, label in enumerate(CLS_LABELS)}
  models["cls"] = transformers.BertForSequenceClassification(cls_config)
  for model in models.values():
    perturb(model, generator)
    model.eval()
  for name, model in models.items():
    model.save_pretrained(os.path.join(saved, name))
  bin_dir = os.path.join(saved, "bert_bin")
  os.makedirs(bin_dir, exist_ok=True)
  torch.save(models["bert"].state_dict(), os.path.join(bin_dir, "pytorch_model.bin"))
  models["bert"].config.save_pretrained(bin_dir)
  bf16 = copy.deepcopy(models["bert"]).to(torch.bfloat16)
  bf16.save_pretrained(os.path.join(saved, "bert_bf16"))
  bf16 = bf16.float()  # the bf16 weights, run in float32: what ours converts them to
  for name in ("bert", "bert_bin", "bert_bf16", "mlm", "cls"):
    tokenizer.save_pretrained(os.path.join(saved, name))
  inputs = save_inputs(tokenizer, texts, os.path.join(saved, "inputs.npz"), args.seed)
  with open(os.path.join(saved, "cls_texts.txt"), "w", encoding="utf-8") as f:
    f.write("".join(text + "\n" for text in texts))
  outputs = {}
  run = lambda model, kind, ids: run_batches(model, ids, inputs["single_mask"],
                                             inputs["single_types"],
                                             head_outputs(kind, inputs["single_positions"]),
                                             PER_POSITION if kind == "encoder" else ())
  for name, model in (("bert", models["bert"]), ("bert_bf16", bf16)):
    for key, value in run(model, "encoder", inputs["single_ids"]).items():
      outputs[name + "/" + key] = value
  outputs["mlm/mlm_log_probs"] = run(models["mlm"], "masked_lm",
                                     inputs["single_masked_ids"])["mlm_log_probs"]
  outputs["cls/probabilities"] = softmax(run(models["cls"], "classifier",
                                             inputs["single_ids"])["logits"])
  np.savez(os.path.join(saved, "outputs.npz"), **outputs)
  print("saved", sorted(os.listdir(saved)), "files of bert:",
        sorted(os.listdir(os.path.join(saved, "bert"))))


def _predicted_probabilities(path, num_labels):
  with open(path, encoding="utf-8") as f:
    return np.array([[float(x) for x in line.rstrip("\n").split("\t")[-num_labels:]]
                     for line in f])


def compare_back(args):
  """transformers -> ours, step 3 (see the module docstring)."""
  work_dir = args.work_dir
  saved = os.path.join(work_dir, "hf_saved")
  inputs = dict(np.load(os.path.join(saved, "inputs.npz")))
  theirs = dict(np.load(os.path.join(saved, "outputs.npz")))
  mask = inputs["single_mask"].astype(bool)
  where = inputs["single_position_weights"] > 0
  rows = []
  for name, reference in (("bert", "bert"), ("bert_bin", "bert"), ("bert_bf16", "bert_bf16")):
    with np.load(os.path.join(work_dir, "tf_outputs", name + ".npz")) as ours:
      rows.append({"head": name, "output": "sequence_output", "agreement": None,
                   "difference": difference(ours["sequence_output"],
                                            theirs[reference + "/sequence_output"], mask)})
      rows.append({"head": name, "output": "pooled_output", "agreement": None,
                   "difference": difference(ours["pooled_output"],
                                            theirs[reference + "/pooled_output"])})
  with np.load(os.path.join(work_dir, "tf_outputs", "mlm.npz")) as ours:
    ours_log_probs, theirs_log_probs = ours["mlm_log_probs"], theirs["mlm/mlm_log_probs"]
  rows.append({"head": "mlm", "output": "mlm_log_probs", "agreement": agreement(
      ours_log_probs.argmax(-1), theirs_log_probs.argmax(-1), where),
               "difference": difference(ours_log_probs, theirs_log_probs, where)})
  rows.append({"head": "mlm", "output": "mlm_probabilities", "agreement": None,
               "difference": difference(np.exp(ours_log_probs), np.exp(theirs_log_probs),
                                        where)})
  ours_probabilities = _predicted_probabilities(
      os.path.join(work_dir, "tf_outputs", "cls_predict.tsv"), len(CLS_LABELS))
  rows.append({"head": "cls (--keep_head, predict_text.py)", "output": "probabilities",
               "agreement": agreement(ours_probabilities.argmax(-1),
                                      theirs["cls/probabilities"].argmax(-1), slice(None)),
               "difference": difference(ours_probabilities, theirs["cls/probabilities"])})
  _print_table("transformers -> ours (transformers' ids in; real positions only)", rows)
  vocab_same = {}
  for name in ("bert", "cls"):
    with open(os.path.join(work_dir, "tf", name, "vocab.txt"), encoding="utf-8") as f:
      converted = f.read().splitlines()
    vocab = transformers.AutoTokenizer.from_pretrained(os.path.join(saved, name)).get_vocab()
    vocab_same[name] = converted == sorted(vocab, key=vocab.get)
  print("\nvocab.txt from tokenizer.json equals the tokenizer's vocab:", vocab_same)
  with open(os.path.join(work_dir, "compare_back.json"), "w", encoding="utf-8") as f:
    json.dump({"versions": versions(), "rows": rows, "vocab_same": vocab_same}, f, indent=1)


def main():
  args = parse_args()
  hf_common.set_threads(args.threads)
  {"compare": compare, "save": save, "compare_back": compare_back}[args.command](args)


if __name__ == "__main__":
  main()
