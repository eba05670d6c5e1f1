"""Workload specs (``domains show --model SPEC --cluster-file YAML``): zoo names, module names,
``:NAME`` attributes, and workload files whose functions are missing, raise, or return the wrong
things."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import NASTY_STRINGS, check, files, fuzz, run_cli, workdir

from autosync_transfer.testing.workloads import embedding_classifier_source, write_cluster

GOOD = embedding_classifier_source()
#: replacements of one part of the good workload file
BODIES = {
    "good": GOOD,
    "syntax": "def build_model(:\n",
    "raises": "raise RuntimeError('boom [/]')\n",
    "exit": "import sys\nsys.exit(3)\n",
    "empty": "",
    "no-loss": GOOD.split("def loss_fn")[0],
    "model-none": GOOD.replace("return nn.Sequential(", "return None and nn.Sequential("),
    "batch-none": GOOD.replace("return ids, ids[:, 0]", "return None #"),
    "batch-str": GOOD.replace("return ids, ids[:, 0] % 3", "return 'x', 'y'"),
    "loss-nan": GOOD.replace("return nn.functional.cross_entropy(output, targets)",
                             "return output.sum() * float('nan')"),
    "loss-int": GOOD.replace("return nn.functional.cross_entropy(output, targets)", "return 1"),
    "loss-raises": GOOD.replace("return nn.functional.cross_entropy(output, targets)",
                                "raise ValueError('[red]no')"),
    "batch-size": GOOD.replace("import torch\n", "import torch\nBATCH_SIZE = -5\n"),
    "batch-size-huge": GOOD.replace("import torch\n", "import torch\nBATCH_SIZE = 10**30\n"),
    "batch-size-nan": GOOD.replace("import torch\n", "import torch\nBATCH_SIZE = float('nan')\n"),
    "no-params": GOOD.replace("nn.Sequential(nn.Embedding(30, 4), nn.Flatten(),\n"
                              "                         nn.Linear(8, 3))", "nn.Identity()"),
    "attr-int": GOOD + "\nW = 5\n",
    "attr-factory-raises": GOOD + "\ndef W():\n    raise KeyError('x')\n",
}


@fuzz(40)
@given(st.sampled_from(sorted(BODIES)), st.sampled_from(["", ":W", ":nope", ":", ":1x"]),
       st.sampled_from(["user_model", "m-odd", "x.y"]))
def test_workload_file(body: str, attr: str, stem: str) -> None:
    with workdir() as d:
        path = d / f"{stem}.py"
        path.write_text(BODIES[body])
        spec = write_cluster(d, "lab")
        before = files(d)
        res = run_cli("domains", "show", "--model", f"{path}{attr}", "--cluster-file", str(spec))
        # importing a module may leave __pycache__ beside it; nothing else may appear
        check(res, "workload specs", written={p for p in files(d) - before
                                              if "__pycache__" not in p.parts})


@fuzz(60)
@given(st.one_of(st.sampled_from(NASTY_STRINGS),
                 st.from_regex(r"zzfuzz_[a-z0-9_.]{0,12}(:[A-Za-z_]{0,5})?", fullmatch=True),
                 st.text(st.characters(codec="ascii"), max_size=20).map(lambda t: "zoo:" + t),
                 st.text(st.characters(codec="ascii", blacklist_characters="./\\"),
                         max_size=20).map(lambda t: "zzfuzz" + t)))
def test_workload_spec_text(spec: str) -> None:
    with workdir() as d:
        cluster = write_cluster(d, "lab")
        before = files(d)
        res = run_cli("domains", "show", "--model", spec, "--cluster-file", str(cluster))
        check(res, "workload specs", written=files(d) - before)
