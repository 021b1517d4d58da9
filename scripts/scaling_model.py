# coding=utf-8
"""A scaling model on paper for --variable_update=host|gpu0|replicated (issue #11).

Predicts how much faster data-parallel BERT training runs on n GPUs than on one, from stated
inputs only: parameter counts from the BERT config, training FLOPs, the vendors' peak
throughputs times an assumed achievable fraction, and link bandwidths. Nothing here is
measured. docs/SCALING.md gives the source or reasoning of every input, the formulas, one case
worked by hand, and the tables this script prints (`--markdown`).

  python scripts/scaling_model.py [--markdown] [--tensor_fraction=0.35] [--host_gbs=40]

Standard library only; runs on Python 3.7 and 3.11.
"""

import argparse
import collections

# ------------------------------------------------------------------------------- inputs

BertShape = collections.namedtuple("BertShape", ["name", "layers", "hidden", "intermediate",
                                                 "vocab"])
MAX_POSITIONS, TYPE_VOCAB = 512, 2  # the same in every released BERT config
MODELS = collections.OrderedDict([
    ("base-zh", BertShape("BERT-base, Chinese vocab", 12, 768, 3072, 21128)),
    ("base-en", BertShape("BERT-base, English vocab", 12, 768, 3072, 30522)),
    ("large-zh", BertShape("BERT-large, Chinese vocab", 24, 1024, 4096, 21128)),
    ("large-en", BertShape("BERT-large, English vocab", 24, 1024, 4096, 30522)),
])

# Vendor datasheet peaks, dense (sparsity figures halved), TFLOPS; HBM in GB/s. "half" is
# fp16 on V100 and fp16/bf16 on A100 and H100; tf32 None: fp32 matmuls run on CUDA cores.
Device = collections.namedtuple("Device", ["name", "fp32", "tf32", "half", "hbm_gbs"])
V100_PCIE = Device("V100 PCIe", 14.0, None, 112.0, 900.0)
V100_SXM2 = Device("V100 SXM2", 15.7, None, 125.0, 900.0)
A100_PCIE = Device("A100 PCIe 40GB", 19.5, 156.0, 312.0, 1555.0)
A100_SXM4 = Device("A100 SXM4 80GB", 19.5, 156.0, 312.0, 2039.0)
H100_PCIE = Device("H100 PCIe", 51.0, 378.0, 756.0, 2000.0)
H100_SXM5 = Device("H100 SXM5", 67.0, 494.7, 989.4, 3350.0)

# An 8-GPU machine; bandwidths in GB/s per direction, effective (docs/SCALING.md, "Links"):
#   host_link: a PCIe x16 link to the host, shared by gpus_per_uplink GPUs under one switch;
#   gpu0_link: what GPU 0 receives from (or sends to) all its peers together;
#   busbw: ring all-reduce bus bandwidth among the 8 GPUs, as NCCL's tests define it.
Machine = collections.namedtuple("Machine", ["name", "device", "host_link", "gpus_per_uplink",
                                             "gpu0_link", "busbw"])
MACHINES = [
    Machine("8x V100 PCIe 3.0", V100_PCIE, 12.0, 2, 12.0, 10.0),
    Machine("8x V100 SXM2 NVLink (DGX-1)", V100_SXM2, 12.0, 2, 25.0, 120.0),
    Machine("8x A100 PCIe 4.0", A100_PCIE, 24.0, 2, 24.0, 20.0),
    Machine("8x A100 SXM4 NVLink3 (DGX A100)", A100_SXM4, 24.0, 2, 200.0, 200.0),
    Machine("8x H100 PCIe 5.0", H100_PCIE, 48.0, 2, 48.0, 40.0),
    Machine("8x H100 SXM5 NVLink4 (DGX H100)", H100_SXM5, 48.0, 2, 370.0, 370.0),
]
GPUS_PER_MACHINE = 8
NETWORKS = [("100 Gb/s", 12.5), ("25 GbE", 3.125)]  # line rate in GB/s, between 2 machines
BATCH = {128: 32, 384: 8}  # per-tower batch of the tables
MODES = ("host", "gpu0", "replicated")

# Published multi-GPU BERT training figures (docs/SCALING.md gives each source), to check the
# communication term against: (label, machine, model, batch, 1-GPU examples/s, GPUs, measured
# examples/s on that many GPUs). Their 1-GPU step stands in for our compute estimate.
PUBLISHED = [
    ("NVIDIA TF2, SQuAD, large, fp16", MACHINES[1], "large-en", 6, 39.10, 8, 255.36),
    ("NVIDIA TF2, SQuAD, large, fp32", MACHINES[1], "large-en", 3, 9.85, 8, 73.03),
    ("NVIDIA TF2, SQuAD, large, fp16 (32GB)", MACHINES[1], "large-en", 12, 47.06, 8, 330.29),
    ("NVIDIA TF2, SQuAD, large, fp32 (32GB)", MACHINES[1], "large-en", 8, 11.11, 8, 85.91),
    ("NVIDIA TF2, SQuAD, large, fp16", MACHINES[3], "large-en", 76, 134.22, 8, 1048.23),
    ("NVIDIA TF2, SQuAD, large, TF32", MACHINES[3], "large-en", 38, 43.9, 8, 341.31),
    ("NVIDIA TF1, SQuAD, large, fp16 (40GB)", MACHINES[3], "large-en", 32, 102.26, 8, 518.898),
    ("DLPerf TF 2.3, pretraining, base, fp32", MACHINES[1], "base-en", 64, 112.99, 8, 805.43),
    ("DLPerf TF 2.3, pretraining, base, fp16", MACHINES[1], "base-en", 64, 228.66, 8, 1402.41),
    ("DLPerf TF 2.3, pretraining, base, fp32", MACHINES[1], "base-en", 64, 112.99, 16, 1239.3),
    ("DLPerf TF 2.3, pretraining, base, fp16", MACHINES[1], "base-en", 64, 228.66, 16, 1893.51),
]

# One configuration: a BertShape, the sequence length, the per-tower batch, "fp32" or "fp16"
# (fp16 stands for bf16 too), a Machine and --accumulation_steps. Functions below also take
# `a`, the parsed assumptions of parse_args.
Case = collections.namedtuple("Case", ["shape", "seq", "batch", "precision", "machine",
                                       "accumulation"])

# ---------------------------------------------------------------------- model arithmetic


def layer_params(hidden, intermediate):
  """Parameters of one encoder layer as modeling.py creates them.

  Q, K, V and the attention output: 4 kernels [h, h] with biases; the feed-forward kernels
  [h, i] and [i, h] with biases; two LayerNorms (gamma and beta).
  """
  return (4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden +
          2 * 2 * hidden)


def bert_params(shape, pooler=True):
  """Parameters of modeling.BertModel: embeddings, encoder and (optionally) the pooler.

  Args:
    shape: a BertShape; max_position_embeddings 512 and type_vocab_size 2, as released.
    pooler: count the pooler's dense layer.

  Returns:
    The number of parameters (task heads not included).
  """
  embeddings = (shape.vocab + TYPE_VOCAB + MAX_POSITIONS) * shape.hidden + 2 * shape.hidden
  encoder = shape.layers * layer_params(shape.hidden, shape.intermediate)
  return embeddings + encoder + (shape.hidden * shape.hidden + shape.hidden if pooler else 0)


def train_flops_per_example(shape, seq):
  """Training FLOPs of one example: 6 x matmul parameters x tokens + attention matmuls.

  Forward = 2 FLOPs per matmul weight per token plus 4 x seq^2 x hidden per layer for the
  score and context matmuls; backward = twice forward (Narayanan et al. 2021, without
  activation recomputation). Embedding lookups, softmax, LayerNorm and the heads are left out.

  Args:
    shape: a BertShape.
    seq: tokens per example.

  Returns:
    FLOPs of the forward and backward pass of one example.
  """
  matmul_weights = shape.layers * (4 * shape.hidden ** 2 + 2 * shape.hidden * shape.intermediate)
  return 6 * matmul_weights * seq + 12 * shape.layers * seq ** 2 * shape.hidden


def ring_allreduce_factor(n):
  """Bytes each of n ranks sends (and receives) in a ring all-reduce, per byte reduced."""
  return 2.0 * (n - 1) / n


def compute_seconds(case, a):
  """Seconds of one tower's forward and backward pass over one micro-batch.

  Args:
    case: a Case; fp32 means TF32 on GPUs that have it (TF 2.x's default there).
    a: the assumptions (achieved fractions of peak).

  Returns:
    batch x FLOPs per example / (datasheet peak x achieved fraction).
  """
  device = case.machine.device
  if case.precision != "fp32":
    peak, fraction = device.half, a.tensor_fraction
  elif device.tf32:  # TF 2.x runs fp32 matmuls as TF32 on Ampere and newer
    peak, fraction = device.tf32, a.tensor_fraction
  else:
    peak, fraction = device.fp32, a.fp32_fraction
  return case.batch * train_flops_per_example(case.shape, case.seq) / (peak * 1e12 * fraction)


def weight_bytes(shape):
  """fp32 bytes of all weights: the master copy, and a dense gradient."""
  return 4.0 * bert_params(shape)


def sent_gradient_bytes(case):
  """fp32 bytes of one tower's gradients as host/gpu0 send them: the word-embedding gradient
  is IndexedSlices, one row per token of the micro-batch (at most vocab rows)."""
  rows = min(case.batch * case.seq, case.shape.vocab)
  return weight_bytes(case.shape) - 4.0 * (case.shape.vocab - rows) * case.shape.hidden


def average_passes(n):
  """Memory passes over the gradient bytes to average n towers' gradients (read n, write 1)."""
  return n + 1 if n > 1 else 0


def accumulate_passes(case, a):
  """Memory passes per micro-batch to add its gradients to the accumulators (none if N = 1)."""
  return a.accumulate_passes if case.accumulation > 1 else 0


def gpu_memory_rate(case, a):
  """Bytes per second a GPU's elementwise kernels (averaging, AdamW) move."""
  return case.machine.device.hbm_gbs * 1e9 * a.hbm_fraction


def single_copy_step(mode, case, n, a):
  """Seconds per update with one copy of the variables, on the host CPU or on GPU 0.

  Every tower sends that copy's device its gradients, which it averages (and accumulates),
  and every tower reads all the weights back, on every micro-batch; AdamW runs once per update.

  Args:
    mode: "host" or "gpu0".
    case: a Case.
    n: GPUs (one tower each), at most one machine's.
    a: the assumptions.

  Returns:
    Seconds per update of case.accumulation micro-batches.
  """
  grads, weights = sent_gradient_bytes(case), weight_bytes(case.shape)
  if mode == "host":
    memory, uplink = a.host_gbs * 1e9, case.machine.host_link * 1e9
    # The GPUs behind one x16 uplink to the host send (and read) at the same time.
    link = min(n, case.machine.gpus_per_uplink) * (grads + weights) / uplink
  else:
    memory = gpu_memory_rate(case, a)
    # GPU 0's links carry every other tower's gradients in, then the weights out.
    link = (n - 1) * (grads + weights) / (case.machine.gpu0_link * 1e9)
  passes = average_passes(n) + accumulate_passes(case, a)
  micro = compute_seconds(case, a) + link + passes * grads / memory
  return case.accumulation * micro + a.optimizer_passes * weights / memory


def allreduce_seconds(n, nbytes, machine, a, network=None):
  """Seconds of a ring all-reduce of nbytes over n GPUs, sent in a.packs packed all-reduces.

  Beyond one machine the ring crosses the network, whose effective rate (line rate x
  a.network_fraction) then bounds the bus bandwidth.

  Args:
    n: GPUs in the ring; more than GPUS_PER_MACHINE means two machines.
    nbytes: bytes each GPU contributes (the dense fp32 gradients).
    machine: the Machine (its busbw).
    a: the assumptions (latencies, packs, network fraction).
    network: line rate between the machines in GB/s (used when n > GPUS_PER_MACHINE).

  Returns:
    2(n - 1)/n x nbytes / bus bandwidth + packs x 2(n - 1) ring steps x latency; 0 for n = 1.
  """
  if n == 1:
    return 0.0
  busbw, latency = machine.busbw * 1e9, a.link_latency
  if n > GPUS_PER_MACHINE:
    busbw, latency = min(busbw, network * 1e9 * a.network_fraction), a.network_latency
  return ring_allreduce_factor(n) * nbytes / busbw + a.packs * 2 * (n - 1) * latency


def replicated_step(case, n, a, network=None):
  """Seconds per update with a copy of the variables on every GPU and a ring all-reduce of
  the dense fp32 gradients once per update (after the micro-batches are accumulated locally,
  the embedding's rows as IndexedSlices, as host and gpu0 accumulate them)."""
  weights, memory = weight_bytes(case.shape), gpu_memory_rate(case, a)
  micro = compute_seconds(case, a) + accumulate_passes(case, a) * sent_gradient_bytes(case) / memory
  scale = 2 if n > 1 else 0  # the all-reduced sum times 1/n
  return (case.accumulation * micro + allreduce_seconds(n, weights, case.machine, a, network) +
          (scale + a.optimizer_passes) * weights / memory)


def step_seconds(mode, case, n, a, network=None):
  """Seconds per update.

  Args:
    mode: "host", "gpu0" or "replicated".
    case: a Case.
    n: GPUs; more than 8 (replicated only) means two machines joined by `network`.
    a: the assumptions.
    network: line rate between the machines in GB/s.

  Returns:
    Seconds per update of case.accumulation micro-batches on every GPU.
  """
  if mode == "replicated":
    return replicated_step(case, n, a, network)
  return single_copy_step(mode, case, n, a)


def speedup(mode, case, n, a, network=None):
  """Throughput on n GPUs over one GPU that holds its own variables.

  The per-tower batch is fixed (weak scaling, as scripts/benchmark.py --sweep_gpus measures).
  The baseline is replicated (= gpu0) on one GPU, so host is below 1 even there.

  Args:
    mode, case, n, a, network: as for step_seconds.

  Returns:
    n x seconds per update on the baseline / seconds per update of `mode` on n GPUs.
  """
  return n * replicated_step(case, 1, a) / step_seconds(mode, case, n, a, network)


# ------------------------------------------------------------------------------ tables


def precision_name(precision, machine):
  """How `precision` runs on the machine's GPUs under TF 2.x."""
  if precision == "fp32":
    return "fp32 (TF32)" if machine.device.tf32 else "fp32"
  return "bf16/fp16" if machine.device.tf32 else "fp16"


def worked_case(machine):
  """The case docs/SCALING.md works by hand: BERT-base (Chinese), seq 128, fp16, 32 per GPU."""
  return Case(MODELS["base-zh"], 128, 32, "fp16", machine, 1)


def params_table(a):
  """(title, headers, rows) of the parameter counts."""
  rows = [[s.name, "{:,}".format(bert_params(s)), "{:,}".format(bert_params(s, pooler=False)),
           "%.1f" % (weight_bytes(s) / 1e6)] for s in MODELS.values()]
  return ("Parameters (modeling.BertModel)",
          ["model", "parameters", "without pooler", "fp32 gradient, MB"], rows)


def flops_table(a):
  """(title, headers, rows) of the FLOPs and the 1-GPU compute time per example."""
  rows = []
  for key in ("base-zh", "large-zh"):
    for seq in (128, 384):
      shape = MODELS[key]
      row = [shape.name, seq, "%.2f" % (train_flops_per_example(shape, seq) / 1e9)]
      for machine in (MACHINES[1], MACHINES[3], MACHINES[5]):
        row += ["%.2f" % (1e3 * compute_seconds(Case(shape, seq, 1, p, machine, 1), a))
                for p in ("fp32", "fp16")]
      rows.append(row)
  return ("Training GFLOP per example, and ms per example on one GPU",
          ["model", "seq", "GFLOP", "V100 fp32", "V100 fp16", "A100 TF32", "A100 bf16",
           "H100 TF32", "H100 bf16"], rows)


def worked_table(a):
  """(title, headers, rows) of the worked case at 8 GPUs, split into compute and the rest."""
  rows = []
  for machine in MACHINES[:2]:
    case = worked_case(machine)
    compute = compute_seconds(case, a)
    for mode in MODES:
      total = step_seconds(mode, case, 8, a)
      rows.append([machine.name, mode, "%.1f" % (1e3 * compute),
                   "%.1f" % (1e3 * (total - compute)), "%.1f" % (1e3 * total),
                   "%.0f" % (8 * case.batch / total), "%.2f" % speedup(mode, case, 8, a)])
  return ("Worked example: BERT-base (Chinese), seq 128, fp16, 32 per GPU, 8 GPUs",
          ["machine", "variable_update", "compute ms", "transfers + averaging + update ms",
           "step ms", "examples/s", "speedup"], rows)


def speedup_table(a, key, seq):
  """(title, headers, rows) of the speedups of model `key` at `seq` on every machine."""
  rows = []
  for machine in MACHINES:
    for precision in ("fp32", "fp16"):
      for accumulation in (1, a.accumulation):
        case = Case(MODELS[key], seq, BATCH[seq], precision, machine, accumulation)
        row = [machine.name, precision_name(precision, machine), accumulation]
        for mode, counts in (("host", (1, 2, 4, 8)), ("gpu0", (2, 4, 8)),
                             ("replicated", (2, 4, 8))):
          row.append(" / ".join("%.2f" % speedup(mode, case, n, a) for n in counts))
        rows.append(row + ["%.2f" % speedup("replicated", case, 16, a, rate)
                           for _, rate in NETWORKS])
  return ("Speedup over one GPU: %s, seq %d, %d per GPU" % (MODELS[key].name, seq, BATCH[seq]),
          ["machine", "precision", "N", "host 1 / 2 / 4 / 8", "gpu0 2 / 4 / 8",
           "replicated 2 / 4 / 8"] + ["replicated 16, %s" % name for name, _ in NETWORKS], rows)


def sweep_table(a, mode):
  """What scripts/benchmark.py --sweep_gpus=1,2,4,8 should print for the worked case."""
  case, rows = worked_case(MACHINES[1]), []
  for n in (1, 2, 4, 8):
    rate = n * case.batch / step_seconds(mode, case, n, a)
    base = rows[0][3] if rows else rate
    rows.append([n, n, n * case.batch, rate, rate / base, rate / base / n])
  return ("Predicted --sweep_gpus=1,2,4,8 --variable_update=%s on %s (worked case)" % (
      mode, case.machine.name), ["GPUs", "towers", "global batch", "examples/s", "speedup",
                                 "scaling efficiency"],
          [row[:3] + ["%.1f" % row[3], "%.2f" % row[4], "%.2f" % row[5]] for row in rows])


def sensitivity_table(a):
  """The worked case at 8 GPUs with one input changed at a time."""
  changes = [("none (the defaults)", {}, 1.0),
             ("tensor_fraction 0.15", {"tensor_fraction": 0.15}, 1.0),
             ("tensor_fraction 0.5", {"tensor_fraction": 0.5}, 1.0),
             ("host_gbs 20", {"host_gbs": 20.0}, 1.0), ("host_gbs 80", {"host_gbs": 80.0}, 1.0),
             ("optimizer_passes 7 (a fused AdamW)", {"optimizer_passes": 7}, 1.0),
             ("all-reduce at half the bus bandwidth", {}, 0.5)]
  rows = []
  for label, overrides, busbw_scale in changes:
    changed = argparse.Namespace(**dict(vars(a), **overrides))
    row = [label]
    for machine in MACHINES[:2]:
      case = worked_case(machine._replace(busbw=machine.busbw * busbw_scale))
      row += ["%.2f" % speedup(mode, case, 8, changed) for mode in MODES]
    rows.append(row)
  return ("Sensitivity: the worked case at 8 GPUs, one input changed",
          ["input changed", "PCIe host", "PCIe gpu0", "PCIe replicated", "NVLink host",
           "NVLink gpu0", "NVLink replicated"], rows)


def published_table(a):
  """Published speedups against their own 1-GPU step plus the model's all-reduce."""
  rows = []
  for label, machine, key, batch, one, n, many in PUBLISHED:
    t1 = batch / one
    t_n = t1 + allreduce_seconds(n, weight_bytes(MODELS[key]), machine, a, NETWORKS[0][1])
    rows.append([label, machine.name, n, "%.2f" % (many / one), "%.2f" % (n * t1 / t_n)])
  return ("Published speedups against the model's all-reduce term",
          ["figure", "machine", "GPUs", "published", "model"], rows)


def all_tables(a):
  """Every table of docs/SCALING.md, in its order."""
  tables = [params_table(a), flops_table(a), worked_table(a), sensitivity_table(a)]
  tables += [speedup_table(a, key, seq) for key in ("base-zh", "large-zh") for seq in (128, 384)]
  tables += [sweep_table(a, mode) for mode in MODES]
  return tables + [published_table(a)]


def format_table(title, headers, rows, markdown):
  """The lines of one table.

  Args:
    title, headers, rows: the table; cells may be numbers or strings.
    markdown: markdown pipes, else text columns.

  Returns:
    A list of lines.
  """
  rows = [[str(cell) for cell in row] for row in [headers] + rows]
  if markdown:
    rows.insert(1, ["---"] * len(headers))
    return ["### " + title, ""] + ["| %s |" % " | ".join(row) for row in rows]
  widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
  return ["== " + title] + ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                            for row in rows]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--markdown", action="store_true", help="print markdown tables")
  parser.add_argument("--tensor_fraction", type=float, default=0.35,
                      help="achieved fraction of tensor-core peak (fp16, bf16, TF32)")
  parser.add_argument("--fp32_fraction", type=float, default=0.6,
                      help="achieved fraction of the fp32 CUDA-core peak (V100 fp32)")
  parser.add_argument("--host_gbs", type=float, default=40.0,
                      help="effective host memory bandwidth of TF's CPU update, GB/s")
  parser.add_argument("--network_fraction", type=float, default=0.3,
                      help="fraction of the network line rate the cross-machine all-reduce gets")
  parser.add_argument("--accumulation", type=int, default=4,
                      help="the second --accumulation_steps of the speedup tables")
  # Inputs with no flag; docs/SCALING.md gives the reasoning of each.
  parser.set_defaults(hbm_fraction=0.7, optimizer_passes=12, accumulate_passes=3, packs=4,
                      link_latency=10e-6, network_latency=200e-6)
  return parser.parse_args(argv)


def main(argv=None):
  a = parse_args(argv)
  for table in all_tables(a):
    print("\n".join(format_table(*table, markdown=a.markdown)) + "\n")


if __name__ == "__main__":
  main()
