# coding=utf-8
"""Tests of scripts/chip_to_cmeee.py: CHIP 2020's `text|||start end type|||` lines to CMeEE
files that --data_format=cmeee reads back, the seeded split, the overlap counts it prints,
and bad lines refused with file:line."""

import importlib.util
import json
import os

import pytest

import cli
from bert_mgpu.ner import formats

SCRIPT_PATH = cli.script_path(os.path.join("scripts", "chip_to_cmeee.py"))

# As CHIP ships them: spaces (or tabs) between start, end and type, a final "|||".
CHIP_LINES = [
    u"患者肺部感染伴发热。|||2    5    dis|||2    2    bod|||4\t5\tsym|||7    8    sym|||"
    u"7    8    dis|||",
    u"无明显不适。|||",
    u"口服阿司匹林|||2    5    dru|||2    5    dru|||",
    u"胸痛三天。|||0    1    sym|||",
    u"双肺呼吸音粗|||0    1    bod|||1    1    bod|||0    5    sym|||",
]


def load_script():
  """Imports scripts/chip_to_cmeee.py (scripts/ is not a package)."""
  spec = importlib.util.spec_from_file_location("chip_to_cmeee", SCRIPT_PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


chip_to_cmeee = load_script()


def write(path, lines, end=u""):
  with open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write(u"\n".join(lines) + end)
  return str(path)


def test_whole_file_converted(tmp_path, capsys):
  source = write(tmp_path / "val_data.txt", CHIP_LINES)  # no final line end, as CHIP's
  out = str(tmp_path / "out")
  assert chip_to_cmeee.main(["--input", source, "--output_dir", out]) == 0
  data = formats.read_cmeee(os.path.join(out, "CMeEE_dev.json"))
  assert [s.text for s in data.sentences] == [line.split("|||")[0] for line in CHIP_LINES]
  assert [s.spans for s in data.sentences] == [
      [("bod", 2, 3), ("dis", 2, 6), ("sym", 4, 6), ("dis", 7, 9), ("sym", 7, 9)], [],
      [("dru", 2, 6)], [("sym", 0, 2)], [("bod", 0, 2), ("sym", 0, 6), ("bod", 1, 2)]]
  with open(os.path.join(out, "CMeEE_dev.json"), encoding="utf-8") as f:
    first = json.load(f)[0]["entities"][0]
  assert first == {"start_idx": 2, "end_idx": 2, "type": "bod", "entity": u"肺"}
  printed = capsys.readouterr().out.splitlines()
  # 10 entities (the repeated 阿司匹林 once); inside another: 肺, 感染, both 双肺's bod;
  # 发热 shares its span; sentences 1 and 5 overlap.
  assert printed[0] == ("%s: 5 sentences, 10 entities, 4 inside another (40.0%%), 2 sharing "
                        "their span with another type, 2 sentences with overlapping "
                        "entities (40.0%%)" % source)
  assert printed[1].startswith(os.path.join(out, "CMeEE_dev.json") + ": 5 sentences, 10 ")


def test_seeded_split(tmp_path, capsys):
  source = write(tmp_path / "val_data.txt", CHIP_LINES, u"\n")
  texts = {}
  for run, seed in (("a", 3), ("b", 3), ("c", 4)):
    out = str(tmp_path / run)
    assert chip_to_cmeee.main(["--input", source, "--output_dir", out, "--split", "2,2,1",
                               "--seed", str(seed)]) == 0
    texts[run] = [[s.text for s in formats.read_cmeee(
        os.path.join(out, "CMeEE_%s.json" % name)).sentences] for name in ("train", "dev",
                                                                          "test")]
    assert [len(part) for part in texts[run]] == [2, 2, 1]
    assert sorted(sum(texts[run], [])) == sorted(line.split("|||")[0] for line in CHIP_LINES)
  assert texts["a"] == texts["b"] and texts["a"] != texts["c"]
  printed = capsys.readouterr().out.splitlines()
  assert len(printed) == 12 and printed[3].startswith(str(tmp_path / "a" / "CMeEE_test.json"))
  test = formats.read_cmeee(str(tmp_path / "a" / "CMeEE_test.json"))
  assert test.tagged  # the split's test file keeps its entities


def test_text_only_lines_give_a_test_file(tmp_path):
  source = write(tmp_path / "test1.txt", [u"患者发热。", u"", u"胸痛。"])
  out = str(tmp_path / "out")
  assert chip_to_cmeee.main(["--input", source, "--output_dir", out, "--name", "test"]) == 0
  data = formats.read_cmeee(os.path.join(out, "CMeEE_test.json"))
  assert not data.tagged and [s.text for s in data.sentences] == [u"患者发热。", u"胸痛。"]


@pytest.mark.parametrize("line,problem", [
    (u"患者发热。|||3    4    sym    x|||", '"3    4    sym    x" is not `start end type`'),
    (u"患者发热。|||3    9    sym|||", "[3, 9] is outside the text of 5 characters"),
    (u"患者发热。|||4    3    sym|||", "[4, 3] is outside"),
    (u"患者发热。|||-1    3    sym|||", "is not `start end type`"),
    (u"患者发热。", 'no "|||" but line 1 has one'),
])
def test_bad_lines_are_refused_with_file_and_line(tmp_path, capsys, line, problem):
  source = write(tmp_path / "bad.txt", [u"胸痛。|||0    1    sym|||", line])
  out = str(tmp_path / "out")
  assert chip_to_cmeee.main(["--input", source, "--output_dir", out]) == 2
  error = capsys.readouterr().err
  assert error.startswith("error: %s line 2: " % source) and problem in error, error
  assert error.count("\n") == 1 and not os.path.exists(out)


def test_bad_flags(tmp_path, capsys):
  source = write(tmp_path / "val.txt", CHIP_LINES)
  out = str(tmp_path / "out")
  assert chip_to_cmeee.main(["--input", source, "--output_dir", out, "--split", "3,2,1"]) == 2
  assert "asks for 6 sentences but the input has 5" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    chip_to_cmeee.main(["--input", source, "--output_dir", out, "--split", "3,2"])
  assert "N_train,N_dev,N_test" in capsys.readouterr().err
  assert not os.path.exists(out)


def test_runs_as_a_command(tmp_path):
  source = write(tmp_path / "val.txt", CHIP_LINES)
  result = cli.run_script(os.path.join("scripts", "chip_to_cmeee.py"),
                          ["--input=" + source, "--output_dir=" + str(tmp_path / "out")])
  cli.assert_succeeded(result)
  assert "5 sentences, 10 entities" in result.stdout
  assert formats.read_cmeee(str(tmp_path / "out" / "CMeEE_dev.json")).tagged
